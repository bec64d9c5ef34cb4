"""Placement-group sizing for Tune trials (pure: tested without Ray).

A trial is a whole federation. Its placement group holds, in this order:

* bundle 0 (:data:`DRIVER_BUNDLE`): the trial's actor (Tune's trainable), which runs the
  federation's server and writes the run's results; it mostly waits on the clients;
* bundles 1.. : one per client worker (``ClientActor``), each exactly the worker's request; the
  workers stay in their bundles while Tune reuses the trial actor for the next trial.

A trial of under two CPUs with ``clients_per_actor: auto`` would start a single worker beside its
own actor on the same core; its clients run in the trial's actor instead (:func:`clients_in_trial`),
which is then its only bundle.

:func:`trial_plan` gives the :class:`~fgl_ray.runtime.resources.ResourcePlan` the trial passes to
the Ray backend, and :func:`trial_bundles` the bundles built from that same plan, so every worker
the trial starts has a bundle it fits in (a bundle too small for a worker leaves it pending
forever, and the trial hangs).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence, Union

from fgl_ray.config import ExperimentConfig
from fgl_ray.runtime.resources import ResourcePlan, balance

#: CPUs reserved for the trial's actor, the federation's server (it mostly waits on the clients).
DRIVER_CPUS = 0.1
DRIVER_BUNDLE = 0
FIRST_CLIENT_BUNDLE = 1
#: The smallest CPU share a client actor may get (below this, raise clients_per_actor).
MIN_ACTOR_CPUS = 0.05

Sizes = Union[int, Mapping[int, int], Sequence[int]]


def _floor(value: float, step: float = 1e-4) -> float:
    return math.floor(value / step + 1e-9) * step


def _as_sizes(sizes: Sizes) -> dict[int, int]:
    if isinstance(sizes, int):
        return {client_id: 1 for client_id in range(sizes)}
    if isinstance(sizes, Mapping):
        return dict(sizes)
    return dict(enumerate(sizes))


def trial_plan(config: ExperimentConfig, sizes: Sizes, cpus_per_trial: float,
               gpus_per_trial: float = 0.0, cluster_gpus: float | None = None) -> ResourcePlan:
    """The resource plan of one trial whose placement group offers ``cpus_per_trial`` CPUs.

    The driver bundle comes off the top; the rest is split evenly over the client actors. Without ``clients_per_actor`` a trial starts one client actor per whole
    CPU left (at least one), as the cluster-wide planner does.

    Args:
        config: supplies ``clients_per_actor``, ``torch_threads`` and ``gpus_per_client``.
        sizes: the client count, or client id -> work size (balances clients over actors).
        cpus_per_trial: CPUs of the trial's whole placement group.
        gpus_per_trial: GPUs of the trial's placement group (0: CPU only).
        cluster_gpus: GPUs of the whole cluster (default ``gpus_per_trial``); when > 0, actors
            given no GPU are started with the GPUs hidden.

    Raises:
        ValueError: the trial's CPUs (or GPUs) cannot hold its actors; the message says what to raise.
    """
    work = _as_sizes(sizes)
    if not work:
        raise ValueError("a trial needs at least one client")
    budget = cpus_per_trial - DRIVER_CPUS
    if budget < MIN_ACTOR_CPUS:
        raise ValueError(f"cpus_per_trial={cpus_per_trial:g} leaves {budget:g} CPUs for client actors after the trial's "
                         f"own ({DRIVER_CPUS:g}, the server); give each trial at least "
                         f"{DRIVER_CPUS + MIN_ACTOR_CPUS:g} CPUs")
    if config.clients_per_actor != "auto":
        num_actors = math.ceil(len(work) / config.clients_per_actor)
    else:
        num_actors = min(len(work), max(1, math.floor(budget + 1e-9)))
    assignment = balance(work, num_actors)
    cpus_per_actor = _floor(budget / len(assignment))
    if cpus_per_actor < MIN_ACTOR_CPUS:
        raise ValueError(
            f"cpus_per_trial={cpus_per_trial:g} gives each of {len(assignment)} client actors {cpus_per_actor:g} CPUs "
            f"(< {MIN_ACTOR_CPUS:g}); raise clients_per_actor to start fewer actors or raise cpus_per_trial")
    gpus_per_actor = _gpu_share(config, len(assignment), gpus_per_trial)
    threads = config.torch_threads or max(1, round(cpus_per_actor))
    gpus_seen = gpus_per_trial if cluster_gpus is None else cluster_gpus
    return ResourcePlan(cpus_per_actor=cpus_per_actor, gpus_per_actor=gpus_per_actor, threads_per_actor=threads,
                        assignment=assignment, cluster_gpus=gpus_seen)


def _gpu_share(config: ExperimentConfig, num_actors: int, gpus_per_trial: float) -> float:
    setting = getattr(config, "gpus_per_client", "auto")
    if setting == "auto":
        return min(1.0, _floor(gpus_per_trial / num_actors)) if gpus_per_trial > 0 else 0.0
    share = float(setting)
    if share > 0 and share * num_actors > gpus_per_trial + 1e-9:
        raise ValueError(f"gpus_per_client={share:g} for {num_actors} client actors needs {share * num_actors:g} GPUs "
                         f"per trial, but gpus_per_trial is {gpus_per_trial:g}; raise gpus_per_trial or use auto")
    return share


def clients_in_trial(config: ExperimentConfig, plan: ResourcePlan) -> bool:
    """Whether the trial's own actor hosts the clients, in-process: a ``local``-backend trial, and
    a Ray trial whose automatic plan is one CPU worker (a trial of under two CPUs), where a
    second process would share the trial's core and only add its start-up (4 s here) and memory."""
    return config.backend == "local" or (config.clients_per_actor == "auto" and plan.num_actors == 1
                                         and plan.gpus_per_actor == 0)


def plan_bundles(config: ExperimentConfig, plan: ResourcePlan, cpus_per_trial: float) -> list[dict[str, float]]:
    """The placement-group bundles for a trial that runs ``plan`` (see the module docstring).

    A trial whose clients run in its own actor (:func:`clients_in_trial`) is one bundle with all
    of ``cpus_per_trial``.
    """
    if clients_in_trial(config, plan):
        return [{"CPU": float(cpus_per_trial)}]
    client = {"CPU": plan.cpus_per_actor}
    if plan.gpus_per_actor > 0:
        client["GPU"] = plan.gpus_per_actor
    return [{"CPU": DRIVER_CPUS}] + [dict(client) for _ in range(plan.num_actors)]


def trial_bundles(config: ExperimentConfig, sizes: Sizes, cpus_per_trial: float,
                  gpus_per_trial: float = 0.0) -> list[dict[str, float]]:
    """Bundles for one trial: the trial's actor, then one per client actor of :func:`trial_plan`."""
    if config.backend == "local":
        return [{"CPU": float(cpus_per_trial)}]
    return plan_bundles(config, trial_plan(config, sizes, cpus_per_trial, gpus_per_trial), cpus_per_trial)


def auto_cpus_per_trial(cluster_cpus: float, num_trials: int, max_concurrent_trials: int | None = None) -> float:
    """Splits the cluster's CPUs evenly over the trials that can run at once.

    At most one trial per whole CPU runs at once (fewer when ``max_concurrent_trials`` or the
    grid is smaller), so two trials share a 2-CPU machine and a small grid on a big cluster
    gets more client actors per trial.
    """
    if cluster_cpus < DRIVER_CPUS + MIN_ACTOR_CPUS:
        raise ValueError(f"the Ray cluster offers {cluster_cpus:g} CPUs; a trial needs at least "
                         f"{DRIVER_CPUS + MIN_ACTOR_CPUS:g}")
    concurrent = max(1, min(num_trials, math.floor(cluster_cpus), max_concurrent_trials or num_trials))
    return _floor(cluster_cpus / concurrent, 0.01)


def bundle_totals(bundles: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Resource sums over bundles (what a trial takes from the cluster)."""
    totals: dict[str, float] = {}
    for bundle in bundles:
        for key, value in bundle.items():
            totals[key] = totals.get(key, 0.0) + value
    return totals
