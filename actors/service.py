"""The simulation service: a named, detached pool of warm client workers on a running Ray cluster.

``fgl-ray pool start`` creates :class:`PoolKeeper` (named :data:`POOL_NAME` in namespace
:data:`NAMESPACE`, detached, so it outlives the command), which starts the workers and lends
them to runs. Runs connected to that cluster find it with :func:`find_pool` and borrow through
:class:`RemotePool` instead of starting actors; runs that find none start their own.

* Two runs borrowing at once never share a worker: the keeper is one actor, its calls run one
  at a time, and a lent worker is idle again only when given back.
* A lease names its borrower and must be renewed (:data:`LEASE_TTL_S`); a borrower that dies
  without giving its workers back loses them when the lease expires, and their clients are dropped.
* Workers are started with unlimited restarts: Ray replaces a worker whose process dies (its
  borrower, if any, re-hosts its clients or counts it lost, by its own ``actor_restarts``); one
  Ray cannot bring back is replaced by a new worker.
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import ray

from actors.pool import WorkerPool
from fgl_ray.config import ConfigError, ExperimentConfig
from fgl_ray.runtime.resources import ResourcePlan, WorkerShape, balance

POOL_NAME = "fgl-ray-pool"
NAMESPACE = "fgl-ray"
#: A lease not renewed for this long is taken back (its borrower died).
LEASE_TTL_S = 30.0
#: Share of the cluster's CPUs the workers take by default; the rest runs drivers and Tune trials.
WORKER_CPU_SHARE = 0.9


@dataclass
class Lease:
    workers: list
    borrower: str
    since: float = field(default_factory=time.time)
    renewed: float = field(default_factory=time.monotonic)


@ray.remote(num_cpus=0, max_restarts=0)
class PoolKeeper:
    """Owns the pool's workers and lends them, each to one run at a time."""

    def __init__(self, workers: int, shape: WorkerShape, lease_ttl_s: float = LEASE_TTL_S) -> None:
        self.shape = shape
        self.size = workers
        self.lease_ttl_s = lease_ttl_s
        self.factory = WorkerPool(max_restarts=-1)
        self.idle = [self.factory.create(shape) for _ in range(workers)]
        self.leases: dict[str, Lease] = {}
        self.started = time.time()
        self.replaced = 0

    def describe(self) -> tuple[WorkerShape, int]:
        """The workers' shape and how many there are."""
        return self.shape, self.size

    def ready(self, timeout_s: float = 300.0) -> int:
        """Waits until every worker has started (imports done); returns how many there are."""
        ray.get([worker.ready.remote() for worker in self.idle], timeout=timeout_s)
        return self.size

    def _expire(self) -> None:
        now = time.monotonic()
        for lease_id, lease in list(self.leases.items()):
            if now - lease.renewed > self.lease_ttl_s:
                self.give_back(lease_id)

    def _alive(self, worker) -> bool:
        try:
            ray.get(worker.ready.remote(), timeout=10)
            return True
        except ray.exceptions.ActorDiedError:
            return False
        except (ray.exceptions.ActorUnavailableError, ray.exceptions.GetTimeoutError):
            return True      # restarting: Ray brings it back

    def lend(self, count: int, borrower: str) -> tuple[str | None, list]:
        """Up to ``count`` idle workers under a new lease (none, and no lease, when all are lent)."""
        self._expire()
        taken = []
        while self.idle and len(taken) < count:
            worker = self.idle.pop(0)
            if not self._alive(worker):      # Ray could not restart it: a new one takes its place
                worker = self.factory.create(self.shape)
                self.replaced += 1
            taken.append(worker)
        if not taken:
            return None, []
        lease_id = uuid.uuid4().hex
        self.leases[lease_id] = Lease(taken, borrower)
        return lease_id, taken

    def renew(self, lease_id: str) -> bool:
        """Keeps a lease alive; False when it expired (its workers were taken back)."""
        lease = self.leases.get(lease_id)
        if lease is None:
            return False
        lease.renewed = time.monotonic()
        return True

    def give_back(self, lease_id: str) -> None:
        """The lease's workers drop its clients and are idle again."""
        lease = self.leases.pop(lease_id, None)
        if lease is None:
            return
        for worker in lease.workers:
            worker.release.remote(lease_id)
        self.idle += lease.workers

    def status(self) -> dict:
        """Workers, which are idle and which lent (to whom, since when)."""
        self._expire()
        return {
            "workers": self.size, "cpus_per_worker": self.shape.cpus, "gpus_per_worker": self.shape.gpus,
            "idle": len(self.idle), "started_at": self.started, "replaced": self.replaced,
            "leases": [{"lease": lease_id, "borrower": lease.borrower, "workers": len(lease.workers),
                        "since": lease.since} for lease_id, lease in self.leases.items()],
        }

    def stop(self) -> None:
        """Ends every worker (the keeper is killed by the caller)."""
        for worker in self.idle + [worker for lease in self.leases.values() for worker in lease.workers]:
            ray.kill(worker)
        self.idle, self.leases = [], {}


def find_pool():
    """A :class:`RemotePool` on the named pool of the connected cluster, or None when none runs."""
    try:
        keeper = ray.get_actor(POOL_NAME, namespace=NAMESPACE)
    except ValueError:
        return None
    return RemotePool(keeper)


def default_shape(cluster: Mapping[str, float], workers: int) -> WorkerShape:
    """:data:`WORKER_CPU_SHARE` of the cluster's CPUs (and all its GPUs) split over ``workers``."""
    cpus = math.floor(float(cluster.get("CPU", 0.0)) * WORKER_CPU_SHARE / workers * 1e4) / 1e4
    gpus = math.floor(float(cluster.get("GPU", 0.0)) / workers * 1e4) / 1e4
    return WorkerShape(cpus, min(1.0, gpus), hide_gpus=float(cluster.get("GPU", 0.0)) > 0 and gpus == 0)


def start_pool(workers: int, shape: WorkerShape, timeout_s: float = 300.0):
    """Creates the named pool on the connected cluster and waits for its workers; returns the keeper."""
    keeper = PoolKeeper.options(name=POOL_NAME, namespace=NAMESPACE, lifetime="detached").remote(workers, shape)
    ray.get(keeper.ready.remote(timeout_s))
    return keeper


def stop_pool() -> bool:
    """Ends the named pool and its workers; False when none runs."""
    try:
        keeper = ray.get_actor(POOL_NAME, namespace=NAMESPACE)
    except ValueError:
        return False
    ray.get(keeper.stop.remote())
    ray.kill(keeper)
    return True


class RemotePool:
    """Borrows from the named pool: the lender of runs connected to a cluster that runs one.

    The pool fixes the workers' shape; a run takes as many idle workers as it would start
    (``clients_per_actor``), at least one, waiting while every worker is lent.
    """

    def __init__(self, keeper, wait_s: float = 600.0) -> None:
        self.keeper = keeper
        self.shape, self.size = ray.get(keeper.describe.remote())
        self.wait_s = wait_s
        self.borrower = f"{socket.gethostname()}:{os.getpid()}"
        self.leases: dict[tuple, str] = {}
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def plan(self, config: ExperimentConfig, sizes: Mapping[int, int], data_bytes: int) -> ResourcePlan:
        if config.gpus_per_client not in ("auto", self.shape.gpus):
            raise ConfigError(f"the cluster's worker pool gives each worker {self.shape.gpus:g} GPUs, but the run asks "
                              f"for gpus_per_client={config.gpus_per_client}; use auto, or stop the pool")
        wanted = len(sizes) if config.clients_per_actor == "auto" else math.ceil(len(sizes) / config.clients_per_actor)
        count = max(1, min(wanted, self.size))
        threads = config.torch_threads or max(1, round(self.shape.cpus))
        return ResourcePlan(self.shape.cpus, self.shape.gpus, threads, balance(sizes, count),
                            cluster_gpus=float(self.shape.hide_gpus or self.shape.gpus > 0))

    def lend(self, count: int, shape: WorkerShape) -> list:
        """Up to ``count`` of the pool's idle workers (its own shape), waiting while none is idle."""
        deadline, said = time.monotonic() + self.wait_s, False
        while True:
            lease_id, workers = ray.get(self.keeper.lend.remote(count, self.borrower))
            if workers:
                self.leases[tuple(workers)] = lease_id
                self._keep_renewing()
                return workers
            if time.monotonic() > deadline:
                raise TimeoutError(f"every worker of the cluster's pool {POOL_NAME!r} stayed lent for {self.wait_s:g} s; "
                                   "try again later, or grow it (fgl-ray pool stop; fgl-ray pool start --workers N)")
            if not said:
                print(f"waiting for a free worker of the cluster's pool {POOL_NAME!r} ({self.size} workers, all lent)",
                      flush=True)
                said = True
            time.sleep(0.5)

    def _keep_renewing(self) -> None:
        if self._renewer is None:
            self._renewer = threading.Thread(target=self._renew, name="fgl-ray-lease", daemon=True)
            self._renewer.start()

    def _renew(self) -> None:
        while not self._stop.wait(LEASE_TTL_S / 3):
            for lease_id in list(self.leases.values()):
                self.keeper.renew.remote(lease_id)

    def give_back(self, workers: Sequence) -> None:
        lease_id = self.leases.pop(tuple(workers), None)
        if lease_id is not None:
            ray.get(self.keeper.give_back.remote(lease_id))

    def close(self) -> None:
        """Gives back whatever is still borrowed; the pool's workers stay warm for the next run."""
        for workers in list(self.leases):
            self.give_back(workers)
        self._stop.set()
