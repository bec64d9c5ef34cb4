"""``ClientActor``: hosts one or more virtual clients in one worker process."""

from __future__ import annotations

import logging
import os
from typing import Any, Sequence

import ray
import torch

from fgl_ray.config import ExperimentConfig
from fgl_ray.messages import Broadcast, ClientEvaluation, ClientFailure, ClientUpdate
from fgl_ray.runtime.client import ClientRuntime
from fgl_ray.runtime.local_backend import call_clients


logger = logging.getLogger(__name__)


def assigned_device() -> torch.device:
    """``cuda`` only when Ray assigned this actor a GPU and torch can see one, else ``cpu``.

    Ray narrows ``CUDA_VISIBLE_DEVICES`` to the GPU it assigned, which torch then numbers 0;
    with ``RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES=1`` every GPU stays visible and the
    assigned id is used instead.
    """
    gpu_ids = ray.get_gpu_ids()
    if not gpu_ids or not torch.cuda.is_available():
        return torch.device("cpu")
    index = 0
    if os.environ.get("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES", "").lower() in ("1", "true"):
        try:
            index = int(gpu_ids[0])
        except ValueError:  # GPU UUIDs: cannot map them to an index here
            index = 0
    return torch.device("cuda", index)


def assigned_gpu_share() -> float:
    """The GPU fraction Ray reserved for this actor (0 when none)."""
    return float(ray.get_runtime_context().get_assigned_resources().get("GPU", 0.0))


def cap_gpu_memory(device: torch.device, share: float) -> float | None:
    """Caps this process's CUDA caching allocator at ``share`` of the GPU's memory.

    Fractional ``num_gpus`` only schedules: nothing stops one actor from filling the GPU, so
    an actor on cuda keeps to its share (its CUDA context, a few hundred MB, is not counted).
    Returns the fraction set, or None on CPU or with a whole GPU.
    """
    if device.type != "cuda" or not 0.0 < share < 1.0:
        return None
    torch.cuda.set_per_process_memory_fraction(share, device)
    return share


@ray.remote
class ClientActor:
    """Receives its clients' partitions as object refs; each client keeps its own state."""

    def __init__(self, config: ExperimentConfig, graph_refs: Sequence[ray.ObjectRef], num_features: int,
                 num_classes: int, threads: int) -> None:
        torch.set_num_threads(threads)
        device = assigned_device()
        share = assigned_gpu_share()
        if share > 0 and device.type == "cpu":
            logger.warning("Ray assigned this actor %.4g GPU (ids %s) but torch sees no CUDA device "
                           "(torch %s); its clients train on CPU", share, ray.get_gpu_ids(), torch.__version__)
        self.memory_fraction = cap_gpu_memory(device, share)
        self.device_ = device
        self.clients = {
            graph.client_id: ClientRuntime(graph, config, num_features, num_classes, device)
            for graph in ray.get(list(graph_refs))
        }

    def run(self, method: str, broadcast: Broadcast,
            client_ids: Sequence[int]) -> list[ClientUpdate | ClientEvaluation | ClientFailure]:
        """``train`` or ``evaluate`` for each hosted client in ``client_ids``, one after another, in
        one remote call; a client that raises becomes a :class:`ClientFailure`, the others go on."""
        return call_clients(self.clients, method, broadcast, client_ids)

    def weights(self) -> dict[int, torch.Tensor]:
        """Each hosted client's current model weights."""
        return {client_id: client.weights() for client_id, client in self.clients.items()}

    def states(self) -> dict[int, bytes]:
        """Each hosted client's persistent state, for a checkpoint."""
        return {client_id: client.state_bytes() for client_id, client in self.clients.items()}

    def restore(self, states: dict[int, bytes]) -> None:
        """Loads checkpointed states into the hosted clients they name."""
        for client_id, blob in states.items():
            self.clients[client_id].load_state_bytes(blob)

    def client_state(self, client_id: int, key: str):
        """One entry of a hosted client's persistent algorithm state."""
        return self.clients[client_id].ctx.state[key]

    def device(self) -> str:
        return str(assigned_device())

    def placement(self) -> dict[str, Any]:
        """Where this actor runs: node, device, Ray's GPU ids and resources, CUDA visibility, clients."""
        return {
            "actor_id": ray.get_runtime_context().get_actor_id(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "device": str(self.device_),
            "gpu_ids": [str(i) for i in ray.get_gpu_ids()],
            "resources": dict(ray.get_runtime_context().get_assigned_resources()),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "memory_fraction": self.memory_fraction,
            "clients": sorted(self.clients),
        }
