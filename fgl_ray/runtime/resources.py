"""How many client actors to start, what each asks Ray for, and which clients each hosts.

Pure functions of the config, the client sizes and the cluster's resources, so they are
tested without Ray (and reused by Tune to size placement groups).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from fgl_ray.config import ExperimentConfig

#: The server actor mostly waits on clients; it still reserves a sliver so it fits a bundle.
SERVER_CPUS = 0.01


@dataclass(frozen=True)
class ResourcePlan:
    """Client actors' resource requests and the clients each one hosts."""

    cpus_per_actor: float
    gpus_per_actor: float
    threads_per_actor: int
    assignment: tuple[tuple[int, ...], ...]
    server_cpus: float = SERVER_CPUS

    @property
    def num_actors(self) -> int:
        return len(self.assignment)


def _floor(value: float, step: float = 1e-4) -> float:
    return math.floor(value / step) * step


def balance(sizes: Mapping[int, int], num_actors: int) -> tuple[tuple[int, ...], ...]:
    """Longest-processing-time assignment of clients to actors by size, capacity-bounded.

    Each actor hosts at most ``ceil(n / num_actors)`` clients; within that, the next largest
    client goes to the least loaded actor, so big domains do not queue on one actor.
    """
    capacity = math.ceil(len(sizes) / num_actors)
    loads = [0] * num_actors
    hosted: list[list[int]] = [[] for _ in range(num_actors)]
    for client_id in sorted(sizes, key=lambda c: (-sizes[c], c)):
        open_actors = [a for a in range(num_actors) if len(hosted[a]) < capacity]
        target = min(open_actors, key=lambda a: (loads[a], a))
        hosted[target].append(client_id)
        loads[target] += sizes[client_id]
    return tuple(tuple(sorted(h)) for h in hosted if h)


def plan_resources(config: ExperimentConfig, sizes: Mapping[int, int], cluster: Mapping[str, float]) -> ResourcePlan:
    """Plans client actors for a cluster with ``cluster`` resources (``ray.cluster_resources()``).

    Args:
        config: supplies ``clients_per_actor`` and ``torch_threads``.
        sizes: client id -> work size (nodes) used to balance actors.
        cluster: at least ``CPU``; ``GPU`` when the cluster has GPUs.
    """
    cpus = float(cluster.get("CPU", 0.0))
    if cpus < 1:
        raise ValueError(f"the Ray cluster offers {cpus} CPUs; fgl-ray needs at least one")
    if config.clients_per_actor:
        num_actors = math.ceil(len(sizes) / config.clients_per_actor)
    else:
        num_actors = min(len(sizes), math.floor(cpus))
    assignment = balance(sizes, num_actors)
    cpus_per_actor = _floor((cpus - SERVER_CPUS) / len(assignment))
    gpus = float(cluster.get("GPU", 0.0))
    gpus_per_actor = min(1.0, _floor(gpus / len(assignment))) if gpus > 0 else 0.0
    threads = config.torch_threads or max(1, round(cpus_per_actor))
    return ResourcePlan(cpus_per_actor, gpus_per_actor, threads, assignment)
