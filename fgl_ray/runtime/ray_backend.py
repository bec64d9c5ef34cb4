"""Ray backend: the federation's clients on borrowed client workers, its server in this process.

The driver (the CLI, a notebook, a Tune trial's actor) runs the server: it puts each client's
partition into the object store once, borrows workers from a lender (a :class:`~actors.pool.WorkerPool`
it owns, or the named pool of a running cluster), has them host the clients under a lease, and
runs the rounds against them; the broadcast is ``ray.put`` once per server state and every
worker call gets the same reference. Closing gives the workers back, warm, for the next run.

This module and :mod:`fgl_ray.runtime.session` are the only ones under ``fgl_ray/runtime`` that
import Ray.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Iterator, Mapping, Protocol, Sequence

import ray
import torch

from actors.pool import RayClientPool, WorkerPool
from fgl_ray.config import ExperimentConfig
from fgl_ray.data.types import FederatedGraphData
from fgl_ray.interrupts import interrupt_on_sigterm
from fgl_ray.runtime.memory import return_freed_memory
from fgl_ray.runtime.ray_host import RayHost
from fgl_ray.runtime.resources import ResourcePlan, WorkerShape, plan_resources
from fgl_ray.runtime.server import RoundResult, ServerRuntime
from fgl_ray.runtime.timing import StartupClock

LOCAL_RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


def _init_ray(address: str | None, num_cpus: int | None) -> None:
    for key, value in LOCAL_RAY_ENV.items():
        os.environ.setdefault(key, value)
    ray.init(address=address, num_cpus=num_cpus, include_dashboard=False, log_to_driver=True, configure_logging=False)


@contextlib.contextmanager
def ray_session(num_cpus: int | None = None, address: str | None = None) -> Iterator[None]:
    """Uses the running Ray session, or starts (or joins) one and always shuts it down afterwards."""
    if ray.is_initialized():
        yield
        return
    _init_ray(address, num_cpus)
    previous = None
    if threading.current_thread() is threading.main_thread():   # Ray's own handler dumps and kills
        previous = signal.signal(signal.SIGTERM, interrupt_on_sigterm)
    try:
        yield
    finally:
        ray.shutdown()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


class _NotMainThread(logging.Filter):
    """Drops Ray's note that it set no SIGTERM handler from a background thread: fgl-ray sets its own."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "SIGTERM handler is not set" not in record.getMessage()


class Lender(Protocol):
    """Where a federation borrows its workers from."""

    def plan(self, config: ExperimentConfig, sizes: Mapping[int, int], data_bytes: int) -> ResourcePlan: ...

    def lend(self, count: int, shape: WorkerShape) -> list[ray.actor.ActorHandle]: ...

    def give_back(self, workers: Sequence[ray.actor.ActorHandle]) -> None: ...

    def close(self) -> None: ...


class OwnWorkers(WorkerPool):
    """A :class:`WorkerPool` planned from the whole cluster's resources (a Simulator's, or one run's)."""

    def plan(self, config: ExperimentConfig, sizes: Mapping[int, int], data_bytes: int) -> ResourcePlan:
        nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
        return plan_resources(config, sizes, ray.cluster_resources(), nodes, data_bytes)


class RayBackend:
    """One federation on borrowed workers (see the module docstring).

    Args:
        config, data: the run.
        lender: where the workers come from; by default a pool of this run's own, ended on close.
        plan: a fixed resource plan (a Tune trial's); by default the lender plans it.
        clock: stamps ``ship``, ``workers`` and ``setup`` of the start-up.
    """

    def __init__(self, config: ExperimentConfig, data: FederatedGraphData, lender: Lender | None = None,
                 plan: ResourcePlan | None = None, clock: StartupClock | None = None) -> None:
        if not ray.is_initialized():
            raise RuntimeError("the Ray backend needs a running Ray session; wrap the run in ray_session() or use "
                               "fgl_ray.Simulator")
        self.config = config
        self.clock = clock or StartupClock()
        self.lender = lender if lender is not None else OwnWorkers()
        self._own_lender = lender is None
        sizes = {graph.client_id: int(graph.data.num_nodes) for graph in data.clients}
        self.plan = plan or self.lender.plan(config, sizes, data.nbytes)
        hosted = sorted(c for group in self.plan.assignment for c in group)
        if hosted != sorted(sizes):
            raise ValueError(f"the resource plan hosts clients {hosted}, but the data has clients {sorted(sizes)}")
        self.graph_refs = {graph.client_id: ray.put(graph.packed()) for graph in data.clients}
        return_freed_memory()   # what building and packing the partitions freed
        self.clock.mark("ship")
        self.workers = self.lender.lend(self.plan.num_actors, self.plan.shape)
        if len(self.workers) != self.plan.num_actors:   # a shared pool lent fewer: rebalance over them
            self.plan = self.plan.with_workers(sizes, len(self.workers))
        self.lease = uuid.uuid4().hex
        self._host_args = (config, data.num_features, data.num_classes, self.plan.threads_per_actor)
        try:
            ray.get([worker.ready.remote() for worker in self.workers])
            self.clock.mark("workers")
            self._placements = ray.get([self._host(worker) for worker in self.workers])
        except BaseException:
            self._give_back()
            raise
        self.clock.mark("setup")
        self.pool = RayClientPool(self.workers, self.plan.assignment, self.lease, self._host, config.actor_restarts)
        self.server = ServerRuntime(config, self.pool, sorted(sizes), data.num_features, data.num_classes)

    def _host(self, worker: ray.actor.ActorHandle) -> ray.ObjectRef:
        """Starts hosting this federation's clients on ``worker`` (again, after a restart)."""
        config, num_features, num_classes, threads = self._host_args
        hosted = self.plan.assignment[self.workers.index(worker)]
        return worker.host.remote(self.lease, config, [self.graph_refs[c] for c in hosted], num_features,
                                  num_classes, threads)

    def run_round(self, round_index: int) -> RoundResult:
        return self.server.run_round(round_index)

    def global_weights(self) -> torch.Tensor:
        return self.server.global_weights()

    def server_models(self) -> tuple[dict[int, str], dict[str, torch.Tensor]]:
        """The client -> model-key assignment and the shared weights of every server model."""
        return self.server.server_models()

    def client_weights(self) -> dict[int, torch.Tensor]:
        """Weights held inside every worker right now."""
        return self.pool.weights()

    def client_state(self, client_id: int, key: str):
        """One entry of a client's persistent state, read inside the worker that hosts it."""
        return self.pool.client_state(client_id, key)

    def placements(self) -> list[dict]:
        """Each worker's node, device, GPU ids, resources and clients (as it started hosting them)."""
        return list(self._placements)

    def checkpoint(self) -> tuple[bytes, dict[int, bytes]]:
        """The server's and every client's state (see :mod:`fgl_ray.runtime.checkpoint`)."""
        return self.server.state_bytes(), self.pool.checkpoint()

    def restore(self, server: bytes, clients: Mapping[int, bytes]) -> None:
        self.pool.restore(clients)
        self.server.load_state_bytes(server)

    def _give_back(self) -> None:
        for worker in self.workers:
            worker.release.remote(self.lease)
        self.lender.give_back(self.workers)
        if self._own_lender:
            self.lender.close()

    def close(self) -> None:
        """The workers drop this federation's clients and go back to their lender."""
        if self.workers:
            self._give_back()
            self.workers = []



class RaySession:
    """Ray for a :class:`~fgl_ray.runtime.simulator.Simulator`, started or joined in the background.

    A local Ray runs in a host process of its own (``host``, :mod:`fgl_ray.runtime.ray_host`),
    started before the caller's imports, and the driver joins it in a background thread;
    :meth:`prestart` then starts client workers as soon as Ray is up (they import torch and PyG
    meanwhile). With an ``address`` (or ``RAY_ADDRESS``) the session joins that cluster instead,
    and borrows from its named worker pool when one runs there (:mod:`actors.service`). A Ray
    session already open in this process is used as it is and left open.
    """

    def __init__(self, address: str | None = None, host: RayHost | None = None, use_pool: bool = True) -> None:
        self.owns_ray = not ray.is_initialized()
        self.background: dict[str, float] = {}
        self._started = time.time() if host is None else host.started
        self.host = host if self.owns_ray else None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="fgl-ray-session")
        self._future: Future = self._executor.submit(self._start, address, use_pool)
        self._lender: Lender | None = None
        self._closed = False

    def _start(self, address: str | None, use_pool: bool) -> Lender:
        if self.owns_ray:
            quiet = _NotMainThread()
            logging.getLogger("ray._private.worker").addFilter(quiet)
            try:
                _init_ray(self.host.address() if self.host is not None else address, None)
            finally:
                logging.getLogger("ray._private.worker").removeFilter(quiet)
        from actors.service import find_pool

        lender = (find_pool() if use_pool else None) or OwnWorkers()
        self.background["ray"] = time.time() - self._started
        return lender

    def prestart(self, config: ExperimentConfig, clients: int) -> None:
        """Starts the workers ``config`` would plan for ``clients`` clients (in the background)."""
        def start(lender: Lender) -> Lender:
            if isinstance(lender, OwnWorkers):
                plan = lender.plan(config, {client: 1 for client in range(clients)}, 0)
                lender.start(plan.num_actors, plan.shape)
            return lender

        previous = self._future
        self._future = self._executor.submit(lambda: start(previous.result()))

    def lender(self) -> Lender:
        """The lender, once Ray is up (waits for the background start; its errors are raised here)."""
        if self._lender is None:
            self._lender = self._future.result()
        return self._lender

    @property
    def pooled(self) -> bool:
        """Whether runs borrow from a named pool of the cluster (a service) rather than own workers."""
        return not isinstance(self.lender(), OwnWorkers)

    def close(self, wait: bool = True) -> None:
        """Ends the own workers (a pool's borrowed ones go back to it) and leaves Ray if this session
        joined it; a local Ray's host shuts it down on its own, without the caller waiting.
        ``wait=False`` leaves Ray in the background (:meth:`join` waits for that)."""
        if not self._closed:
            self._closed = True
            try:
                lender = self.lender()
            except Exception:     # Ray never came up: nothing to end but the host
                lender = None
            if lender is not None:
                lender.close()
            if self.owns_ray:
                self._future = self._executor.submit(self._leave)
        if wait:
            self.join()

    def _leave(self) -> None:
        ray.shutdown()
        if self.host is not None:
            self.host.stop()

    def join(self) -> None:
        """Waits for this process to have left Ray (after ``close(wait=False)``)."""
        if self._closed:
            self._future.result()
            self._executor.shutdown(wait=True)
