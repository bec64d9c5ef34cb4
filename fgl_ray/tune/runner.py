"""Runs a validated :class:`~fgl_ray.tune.grid.Grid` as a ``tune.Tuner``: one trial per point.

Every trial is a whole federation: :class:`FederationTrainable` (Tune's class trainable) runs one
round per Tune iteration and reports it. Its placement group (``tune.PlacementGroupFactory``)
holds a bundle for the trial's actor, which runs the federation's server, and one per client
worker of :func:`~fgl_ray.tune.resources.trial_plan`; the workers are started into those bundles
and the trial hands the same plan to the Ray backend. Tune reuses a trial's actor for the next
trial with the same bundles (``reuse_actors``): :meth:`FederationTrainable.reset_config` ends
the federation and starts the next one on the same, warm, workers. A trial of under two CPUs
(``clients_per_actor: auto``) hosts its clients in its own actor, without workers
(:func:`~fgl_ray.tune.resources.clients_in_trial`).

``resume=True`` restores the Tune experiment in ``<grid folder>/tune``: finished trials are kept
as they are, unfinished ones are run again and errored ones restarted from scratch
(``Tuner.restore(resume_unfinished=True, restart_errored=True)``).
"""

from __future__ import annotations

import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import ray
from ray import tune

from fgl_ray.config import ExperimentConfig
from fgl_ray.data import build_federated_data
from fgl_ray.data.types import FederatedGraphData
from fgl_ray.results.summary import AVG_KEY
from fgl_ray.results.writer import ALL_DOMAINS, SERVER_ID
from fgl_ray.runtime.checkpoint import CHECKPOINT_FILE
from fgl_ray.tune.grid import Grid, GridError, GridPoint, data_key
from fgl_ray.tune.plots import plot_grid_heatmaps
from fgl_ray.tune.resources import (DRIVER_CPUS, FIRST_CLIENT_BUNDLE, auto_cpus_per_trial, bundle_totals,
                                    clients_in_trial, plan_bundles, trial_plan)
from fgl_ray.tune.tables import (GRID_JSON, RUNS_DIRNAME, TRIAL_RECORD, TUNE_DIRNAME, max_overlap, read_json,
                                 write_json, write_tables)

REPORT_SPLITS = ("val", "test")


# ---------------------------------------------------------------------------------- per round
class RoundReporter:
    """Turns each round into the values a trial reports to Tune: its val/test metrics (pooled and
    averaged over domains) and the running last-K test summary.

    Reported keys: ``round``, ``failures``, ``<split>/<metric>/all``, ``<split>/<metric>/avg``
    (unweighted mean over domains), ``lastk/<metric>/<all|avg>/<mean|std>`` over the last
    ``last_k`` evaluated rounds (population std, as in ``summary.json``) for accuracy and the
    grid's metric, and ``score`` (the grid metric's running last-K mean). Values that are not
    defined (NaN) are left out.
    """

    def __init__(self, config: ExperimentConfig, metric: Mapping[str, str]) -> None:
        self.last_k = config.last_k
        self.metric = metric
        self.history: dict[tuple[str, str], list[float]] = {}

    def __call__(self, result, rows: list[dict]) -> dict[str, Any]:
        values: dict[str, Any] = {"round": result.round, "failures": len(result.failures)}
        found: dict[tuple[str, str, str], float] = {}
        for row in rows:
            if row["client_id"] == SERVER_ID and row["split"] in REPORT_SPLITS:
                found[(row["split"], row["metric"], row["domain"])] = row["value"]
        for split, metric in sorted({(s, m) for s, m, _ in found}):
            domains = {d: v for (s, m, d), v in found.items() if (s, m) == (split, metric) and d != ALL_DOMAINS}
            defined = [v for v in domains.values() if not math.isnan(v)]
            scopes = {"all": found.get((split, metric, ALL_DOMAINS), math.nan),
                      "avg": float(np.mean(defined)) if defined else math.nan}
            for scope, value in scopes.items():
                values[f"{split}/{metric}/{scope}"] = value
                if split == "test" and not math.isnan(value):
                    self._remember((metric, scope), value)
            if split == "test":
                for domain, value in domains.items():
                    if not math.isnan(value):
                        self._remember((metric, domain), value)
        for (metric, scope), series in self.history.items():
            if scope in ("all", "avg") and metric in ("accuracy", self.metric["name"]):
                window = series[-self.last_k:]
                values[f"lastk/{metric}/{scope}/mean"] = float(np.mean(window))
                values[f"lastk/{metric}/{scope}/std"] = float(np.std(window))
        scope = {AVG_KEY: "avg", ALL_DOMAINS: "all"}.get(self.metric["domain"], self.metric["domain"])
        chosen = self.history.get((self.metric["name"], scope))
        if chosen:
            values["score"] = float(np.mean(chosen[-self.last_k:]))
        return {key: value for key, value in values.items() if not (isinstance(value, float) and math.isnan(value))}

    def _remember(self, key: tuple[str, str], value: float) -> None:
        self.history.setdefault(key, []).append(value)


# ---------------------------------------------------------------------------------- the trial
@dataclass
class TrialSetup:
    """What every trial needs, shipped once through the object store (``tune.with_parameters``)."""

    configs: dict[str, ExperimentConfig]
    data_keys: dict[str, str]
    datasets: dict[str, FederatedGraphData]
    runs_dir: str
    metric: dict[str, str]
    cpus_per_trial: float
    gpus_per_trial: float = 0.0
    cluster_gpus: float = 0.0
    #: trials borrow client workers from the cluster's named pool (``fgl-ray pool start``)
    use_pool: bool = False


def _group_resources() -> dict[str, Any]:
    """The trial's placement group id, its bundles and what is still free in each bundle.

    Ray exposes a group's bundle ``i`` as resources ``<name>_group_<i>_<group id>``; a resource
    that is fully in use is absent from ``ray.available_resources()`` (free = 0).
    """
    group = ray.util.get_current_placement_group()
    if group is None:
        return {}
    group_id = group.id.hex()
    available = ray.available_resources()
    free = [{name: float(available.get(f"{name}_group_{index}_{group_id}", 0.0)) for name in spec}
            for index, spec in enumerate(group.bundle_specs)]
    return {"placement_group": group_id, "bundles": group.bundle_specs, "bundle_free": free}


def _check_group(expected: list[dict[str, float]]) -> None:
    """Fails fast when the trial's placement group is not the one its plan needs (actors would hang)."""
    group = ray.util.get_current_placement_group()
    if group is None:
        raise RuntimeError("a grid trial must run inside its Tune placement group")
    got = [{k: float(b.get(k, 0.0)) for k in ("CPU", "GPU")} for b in group.bundle_specs]
    want = [{k: float(b.get(k, 0.0)) for k in ("CPU", "GPU")} for b in expected]
    if len(got) != len(want) or any(abs(g[k] - w[k]) > 1e-6 for g, w in zip(got, want) for k in g):
        raise RuntimeError(f"the trial's placement group has bundles {got}, its resource plan needs {want}")


class FederationTrainable(tune.Trainable):
    """Tune's trainable: one whole federation per trial, one round per step, reused across trials.

    Writes ``<runs_dir>/<point id>/`` (the run folder, plus ``trial.json`` with start and end
    times, the plan and the placement group it ran in). A restarted trial continues from the
    checkpoint its run folder holds (``checkpoint_every``), else starts from scratch. The client
    workers live in the trial's bundles for as long as Tune keeps this actor: a trial that Tune
    hands to it through :meth:`reset_config` borrows them warm.
    """

    def setup(self, config: dict, setup: TrialSetup) -> None:
        self.shared = setup
        self.workers = None        # the client workers in this trial's bundles, made on first use
        self.trials_begun = 0      # trials this actor ran (Tune reuses it for later ones)
        self.run = None
        self.pending = config      # begun by the first step, so a failure is the trial's own

    def _lender(self, plan):
        if self.shared.use_pool:
            from actors.service import find_pool

            return find_pool()
        if self.workers is None:
            from actors.pool import WorkerPool

            bundles = range(FIRST_CLIENT_BUNDLE, FIRST_CLIENT_BUNDLE + plan.num_actors)
            self.workers = WorkerPool(ray.util.get_current_placement_group(), bundles)
        return self.workers

    def _begin(self, tune_config: dict) -> None:
        from fgl_ray.runtime.federation import FederationRun

        point = tune_config["point"]
        setup = self.shared
        config = setup.configs[point["id"]]
        data = setup.datasets[setup.data_keys[point["id"]]]
        run_dir = Path(setup.runs_dir) / point["id"]
        resume = (run_dir / CHECKPOINT_FILE).is_file()
        if run_dir.exists() and not resume:
            shutil.rmtree(run_dir)
        self.record: dict[str, Any] = {
            "id": point["id"], "axes": point["axes"], "baseline": point["baseline"], "started_at": time.time(),
            "tune_trial_id": self.trial_id, "tune_trial_dir": Path(self.logdir).name if self.logdir else None,
            "reused_actor": self.trials_begun > 0, "reused_workers": self.workers is not None}
        self.trials_begun += 1
        self.reporter = RoundReporter(config, setup.metric)
        plan = lender = None
        if config.backend == "ray" and not setup.use_pool:
            sizes = {graph.client_id: int(graph.data.num_nodes) for graph in data.clients}
            plan = trial_plan(config, sizes, setup.cpus_per_trial, setup.gpus_per_trial, setup.cluster_gpus)
            _check_group(plan_bundles(config, plan, setup.cpus_per_trial))
            if clients_in_trial(config, plan):   # this actor hosts the clients: no worker beside it
                config = config.model_copy(update={"backend": "local", "torch_threads": plan.threads_per_actor})
                plan = None
                self.record["clients_in_trial"] = True
        if config.backend == "ray":
            lender = self._lender(plan)
        self.run = FederationRun(config, data, progress=False, resume=resume, lender=lender, plan=plan)
        if plan is not None or config.backend == "ray":
            plan = self.run.backend.plan
            self.record["plan"] = {"cpus_per_actor": plan.cpus_per_actor, "gpus_per_actor": plan.gpus_per_actor,
                                   "assignment": [list(a) for a in plan.assignment]}

    def step(self) -> dict:
        if self.pending is not None:
            self._begin(self.pending)
            self.pending = None
        first = self.run.next_round == self.run.first
        result, rows = self.run.step()
        if first:   # every worker of the trial is running now
            self.record["first_round_s"] = time.time() - self.record["started_at"]
            self.record.update(_group_resources())
        values = self.reporter(result, rows)
        if self.run.done:
            outcome = self.run.finish()
            self.record.update(resumed_from=outcome.resumed_from, ended_at=time.time(), run_dir=str(outcome.run_dir),
                               startup=outcome.summary.get("startup"))
            write_json(Path(self.shared.runs_dir) / self.record["id"] / TRIAL_RECORD, self.record)
            self.run = None
            values["done"] = True
        return values

    def save_checkpoint(self, checkpoint_dir: str) -> dict:
        """Tune's checkpoint names the next round only: the federation checkpoints into its run
        folder (``checkpoint_every``), and a restarted trial resumes from there."""
        return {"next_round": self.run.next_round if self.run is not None else None}

    def load_checkpoint(self, checkpoint: dict) -> None:
        """Nothing to load: :meth:`setup` resumed the run from its run folder's checkpoint."""

    def reset_config(self, new_config: dict) -> bool:
        """Ends the current federation; the next trial's begins, on the same workers, at its first step."""
        self._end()
        self.pending = new_config
        return True

    def _end(self) -> None:
        if self.run is not None:
            self.run.close()
            self.run = None

    def cleanup(self) -> None:
        self._end()
        if self.workers is not None:
            self.workers.close()


def _trial_name(trial) -> str:
    return trial.config["point"]["id"]


# ---------------------------------------------------------------------------------- the grid
@dataclass
class GridOutcome:
    """What :func:`run_grid` did and where its files are."""

    folder: Path
    trials_table: Path
    curves_table: Path
    heatmaps: list[Path]
    notes: list[str]
    wall_s: float
    cpus_per_trial: float
    max_concurrent: int
    executed: list[str]
    statuses: dict[str, str] = field(default_factory=dict)

    @property
    def errored(self) -> list[str]:
        return [trial for trial, status in self.statuses.items() if status == "ERROR"]

    @property
    def unfinished(self) -> list[str]:
        return [trial for trial, status in self.statuses.items() if status == "UNFINISHED"]


def build_datasets(grid: Grid) -> tuple[dict[str, str], dict[str, FederatedGraphData]]:
    """Client partitions, built once per distinct data setting of the grid (before Ray starts)."""
    keys = {point.id: data_key(point.config) for point in grid.points}
    datasets: dict[str, FederatedGraphData] = {}
    for point in grid.points:
        key = keys[point.id]
        if key not in datasets:
            try:
                datasets[key] = build_federated_data(point.config)
            except (ValueError, FileNotFoundError, NotImplementedError) as error:
                raise GridError(f"grid point {point.id} ({point.label}): cannot build its data: {error}") from None
    return keys, datasets


def size_trials(grid: Grid, datasets: Mapping[str, FederatedGraphData], keys: Mapping[str, str],
                cpus_per_trial: float, gpus_per_trial: float) -> dict[str, list[dict[str, float]]]:
    """Placement-group bundles of every point; a point its CPUs cannot hold fails by name."""
    bundles, errors = {}, []
    for point in grid.points:
        clients = datasets[keys[point.id]].clients
        sizes = {graph.client_id: int(graph.data.num_nodes) for graph in clients}
        try:
            plan = trial_plan(point.config, sizes, cpus_per_trial, gpus_per_trial)
            bundles[point.id] = plan_bundles(point.config, plan, cpus_per_trial)
        except ValueError as error:
            errors.append(f"grid point {point.id} ({point.label}): {error}")
    if errors:
        raise GridError("trial resources do not fit:\n" + "\n".join(errors[:10]))
    return bundles


def _check_fits(bundles: Mapping[str, list[dict[str, float]]], cluster: Mapping[str, float]) -> None:
    for point_id, group in bundles.items():
        for resource, amount in bundle_totals(group).items():
            if amount > float(cluster.get(resource, 0.0)) + 1e-6:
                raise GridError(f"grid point {point_id} needs {amount:g} {resource} for its placement group, but the "
                                f"Ray cluster has {float(cluster.get(resource, 0.0)):g}; lower cpus_per_trial/"
                                "gpus_per_trial or use auto")


def _check_resume(grid: Grid, folder: Path) -> None:
    stored = read_json(folder / GRID_JSON)
    before = {p["id"]: p["digest"] for p in stored["points"]}
    now = {p.id: p.digest() for p in grid.points}
    if before != now:
        changed = sorted(set(before) ^ set(now) | {k for k in before.keys() & now.keys() if before[k] != now[k]})
        raise GridError(f"the grid differs from the one stored in {folder / GRID_JSON} (points {', '.join(changed[:8])}"
                        f"{' ...' if len(changed) > 8 else ''}); resume the same grid, or run into another output folder")


def run_grid(grid: Grid, resume: bool = False, verbose: int = 1, time_budget_s: float | None = None,
             wrap_trainable: Callable[[type], type] | None = None, address: str | None = None) -> GridOutcome:
    """Runs (or resumes) every point of ``grid`` as a Tune trial and writes the grid's tables and heatmaps.

    Args:
        grid: the validated grid (:func:`~fgl_ray.tune.grid.load_grid`).
        resume: continue the experiment stored in the grid folder; finished trials are not rerun.
        verbose: Tune's console verbosity (0 silent, 1 status tables, 2 trial results).
        time_budget_s: stop the whole grid after this long (unfinished trials resume later).
        wrap_trainable: optional decorator of the trainable class (tests inject faults with it).
        address: a running Ray cluster to join (default ``RAY_ADDRESS``, else a local Ray starts);
            when its named worker pool runs (``fgl-ray pool start``), trials borrow from it and
            reserve only their own sliver of CPU.

    Raises:
        GridError: the folder already holds a grid and ``resume`` is off, the stored grid
            differs on resume, a point's data or resources cannot be set up.
    """
    from fgl_ray.runtime.ray_backend import ray_session

    started = time.time()
    folder = grid.output_dir.expanduser().resolve()
    tune_dir = folder / TUNE_DIRNAME
    notes = list(grid.notes)
    restorable = tune.Tuner.can_restore(str(tune_dir))
    if resume and not (folder / GRID_JSON).is_file():
        raise GridError(f"{folder} holds no grid to resume (no {GRID_JSON}); run without --resume to start the grid "
                        "there, or pass the --output folder of the grid you want to continue")
    if resume:
        _check_resume(grid, folder)
    if resume and not restorable:
        notes.append(f"nothing to resume in {tune_dir}; starting the grid")
    if not resume and (restorable or (folder / GRID_JSON).exists()):
        raise GridError(f"{folder} already holds a grid run; pass --resume to continue it, or choose another "
                        "output folder (--output)")
    keys, datasets = build_datasets(grid)
    if grid.cpus_per_trial is not None:
        size_trials(grid, datasets, keys, grid.cpus_per_trial, grid.gpus_per_trial)  # fail before Ray starts

    with ray_session(address=address):
        from actors.service import find_pool

        cluster = ray.cluster_resources()
        pool = find_pool()
        concurrency = grid.max_concurrent_trials
        if pool is not None:
            cpus = DRIVER_CPUS
            bundles = {point.id: [{"CPU": DRIVER_CPUS}] for point in grid.points}
            concurrency = concurrency or pool.size
            notes.append(f"trials borrow client workers from the cluster's pool ({pool.size} workers), at most "
                         f"{concurrency} trials at once")
        else:
            cpus = grid.cpus_per_trial or auto_cpus_per_trial(float(cluster.get("CPU", 0.0)), len(grid.points),
                                                              grid.max_concurrent_trials)
            bundles = size_trials(grid, datasets, keys, cpus, grid.gpus_per_trial)
        _check_fits(bundles, cluster)
        description = grid.describe() | {"cpus_per_trial": cpus, "bundles": bundles, "folder": str(folder)}
        write_json(folder / GRID_JSON, description)
        runs_dir = folder / RUNS_DIRNAME
        configs = {p.id: p.config.model_copy(update={"output_dir": runs_dir, "run_name": p.id}) for p in grid.points}
        setup = TrialSetup(configs, keys, datasets, str(runs_dir), grid.metric.model_dump(), cpus,
                           grid.gpus_per_trial, float(cluster.get("GPU", 0.0)), use_pool=pool is not None)
        trainable = FederationTrainable if wrap_trainable is None else wrap_trainable(FederationTrainable)
        factories = {pid: tune.PlacementGroupFactory(group, strategy="PACK") for pid, group in bundles.items()}
        trainable = tune.with_resources(tune.with_parameters(trainable, setup=setup),
                                        resources=lambda config: factories[config["point"]["id"]])
        previous = _finished_records(grid, runs_dir)
        if resume and restorable:
            tuner = tune.Tuner.restore(str(tune_dir), trainable=trainable, resume_unfinished=True,
                                       restart_errored=True)
        else:
            tuner = tune.Tuner(
                trainable,
                param_space={"point": tune.grid_search([_point_space(p) for p in grid.points])},
                tune_config=tune.TuneConfig(max_concurrent_trials=concurrency, reuse_actors=True,
                                            time_budget_s=time_budget_s,
                                            trial_name_creator=_trial_name, trial_dirname_creator=_trial_name),
                run_config=tune.RunConfig(name=TUNE_DIRNAME, storage_path=str(folder), verbose=verbose,
                                          failure_config=tune.FailureConfig(max_failures=grid.max_failures)),
            )
        results = tuner.fit()
    statuses = _statuses(results, grid, runs_dir)
    trials, curves = write_tables(description, folder, statuses)
    heatmaps, plot_notes = plot_grid_heatmaps(description, _read_trials(trials), folder)
    executed = [pid for pid, stamp in _finished_records(grid, runs_dir).items() if previous.get(pid) != stamp]
    intervals = [_interval(runs_dir / pid) for pid in executed]
    return GridOutcome(folder, trials, curves, heatmaps, notes + plot_notes, time.time() - started, cpus,
                       max_overlap(intervals), executed, statuses)


def _point_space(point: GridPoint) -> dict[str, Any]:
    return {"id": point.id, "baseline": point.baseline, "axes": dict(point.axes)}


def _statuses(results, grid: Grid, runs_dir: Path) -> dict[str, str]:
    """TERMINATED (its run finished: trial.json written), ERROR (raised), or UNFINISHED
    (interrupted or never started; ``--resume`` runs it)."""
    statuses = {p.id: "TERMINATED" if (runs_dir / p.id / TRIAL_RECORD).is_file() else "UNFINISHED"
                for p in grid.points}
    for result in results:
        point_id = ((result.config or {}).get("point") or {}).get("id")
        if point_id in statuses and result.error is not None:
            statuses[point_id] = "ERROR"
    return statuses


def _finished_records(grid: Grid, runs_dir: Path) -> dict[str, float]:
    """Point id -> start time of its finished run (``trial.json``), for the points that have one."""
    stamps = {}
    for point in grid.points:
        path = runs_dir / point.id / TRIAL_RECORD
        if path.is_file():
            stamps[point.id] = float(read_json(path)["started_at"])
    return stamps


def _interval(run_dir: Path) -> tuple[float, float]:
    record = read_json(run_dir / TRIAL_RECORD)
    return float(record["started_at"]), float(record["ended_at"])


def _read_trials(path: Path):
    import pandas as pd

    return pd.read_parquet(path)
