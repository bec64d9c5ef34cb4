"""In-process backend: one worker, the driver, hosts every client; clients run one after another, on
the config's ``device`` (one GPU serves them in turn)."""

from __future__ import annotations

from typing import Mapping, Sequence

import torch

from fgl_ray.config import ExperimentConfig, resolved_device
from fgl_ray.data.types import FederatedGraphData
from fgl_ray.messages import Broadcast, ClientEvaluation, ClientFailure, ClientUpdate
from fgl_ray.runtime.host import ClientHost
from fgl_ray.runtime.server import RoundResult, ServerRuntime
from fgl_ray.runtime.timing import StartupClock


class LocalClientPool:
    """Calls the hosted clients directly. Round timeouts are not enforced here."""

    def __init__(self, host: ClientHost) -> None:
        self.host = host

    def train(self, broadcast: Broadcast, client_ids: Sequence[int],
              timeout_s: float) -> list[ClientUpdate | ClientFailure]:
        return self.host.run("train", broadcast, client_ids)

    def evaluate(self, broadcast: Broadcast, client_ids: Sequence[int],
                 timeout_s: float) -> list[ClientEvaluation | ClientFailure]:
        return self.host.run("evaluate", broadcast, client_ids)


class LocalBackend:
    """Server and clients in this process."""

    def __init__(self, config: ExperimentConfig, data: FederatedGraphData, clock: StartupClock | None = None) -> None:
        if config.torch_threads:
            torch.set_num_threads(config.torch_threads)
        self.host = ClientHost(data.clients, config, data.num_features, data.num_classes, resolved_device(config))
        self.pool = LocalClientPool(self.host)
        self.server = ServerRuntime(config, self.pool, list(self.host.clients), data.num_features, data.num_classes)
        if clock is not None:
            clock.mark("setup")

    def run_round(self, round_index: int) -> RoundResult:
        return self.server.run_round(round_index)

    def global_weights(self) -> torch.Tensor:
        return self.server.global_weights()

    def server_models(self) -> tuple[dict[int, str], dict[str, torch.Tensor]]:
        """The client -> model-key assignment and the shared weights of every server model."""
        return self.server.server_models()

    def client_weights(self) -> dict[int, torch.Tensor]:
        return self.host.weights()

    def client_state(self, client_id: int, key: str):
        return self.host.client_state(client_id, key)

    def placements(self) -> list[dict]:
        """No actors: every client runs in this process."""
        return []

    def checkpoint(self) -> tuple[bytes, dict[int, bytes]]:
        """The server's and every client's state (see :mod:`fgl_ray.runtime.checkpoint`)."""
        return self.server.state_bytes(), self.host.states()

    def restore(self, server: bytes, clients: Mapping[int, bytes]) -> None:
        """Loads a :meth:`checkpoint` (the server last: its torch RNG state is this process's)."""
        self.host.restore(clients)
        self.server.load_state_bytes(server)

    def close(self) -> None:
        """Nothing to release."""
