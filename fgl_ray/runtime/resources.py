"""How many client actors (workers) to use, what each asks Ray for, and which clients each hosts.

Pure functions of the config, the client sizes and the cluster's resources, so they are
tested without Ray (and reused by Tune to size placement groups).

Workers: ``clients_per_actor: auto`` (the default) uses one worker per CPU the cluster offers,
at most one per client, and no more than its memory holds (each worker process costs
:data:`WORKER_BYTES` with torch and PyG imported, plus its share of the clients' data, counted
:data:`DATA_COPIES` times: the object store's copy, the worker's, and what the task derives
from it); more processes than cores would only queue on them.

GPUs: a worker asks for ``num_gpus`` only when the cluster has GPUs (a request Ray cannot
meet waits forever). Every virtual client a worker hosts trains inside it, so they share its
GPU share one after another. On a cluster with GPUs, workers that get none are started with
``CUDA_VISIBLE_DEVICES=""``: Ray 2.60 no longer blanks that variable for ``num_gpus=0`` workers
unless ``RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=1`` (ray/_private/accelerators/accelerator.py;
ray-project/ray#54928, default flipped by #62492), so they would see every GPU of their node.

The federation's server runs in the process that drives the run (the CLI, a notebook, a Tune
trial's actor), which asks Ray for nothing here.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from fgl_ray.config import ConfigError, ExperimentConfig

#: Memory of one worker process with torch, PyG and fgl-ray's client side imported (measured
#: 310-330 MB resident on Linux with torch 2.13 and PyG 2.8; rounded up for its working set).
WORKER_BYTES = 400 * 2**20
#: Copies of a client's data a federation keeps: the object store's, the worker's, the task's.
DATA_COPIES = 3

#: Environment that hides the node's GPUs from a worker that was given none.
HIDE_GPUS_ENV = {"CUDA_VISIBLE_DEVICES": ""}


@dataclass(frozen=True)
class WorkerShape:
    """A worker's resource request; workers of one shape are interchangeable."""

    cpus: float
    gpus: float = 0.0
    #: the cluster has GPUs but this worker gets none: start it with CUDA_VISIBLE_DEVICES="".
    hide_gpus: bool = False

    def options(self) -> dict[str, Any]:
        """``ClientActor.options(**...)``."""
        options: dict[str, Any] = {"num_cpus": self.cpus, "num_gpus": self.gpus}
        if self.hide_gpus and self.gpus == 0:
            options["runtime_env"] = {"env_vars": dict(HIDE_GPUS_ENV)}
        return options


@dataclass(frozen=True)
class ResourcePlan:
    """Workers' resource requests and the clients each one hosts."""

    cpus_per_actor: float
    gpus_per_actor: float
    threads_per_actor: int
    assignment: tuple[tuple[int, ...], ...]
    #: GPUs the cluster offered when planning; > 0 means workers without a share must hide them.
    cluster_gpus: float = 0.0

    @property
    def num_actors(self) -> int:
        return len(self.assignment)

    @property
    def shape(self) -> WorkerShape:
        """What each worker asks Ray for; on a cluster with GPUs, one given none must not see them."""
        return WorkerShape(self.cpus_per_actor, self.gpus_per_actor, self.cluster_gpus > 0 and self.gpus_per_actor == 0)

    def with_workers(self, sizes: Mapping[int, int], count: int) -> "ResourcePlan":
        """The same shares with the clients balanced over ``count`` workers."""
        return replace(self, assignment=balance(sizes, count))


def _floor(value: float, step: float = 1e-4) -> float:
    return round(math.floor(value / step) * step, 10)


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


def _spread(num_actors: int, hosts: Sequence[tuple[float, float]], fixed_gpus: float | None,
            share_gpus: bool) -> list[int] | None:
    """Actors per host, greedily maximising the smallest per-actor share (None: they do not fit).

    ``hosts`` are (CPUs, GPUs) of the nodes that may hold client actors. A fixed GPU share caps
    each host at ``floor(GPUs / share)`` actors; an auto share balances CPUs and GPUs together,
    each relative to its cluster total, so no node is asked for more than it has.
    """
    total_cpus = sum(c for c, _ in hosts) or 1.0
    total_gpus = sum(g for _, g in hosts) or 1.0
    caps = [math.floor(g / fixed_gpus + 1e-9) if fixed_gpus else num_actors for _, g in hosts]
    counts = [0] * len(hosts)

    def room(k: int) -> float:
        cpus, gpus = hosts[k]
        share = cpus / total_cpus
        if share_gpus:
            share = min(share, gpus / total_gpus)
        return share / (counts[k] + 1)

    for _ in range(num_actors):
        open_hosts = [k for k in range(len(hosts)) if counts[k] < caps[k]]
        if not open_hosts:
            return None
        best = max(open_hosts, key=lambda k: (room(k), -k))
        counts[best] += 1
    return counts


def _describe(cpus: float, gpus: float) -> str:
    return f"{cpus:g} CPUs and {gpus:g} GPUs"


def local_gpu_problem(config: ExperimentConfig, visible_gpus: int) -> str | None:
    """Why a fixed GPU share cannot run on the Ray session this process would start itself (one with
    ``visible_gpus`` GPUs), before any Ray process starts; None when it can, or when Ray joins an
    existing cluster (``RAY_ADDRESS``), whose GPUs only the cluster knows."""
    share = config.gpus_per_client
    if config.backend != "ray" or share == "auto" or float(share) == 0 or visible_gpus > 0 \
            or os.environ.get("RAY_ADDRESS"):
        return None
    return (f"gpus_per_client={float(share):g} asks for a GPU share per client actor, but this machine has no "
            "GPU, so the actors would wait forever; use --gpus-per-client auto or 0 to train on CPUs, or set "
            "RAY_ADDRESS to a cluster with GPU nodes")


def memory_cap(memory: float, data_bytes: int) -> int:
    """The most workers ``memory`` bytes hold besides :data:`DATA_COPIES` copies of the data (at least 1)."""
    return max(1, math.floor((memory - DATA_COPIES * data_bytes) / WORKER_BYTES))


def plan_resources(config: ExperimentConfig, sizes: Mapping[int, int], cluster: Mapping[str, float],
                   nodes: Sequence[Mapping[str, float]] | None = None, data_bytes: int = 0) -> ResourcePlan:
    """Plans client workers for a cluster with ``cluster`` resources (``ray.cluster_resources()``).

    Args:
        config: supplies ``clients_per_actor``, ``torch_threads`` and ``gpus_per_client``.
        sizes: client id -> work size (nodes) used to balance workers.
        cluster: at least ``CPU``; ``GPU`` when the cluster has GPUs; ``memory`` (bytes) bounds the
            number of workers under ``clients_per_actor: auto``.
        nodes: optional per-node resources (alive nodes of ``ray.nodes()``). With them the
            shares are chosen so that every worker fits on some node (GPU workers only on GPU
            nodes); without them the cluster is treated as one node.
        data_bytes: the size of every client's partition together (see :func:`memory_cap`).

    Raises:
        ValueError: no CPU; ``gpus_per_client`` > 0 on a cluster without GPUs; a fixed GPU share
            that the cluster's GPUs cannot hold for ``clients_per_actor``'s number of workers.
    """
    cpus = float(cluster.get("CPU", 0.0))
    if cpus < 1:
        raise ValueError(f"the Ray cluster offers {cpus} CPUs; fgl-ray needs at least one")
    gpus = float(cluster.get("GPU", 0.0))
    setting = config.gpus_per_client
    fixed = None if setting == "auto" else float(setting)
    use_gpus = gpus > 0 if fixed is None else fixed > 0
    if use_gpus and gpus <= 0:
        raise ConfigError(
            f"gpus_per_client={fixed:g} asks Ray for a GPU share per client actor, but the Ray cluster has "
            f"{_describe(cpus, gpus)}: the actors would wait forever. Set gpus_per_client to auto or 0 to "
            "train on CPUs, or start Ray on GPU nodes (ray start --num-gpus=N, or cluster.yaml's GPU workers)")

    per_node = [dict(node) for node in nodes] if nodes else [dict(cluster)]
    hosts = [(float(n.get("CPU", 0.0)), float(n.get("GPU", 0.0))) for n in per_node]
    hosts = [(c, g) for c, g in hosts if c > 0 and (g > 0 or not use_gpus)]
    host_cpus = sum(c for c, _ in hosts)
    if not hosts or host_cpus < 1:
        where = "its GPU nodes" if use_gpus else "its nodes"
        fix = "; set gpus_per_client to 0 to train on CPU nodes, or give the GPU nodes CPUs" if use_gpus else ""
        raise ValueError(f"the Ray cluster ({_describe(cpus, gpus)}) offers {host_cpus:g} CPUs on {where} "
                         f"for client actors; fgl-ray needs at least one{fix}")

    gpu_room = sum(math.floor(g / fixed + 1e-9) for _, g in hosts) if use_gpus and fixed else None
    if config.clients_per_actor != "auto":
        num_actors = math.ceil(len(sizes) / config.clients_per_actor)
        if gpu_room is not None and num_actors > gpu_room:
            raise ValueError(
                f"gpus_per_client={fixed:g} for each of {num_actors} client actors (clients_per_actor="
                f"{config.clients_per_actor}) needs {num_actors * fixed:g} GPUs, but the cluster's GPU nodes "
                f"hold only {gpu_room} such actors; lower gpus_per_client (auto shares the GPUs), raise "
                "clients_per_actor to start fewer actors, or add GPUs")
    else:
        num_actors = min(len(sizes), math.floor(host_cpus))
        if "memory" in cluster:
            num_actors = min(num_actors, memory_cap(float(cluster["memory"]), data_bytes))
        if gpu_room is not None:
            if gpu_room < 1:
                raise ValueError(
                    f"gpus_per_client={fixed:g} does not fit on any GPU node of the cluster "
                    f"({_describe(cpus, gpus)}); lower gpus_per_client or use auto")
            num_actors = min(num_actors, gpu_room)
    assignment = balance(sizes, num_actors)
    counts = _spread(len(assignment), hosts, fixed if use_gpus else None, use_gpus and fixed is None)
    assert counts is not None  # the actor count was bounded by the GPU room above
    used = [(host, n) for host, n in zip(hosts, counts) if n]
    cpus_per_actor = _floor(min(c / n for (c, _), n in used))
    if not use_gpus:
        gpus_per_actor = 0.0
    elif fixed is not None:
        gpus_per_actor = fixed
    else:
        gpus_per_actor = min(1.0, _floor(min(g / n for (_, g), n in used)))
    threads = config.torch_threads or max(1, round(cpus_per_actor))
    return ResourcePlan(cpus_per_actor, gpus_per_actor, threads, assignment, cluster_gpus=gpus)
