"""``Simulator``: one Ray session and its warm client workers for many federations.

::

    import fgl_ray
    from fgl_ray.config import load_config

    with fgl_ray.Simulator() as sim:
        first = sim.run(load_config({"algorithm": "fedavg", "rounds": 20}))
        second = sim.run(load_config({"algorithm": "fedprox", "rounds": 20}))   # no start-up this time
    first.metrics          # the long-format metrics table; first.run_dir, first.summary

Ray starts (or, with ``address`` or ``RAY_ADDRESS``, joins a running cluster) in a background
thread when the simulator is created, so the caller's imports and data preparation overlap it.
Each run borrows client workers, which keep torch and PyG imported between runs and host only
that run's clients; on a cluster that runs a named pool (``fgl-ray pool start``) the runs borrow
from it instead. In-process runs (``backend: local``) never touch Ray. Whatever the workers
hosted before, a run gives the metrics a fresh set of workers gives.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Callable

from fgl_ray.runtime.timing import StartupClock

if TYPE_CHECKING:
    from fgl_ray.config import ExperimentConfig
    from fgl_ray.data.types import FederatedGraphData
    from fgl_ray.runtime.federation import RunResult


class Simulator:
    """Runs federations one after another on one Ray session and warm client workers.

    Args:
        address: a running Ray cluster to join (default ``RAY_ADDRESS``, else a local Ray starts).
        num_cpus: CPUs of a local Ray (default: all).
        progress: show each run's progress bar.
        use_pool: borrow from the cluster's named worker pool when one runs there.
    """

    def __init__(self, address: str | None = None, num_cpus: int | None = None, progress: bool = True,
                 use_pool: bool = True) -> None:
        self.address, self.num_cpus, self.progress, self.use_pool = address, num_cpus, progress, use_pool
        self._session = None

    def __enter__(self) -> "Simulator":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> "Simulator":
        """Begins starting (or joining) Ray in the background; runs wait for it when they need it.

        A local Ray's host process is started before anything heavy is imported here (see
        :mod:`fgl_ray.runtime.ray_host`), so it comes up while this process imports torch and PyG.
        """
        if self._session is None:
            host = None
            ray = sys.modules.get("ray")
            joined = ray is not None and ray.is_initialized()
            if not joined and self.address is None and not os.environ.get("RAY_ADDRESS"):
                from fgl_ray.runtime.ray_host import RayHost

                host = RayHost(self.num_cpus)
            from fgl_ray.runtime.ray_backend import RaySession

            self._session = RaySession(self.address, host, self.use_pool)
        return self

    def prestart(self, config: ExperimentConfig, clients: int) -> None:
        """Starts, in the background, the workers ``config`` plans for ``clients`` clients, so they
        import torch and PyG while the caller builds the data."""
        if config.backend == "ray":
            self.start()._session.prestart(config, clients)

    @property
    def pooled(self) -> bool:
        """Whether Ray runs borrow from the cluster's named pool (``fgl-ray pool start``)."""
        return self.start()._session.pooled

    def run(self, config: ExperimentConfig, data: FederatedGraphData | None = None, *,
            on_round: Callable | None = None, resume: bool = False, clock: StartupClock | None = None,
            progress: bool | None = None) -> RunResult:
        """Runs one federation (see :func:`~fgl_ray.runtime.federation.run_experiment`) on this
        simulator's workers; returns its folder, summary and (``.metrics``) metrics table."""
        from fgl_ray.runtime.federation import run_experiment

        clock = clock or StartupClock()
        if data is None:
            from fgl_ray.data import build_federated_data

            data = build_federated_data(config)
        clock.mark("data")
        lender = None
        if config.backend == "ray":
            lender = self.start()._session.lender()
            clock.mark("ray")
            clock.background.update(self._session.background)
        return run_experiment(config, data, progress=self.progress if progress is None else progress,
                              on_round=on_round, resume=resume, lender=lender, clock=clock)

    def close(self, wait: bool = True) -> None:
        """Ends the workers and the Ray session this simulator started (a joined cluster stays up);
        ``wait=False`` leaves Ray's shutdown to a background thread (:meth:`join` waits for it)."""
        if self._session is not None:
            self._session.close(wait=wait)

    def join(self) -> None:
        """Waits for a shutdown begun by ``close(wait=False)``."""
        if self._session is not None:
            self._session.join()
