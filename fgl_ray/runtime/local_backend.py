"""In-process backend: every client lives in the driver; clients run one after another."""

from __future__ import annotations

from typing import Mapping, Sequence

import torch

from fgl_ray.config import ExperimentConfig
from fgl_ray.data.types import FederatedGraphData
from fgl_ray.messages import Broadcast, ClientEvaluation, ClientFailure, ClientUpdate
from fgl_ray.runtime.client import ClientRuntime
from fgl_ray.runtime.server import RoundResult, ServerRuntime


def describe_error(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def call_clients(clients: Mapping[int, ClientRuntime], method: str, broadcast: Broadcast,
                 client_ids: Sequence[int]) -> list[ClientUpdate | ClientEvaluation | ClientFailure]:
    """``method`` (``train`` or ``evaluate``) of each client in turn; a client that raises becomes a
    :class:`ClientFailure` and never stops the others (shared by this backend and the client actors)."""
    answers = []
    for client_id in client_ids:
        try:
            answers.append(getattr(clients[client_id], method)(broadcast))
        except Exception as error:  # a failing client is reported, never fatal
            answers.append(ClientFailure(client_id, method, describe_error(error)))
    return answers


class LocalClientPool:
    """Calls :class:`ClientRuntime` objects directly. Round timeouts are not enforced here."""

    def __init__(self, clients: dict[int, ClientRuntime]) -> None:
        self.clients = clients

    def train(self, broadcast: Broadcast, client_ids: Sequence[int],
              timeout_s: float) -> list[ClientUpdate | ClientFailure]:
        return call_clients(self.clients, "train", broadcast, client_ids)

    def evaluate(self, broadcast: Broadcast, client_ids: Sequence[int],
                 timeout_s: float) -> list[ClientEvaluation | ClientFailure]:
        return call_clients(self.clients, "evaluate", broadcast, client_ids)


class LocalBackend:
    """Server and clients in this process."""

    def __init__(self, config: ExperimentConfig, data: FederatedGraphData) -> None:
        if config.torch_threads:
            torch.set_num_threads(config.torch_threads)
        clients = {g.client_id: ClientRuntime(g, config, data.num_features, data.num_classes) for g in data.clients}
        self.pool = LocalClientPool(clients)
        self.server = ServerRuntime(config, self.pool, list(clients), data.num_features, data.num_classes)

    def run_round(self, round_index: int) -> RoundResult:
        return self.server.run_round(round_index)

    def global_weights(self) -> torch.Tensor:
        return self.server.global_weights()

    def server_models(self) -> tuple[dict[int, str], dict[str, torch.Tensor]]:
        """The client -> model-key assignment and the shared weights of every server model."""
        return self.server.server_models()

    def client_weights(self) -> dict[int, torch.Tensor]:
        return {cid: client.weights() for cid, client in self.pool.clients.items()}

    def client_state(self, client_id: int, key: str):
        return self.pool.clients[client_id].ctx.state[key]

    def placements(self) -> list[dict]:
        """No actors: every client runs in this process."""
        return []

    def checkpoint(self) -> tuple[bytes, dict[int, bytes]]:
        """The server's and every client's state (see :mod:`fgl_ray.runtime.checkpoint`)."""
        return self.server.state_bytes(), {cid: client.state_bytes() for cid, client in self.pool.clients.items()}

    def restore(self, server: bytes, clients: Mapping[int, bytes]) -> None:
        """Loads a :meth:`checkpoint` (the server last: its torch RNG state is this process's)."""
        for client_id, blob in clients.items():
            self.pool.clients[client_id].load_state_bytes(blob)
        self.server.load_state_bytes(server)

    def close(self) -> None:
        """Nothing to release."""
