"""``ClientActor``: hosts one or more virtual clients in one worker process."""

from __future__ import annotations

from typing import Sequence

import ray
import torch

from fgl_ray.config import ExperimentConfig
from fgl_ray.messages import Broadcast, ClientEvaluation, ClientUpdate
from fgl_ray.runtime.client import ClientRuntime


def assigned_device() -> torch.device:
    """``cuda`` only when Ray assigned this actor a GPU and torch can see one."""
    if ray.get_gpu_ids() and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


@ray.remote
class ClientActor:
    """Receives its clients' partitions as object refs; each client keeps its own state."""

    def __init__(self, config: ExperimentConfig, graph_refs: Sequence[ray.ObjectRef], num_features: int,
                 num_classes: int, threads: int) -> None:
        torch.set_num_threads(threads)
        device = assigned_device()
        self.clients = {
            graph.client_id: ClientRuntime(graph, config, num_features, num_classes, device)
            for graph in ray.get(list(graph_refs))
        }

    def train(self, broadcast: Broadcast, client_id: int) -> ClientUpdate:
        return self.clients[client_id].train(broadcast)

    def evaluate(self, broadcast: Broadcast, client_id: int) -> ClientEvaluation:
        return self.clients[client_id].evaluate(broadcast)

    def weights(self) -> dict[int, torch.Tensor]:
        """Each hosted client's current model weights."""
        return {client_id: client.weights() for client_id, client in self.clients.items()}

    def client_state(self, client_id: int, key: str):
        """One entry of a hosted client's persistent algorithm state."""
        return self.clients[client_id].ctx.state[key]

    def device(self) -> str:
        return str(assigned_device())
