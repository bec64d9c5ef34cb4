"""The virtual clients one worker hosts for one federation.

A worker (the driver process for the in-process backend, a warm ``ClientActor`` on Ray) hosts
the clients of whichever federation it is lent to. Everything that belongs to a run (the
clients' data as their task holds it, models, optimizers, algorithm state) lives in the
:class:`ClientHost` built for that run and is dropped with it; every random draw is seeded from
(seed, round, client), so a worker that hosted other federations before gives exactly a fresh
one's results.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import torch

from fgl_ray.config import ExperimentConfig
from fgl_ray.data.types import ClientGraph
from fgl_ray.messages import Broadcast, ClientEvaluation, ClientFailure, ClientUpdate
from fgl_ray.runtime.client import ClientRuntime


def describe_error(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def call_clients(clients: Mapping[int, ClientRuntime], method: str, broadcast: Broadcast,
                 client_ids: Sequence[int]) -> list[ClientUpdate | ClientEvaluation | ClientFailure]:
    """``method`` (``train`` or ``evaluate``) of each client in turn; a client that raises becomes a
    :class:`ClientFailure` and never stops the others."""
    answers = []
    for client_id in client_ids:
        try:
            answers.append(getattr(clients[client_id], method)(broadcast))
        except Exception as error:  # a failing client is reported, never fatal
            answers.append(ClientFailure(client_id, method, describe_error(error)))
    return answers


class ClientHost:
    """The clients of one federation on one worker."""

    def __init__(self, graphs: Iterable[ClientGraph], config: ExperimentConfig, num_features: int, num_classes: int,
                 device: torch.device | str = "cpu") -> None:
        self.clients = {graph.client_id: ClientRuntime(graph, config, num_features, num_classes, device)
                        for graph in graphs}

    def run(self, method: str, broadcast: Broadcast,
            client_ids: Sequence[int]) -> list[ClientUpdate | ClientEvaluation | ClientFailure]:
        """``train`` or ``evaluate`` for the hosted clients in ``client_ids``, one after another."""
        return call_clients(self.clients, method, broadcast, client_ids)

    def weights(self) -> dict[int, torch.Tensor]:
        """Each hosted client's current model weights."""
        return {client_id: client.weights() for client_id, client in self.clients.items()}

    def states(self) -> dict[int, bytes]:
        """Each hosted client's persistent state, for a checkpoint."""
        return {client_id: client.state_bytes() for client_id, client in self.clients.items()}

    def restore(self, states: Mapping[int, bytes]) -> None:
        """Loads checkpointed states into the hosted clients they name."""
        for client_id, blob in states.items():
            self.clients[client_id].load_state_bytes(blob)

    def client_state(self, client_id: int, key: str):
        """One entry of a hosted client's persistent algorithm state."""
        return self.clients[client_id].ctx.state[key]
