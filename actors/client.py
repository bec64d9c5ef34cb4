"""``ClientActor``: a warm worker process that hosts the virtual clients of one federation at a time.

The process imports torch, PyG and fgl-ray's client side once, when it starts, and then takes
federation after federation: :meth:`ClientActor.host` builds the clients of a run under a lease
(a token naming that run), every later call names the lease, and :meth:`ClientActor.release`
drops them. A call naming another lease is refused, so a late call of a finished run can never
touch the clients of the next one.
"""

from __future__ import annotations

import gc
import logging
import os
from typing import Any, Sequence

import ray
import torch

from fgl_ray.messages import Broadcast, ClientEvaluation, ClientFailure, ClientUpdate
from fgl_ray.runtime.memory import return_freed_memory

logger = logging.getLogger(__name__)


class LeaseError(RuntimeError):
    """A call for a federation this worker does not host (any more)."""


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
    """A worker: imports what clients need once, then hosts one federation's clients at a time."""

    def __init__(self) -> None:
        from fgl_ray.imports import defer_pyg_datasets

        defer_pyg_datasets()
        import fgl_ray.runtime.host  # noqa: F401  (torch, PyG, models, tasks, algorithms: imported now, once)

        device = assigned_device()
        share = assigned_gpu_share()
        if share > 0 and device.type == "cpu":
            logger.warning("Ray assigned this actor %.4g GPU (ids %s) but torch sees no CUDA device "
                           "(torch %s); its clients train on CPU", share, ray.get_gpu_ids(), torch.__version__)
        self.memory_fraction = cap_gpu_memory(device, share)
        self.device_ = device
        self.lease: str | None = None
        self.host_ = None

    def ready(self) -> str:
        """Answers once the process is up and its imports are done (the device it trains on)."""
        return str(self.device_)

    def host(self, lease: str, config, graph_refs: Sequence[ray.ObjectRef], num_features: int, num_classes: int,
             threads: int) -> dict[str, Any]:
        """Builds the clients of the federation ``lease`` from their partitions; drops any others."""
        from fgl_ray.runtime.host import ClientHost

        self.release(self.lease)
        torch.set_num_threads(threads)
        graphs = [graph.unpacked() for graph in ray.get(list(graph_refs))]
        self.host_ = ClientHost(graphs, config, num_features, num_classes, self.device_)
        del graphs
        return_freed_memory()   # the deserialised partitions' intermediates, and the previous run's clients
        self.lease = lease
        return self.placement()

    def release(self, lease: str | None) -> None:
        """Drops the clients of ``lease`` (nothing when this worker hosts another one)."""
        if lease is not None and lease == self.lease:
            self.lease, self.host_ = None, None
            gc.collect()
            return_freed_memory()   # an idle worker keeps only its imports

    def _hosting(self, lease: str):
        if self.host_ is None or lease != self.lease:
            raise LeaseError(f"this worker hosts {'no federation' if self.lease is None else 'another federation'}, "
                             f"not lease {lease}")
        return self.host_

    def run(self, lease: str, method: str, broadcast: Broadcast,
            client_ids: Sequence[int]) -> list[ClientUpdate | ClientEvaluation | ClientFailure]:
        """``train`` or ``evaluate`` for each hosted client in ``client_ids``, one after another, in
        one remote call; a client that raises becomes a :class:`ClientFailure`, the others go on."""
        return self._hosting(lease).run(method, broadcast, client_ids)

    def weights(self, lease: str) -> dict[int, torch.Tensor]:
        """Each hosted client's current model weights."""
        return self._hosting(lease).weights()

    def states(self, lease: str) -> dict[int, bytes]:
        """Each hosted client's persistent state, for a checkpoint."""
        return self._hosting(lease).states()

    def restore(self, lease: str, states: dict[int, bytes]) -> None:
        """Loads checkpointed states into the hosted clients they name."""
        self._hosting(lease).restore(states)

    def client_state(self, lease: str, client_id: int, key: str):
        """One entry of a hosted client's persistent algorithm state."""
        return self._hosting(lease).client_state(client_id, key)

    def placement(self) -> dict[str, Any]:
        """Where this actor runs: node, device, Ray's GPU ids and resources, CUDA visibility, clients."""
        context = ray.get_runtime_context()
        return {
            "actor_id": context.get_actor_id(),
            "node_id": context.get_node_id(),
            "pid": os.getpid(),
            "device": str(self.device_),
            "gpu_ids": [str(i) for i in ray.get_gpu_ids()],
            "resources": dict(context.get_assigned_resources()),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "memory_fraction": self.memory_fraction,
            "clients": sorted(self.host_.clients) if self.host_ is not None else [],
        }
