"""The driver-side federation loop: runs rounds on a backend and records everything."""

from __future__ import annotations

import json
import logging
import math
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import torch
from tqdm.auto import tqdm

from fgl_ray.algorithms import ALGORITHMS
from fgl_ray.algorithms.base import backbone_options
from fgl_ray.config import ConfigError, ExperimentConfig
from fgl_ray.data import build_federated_data
from fgl_ray.data.longtail import training_class_counts
from fgl_ray.data.types import FederatedGraphData
from fgl_ray.errors import as_folder_name
from fgl_ray.interrupts import StopRequest, interrupts_deferred
from fgl_ray.metrics import class_frequency_order
from fgl_ray.results import (ALL_DOMAINS, SERVER_ID, MetricsWriter, per_class_accuracy, plot_class_accuracy,
                             plot_learning_curves, plot_update_diagnostics, read_metrics, record_resume, summarize,
                             write_manifest, write_summary)
from fgl_ray.results.plots import cluster_table, plot_cluster_membership
from fgl_ray.results.references import reference_scores
from fgl_ray.results.writer import METRICS_DIRNAME
from fgl_ray.runtime.checkpoint import CHECKPOINT_FILE, Checkpoint, load_checkpoint, save_checkpoint
from fgl_ray.runtime.coverage import Coverage, FailureLog
from fgl_ray.runtime.records import local_work, round_rows, round_timing, startup_rows, timing_rows
from fgl_ray.runtime.server import RoundResult
from fgl_ray.runtime.timing import StartupClock
from fgl_ray.tasks import build_task, pool_stats

logger = logging.getLogger(__name__)


@dataclass
class RunResult:
    """Where a run's files are and its summary."""

    run_id: str
    run_dir: Path
    summary: dict[str, Any]
    #: the round a resumed run continued from (None: it ran from round 0)
    resumed_from: int | None = None

    @property
    def metrics(self):
        """The run's long-format metrics table (a pandas DataFrame, read from ``metrics.parquet``)."""
        return read_metrics(self.run_dir)


#: Where the client actors of a Ray run were placed (written after the first round).
PLACEMENTS_FILE = "placements.json"


@dataclass
class Bookkeeping:
    """What the driver accumulates over the rounds besides metric rows (kept in checkpoints)."""

    coverage: Coverage
    last_test: np.ndarray | None = None
    test_counts: dict[int, np.ndarray] = field(default_factory=dict)
    failure_kinds: Counter = field(default_factory=Counter)

    def observe(self, result: RoundResult) -> None:
        """Classification: keeps the last pooled test confusion and each client's test label counts."""
        tested = [e for e in result.evaluations if "confusion" in e.stats.get("test", {})]
        if tested:
            self.last_test = pool_stats(e.stats["test"] for e in tested)["confusion"]
            for evaluation in tested:
                self.test_counts.setdefault(evaluation.client_id, evaluation.stats["test"]["confusion"].sum(axis=1))


def check_fits(config: ExperimentConfig, client_ids: Iterable[int]) -> None:
    """Refuses settings that name more or other clients than the federation's ``client_ids`` (before
    anything runs; the command line checks the count its partition will make before Ray starts).

    Raises:
        ConfigError: a fault names a missing client; ``min_clients`` exceeds the clients.
    """
    client_ids = sorted(client_ids)
    unknown = sorted({c for fault in config.faults for c in fault.clients} - set(client_ids))
    if unknown:
        raise ConfigError(f"faults name clients {unknown}, which this federation does not have (clients 0.."
                          f"{len(client_ids) - 1})")
    if config.min_clients > len(client_ids):
        raise ConfigError(f"min_clients {config.min_clients} exceeds the {len(client_ids)} clients of this "
                          "federation, so no round could aggregate; lower --min-clients")


def check_memory(config: ExperimentConfig, data: FederatedGraphData) -> None:
    """Refuses a model that cannot fit this machine's memory, before any client builds one.

    The backbone is built on PyTorch's ``meta`` device (shapes, no storage) to count its
    parameters; each client keeps them with gradients and optimizer state (Adam: two slots, SGD:
    one). Training takes about ``4 x nodes x hidden x layers`` floats of activations and an
    evaluation pass ``2 x nodes x hidden``, over the largest client or, with neighbour sampling,
    over what one batch can reach. The in-process backend keeps every client's model and trains
    one client at a time; a Ray run is compared per client (its workers, or a cluster, spread them).

    Raises:
        ConfigError: naming the estimate, the machine's memory and the fix.
    """
    from fgl_ray.data.synthetic import machine_memory
    from fgl_ray.runtime.client import build_config_model

    config = configured_for(config, data)
    try:
        with torch.device("meta"):
            model = build_config_model(config, data.num_features, data.num_classes)
    except Exception:     # a backbone that cannot be built without storage is not estimated
        return
    parameters = sum(p.numel() for p in model.parameters())
    slots = 4 if config.optimizer == "adam" else 3
    largest = max(((graph.data.num_nodes or 0) for graph in data.clients), default=0)
    reach = config.batch_size * math.prod(largest if f < 0 else f + 1 for f in config.num_neighbors)
    trained = largest if config.node_batching == "full" else min(largest, reach)
    evaluated = largest if config.eval_batching == "full" else min(largest, reach)
    activations = 4 * config.hidden * max(4 * trained * config.num_layers, 2 * evaluated)
    models = len(data.clients) if config.backend == "local" else 1
    needed = 4 * slots * parameters * models + activations
    memory = machine_memory()
    if needed > memory:
        who = f"the {models} clients in this process need" if models > 1 else "one client needs"
        raise ConfigError(f"the {config.model} model has {parameters:,} parameters (hidden {config.hidden}); with its "
                          f"gradients, optimizer state and activations {who} about {needed / 2**30:.1f} GiB, more "
                          f"than this machine's {memory / 2**30:.1f} GiB; lower --hidden or --num-layers")


def configured_for(config: ExperimentConfig, data: FederatedGraphData) -> ExperimentConfig:
    """``config`` with the model options the data dictates (a multimodal graph's modality widths)
    that its backbone accepts, and those its algorithm sets for that backbone
    (``Algorithm.model_defaults``); options the config sets itself win."""
    options = backbone_options(config, data.meta.get("model_options"))
    return config if options == config.model_options else config.with_overrides(model_options=options)


def open_backend(config: ExperimentConfig, data: FederatedGraphData, lender=None, plan=None,
                 clock: StartupClock | None = None):
    """The backend named by ``config.backend``. The Ray one needs a running Ray session and borrows
    its workers from ``lender`` (:mod:`fgl_ray.runtime.ray_backend`), by default workers of its own."""
    config = configured_for(config, data)
    if config.backend == "local":
        from fgl_ray.runtime.local_backend import LocalBackend

        return LocalBackend(config, data, clock=clock)
    from fgl_ray.runtime.ray_backend import RayBackend

    return RayBackend(config, data, lender=lender, plan=plan, clock=clock)


def claim_run_dir(run_dir: Path, overwrite: bool) -> Path:
    """Creates the run folder; one that already holds a run's metrics is emptied with ``overwrite``
    and refused without it (rows of two runs must never mix in one folder).

    Raises:
        ConfigError: the folder holds results and ``overwrite`` is off.
    """
    if (run_dir / METRICS_DIRNAME).exists():
        if not overwrite:
            raise ConfigError(f"run folder {str(run_dir)!r} already holds a run's results; choose another "
                              "--run-name (or --output-dir), or pass --overwrite true to replace it")
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def default_run_id(config: ExperimentConfig) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return config.run_name or as_folder_name(f"{config.algorithm}-{config.aggregator}-{config.dataset}-{config.partition}-{stamp}")


def _pooled_val(rows: list[dict], metric: str) -> float | None:
    for row in rows:
        if (row["client_id"], row["domain"], row["split"], row["metric"]) == (SERVER_ID, ALL_DOMAINS, "val", metric):
            return row["value"]
    return None


class FederationRun:
    """One federation from set-up to summary, a round per :meth:`step`.

    :func:`run_experiment` steps it to the end (with Ctrl-C handling); a Tune trainable steps it
    one round per Tune iteration. Set-up (the constructor) builds the data when not given, claims
    or resumes the run folder and opens the backend; :meth:`finish` closes the backend and writes
    the summary and plots.

    Args:
        config: the validated experiment.
        data: pre-built client partitions (built from the config when omitted).
        progress: show a progress bar with ETA over rounds.
        class_plot: write ``class_accuracy.png``/``.json`` (per-class test accuracy of the last
            evaluation over frequency-sorted classes); default: when the dataset has >= 3 classes.
        resume: continue the run in the config's run folder from its ``checkpoint.pt`` (the
            rows of rounds after the checkpoint are discarded and those rounds run again).
        lender, plan: where a Ray run borrows its workers, and a fixed resource plan (see
            :class:`~fgl_ray.runtime.ray_backend.RayBackend`).
        clock: the start-up clock of this run (default: started now); see :mod:`fgl_ray.runtime.timing`.

    Raises:
        ConfigError: ``resume`` and the run folder holds no checkpoint.
    """

    def __init__(self, config: ExperimentConfig, data: FederatedGraphData | None = None, progress: bool = True,
                 class_plot: bool | None = None, resume: bool = False, lender=None, plan=None,
                 clock: StartupClock | None = None) -> None:
        self.clock = clock or StartupClock()
        data = data or build_federated_data(config)
        self.clock.mark("data")
        config = configured_for(config, data)
        check_fits(config, [graph.client_id for graph in data.clients])
        self.config, self.data, self.class_plot = config, data, class_plot
        self.run_id = default_run_id(config)
        self.run_dir = run_dir = Path(config.output_dir) / self.run_id
        self.checkpoint = load_checkpoint(run_dir) if resume else None
        if self.checkpoint is None:
            claim_run_dir(run_dir, config.overwrite)
            write_manifest(run_dir, config.model_dump(mode="json"),
                           seeds={"seed": config.seed, "data_seed": config.data_seed},
                           extra={"run_id": self.run_id, "domains": data.domains, "num_clients": len(data.clients),
                                  "client_domains": {g.client_id: g.domain for g in data.clients}})
        self.writer = MetricsWriter(run_dir, self.run_id)
        self.task = build_task(config)
        self.domain_of = {graph.client_id: graph.domain for graph in data.clients}
        self.class_counts = training_class_counts(data)
        self.class_order = class_frequency_order(self.class_counts)
        self.backend = open_backend(config, data, lender=lender, plan=plan, clock=self.clock)
        self._open = True
        try:
            if self.checkpoint is None:
                self.book, self.first = Bookkeeping(Coverage(clients=len(data.clients),
                                                             min_clients=config.min_clients)), 0
            else:
                self.book = restore_run(self.checkpoint, self.backend, self.writer, run_dir, config)
                self.first = self.checkpoint.next_round
            self.next_round = self.checkpointed = self.first
            self.bar = tqdm(total=config.rounds, initial=self.first, desc=self.run_id, unit="round",
                            disable=None if progress else True, leave=True)   # None: off where stderr is no terminal
            self.sink = (run_dir / "failures.jsonl").open("a")
        except BaseException:
            self.backend.close()
            raise
        self.failure_log = FailureLog(self.sink, self.bar.write, self.book.failure_kinds)
        self._timing_rows: list[dict] = []   # a round's timing rows wait for its write time

    @property
    def done(self) -> bool:
        return self.next_round >= self.config.rounds

    def step(self, stop: StopRequest | None = None) -> tuple[RoundResult, list[dict]]:
        """Runs the next round, records it and checkpoints when due (or when ``stop`` was requested
        while the round ran)."""
        round_index = self.next_round
        result = self.backend.run_round(round_index)
        if round_index == self.first:
            self.clock.mark("round_0")
        said = self.book.coverage.observe(result)
        if said:
            self.bar.write(said)
        written = time.perf_counter()
        rows = round_rows(result, self.domain_of, self.task, self.config.diagnostics_fraction, self.class_order,
                          self.config.class_group_cuts)
        if round_index == self.first:
            rows += startup_rows(round_index, self.clock)
        self.book.observe(result)
        self.writer.write(rows + self._timing_rows)
        if result.diagnostics:
            save_diagnostics(self.run_dir, result)
        self.failure_log.record(result)
        self._timing_rows = timing_rows(result, time.perf_counter() - written)
        score = _pooled_val(rows, self.task.headline)
        if score is not None:
            self.bar.set_postfix({f"val_{self.task.headline}": f"{score:.3f}", "failed": len(result.failures)})
        self.bar.update()
        if round_index == self.first and (placements := self.backend.placements()):
            (self.run_dir / PLACEMENTS_FILE).write_text(json.dumps(placements, indent=1))
        self.next_round = finished = round_index + 1
        every = self.config.checkpoint_every
        if finished < self.config.rounds and ((stop is not None and stop.requested) or
                                                (every and finished % every == 0)):
            self.save_checkpoint()
        return result, rows

    def save_checkpoint(self) -> None:
        """Saves the whole federation after the last finished round."""
        save_checkpoint(self.run_dir, Checkpoint(self.next_round, *self.backend.checkpoint(), driver={
            "book": self.book, "parts": self.writer.parts_written, "failure_bytes": self.sink.tell()}))
        self.checkpointed = self.next_round

    def close(self) -> None:
        """Ends the rounds: closes the progress bar and the failure log, gives the workers back."""
        if self._open:
            self._open = False
            self.bar.close()
            self.sink.close()
            self.backend.close()

    def finish(self) -> RunResult:
        """Closes the run, then writes its summary (with the start-up breakdown) and plots."""
        if self._open:
            self.failure_log.close()
            if self._timing_rows:
                self.writer.write(self._timing_rows)
                self._timing_rows = []
        self.close()
        config, run_dir, book = self.config, self.run_dir, self.book
        checkpointed = self.checkpointed
        if book.coverage.rounds == config.rounds:   # finished: nothing left to resume
            (run_dir / CHECKPOINT_FILE).unlink(missing_ok=True)
            checkpointed = 0
        metrics = read_metrics(run_dir)
        summary = summarize(metrics, last_k=config.last_k, selection_metric=self.task.headline)
        if book.test_counts:
            summary["references"] = reference_scores(book.test_counts, self.domain_of)
        summary["coverage"] = book.coverage.report(config.min_coverage, planned_rounds=config.rounds)
        if checkpointed:
            summary["checkpoint"] = {"file": CHECKPOINT_FILE, "next_round": checkpointed}
        if self.clock.finished:
            summary["startup"] = self.clock.report()
        summary["round_timing"] = round_timing(metrics)
        work = local_work(metrics)
        if work:
            node_level = config.resolved_task() == "node-classification"     # the one task that samples nodes
            summary["local_work"] = ({"node_batching": config.node_batching} if node_level else {}) | work
        changes = cluster_changes(metrics)
        if changes:
            summary["clustering"] = clustering_summary(changes)
            if not summary["clustering"]["split"]:
                advice = ALGORITHMS.get(config.algorithm).never_split_advice(config.algorithm_options)
                logger.warning("%s never split its clients into clusters: it ran as one federation (FedAvg with "
                               "its aggregator); %s", self.run_id, advice)
        write_summary(run_dir, summary)
        plot_learning_curves(metrics, run_dir / "learning_curves.png", metric=self.task.headline)
        data = self.data
        if book.last_test is not None and (data.num_classes >= 3 if self.class_plot is None else self.class_plot):
            save_class_accuracy(run_dir, config, book.last_test, self.class_counts)
        if config.diagnostics:
            plot_saved_diagnostics(run_dir, metrics, self.domain_of)
        save_clusters(run_dir, metrics, changes)
        return RunResult(self.run_id, run_dir, summary, self.checkpoint.next_round if self.checkpoint else None)


def run_experiment(config: ExperimentConfig, data: FederatedGraphData | None = None, progress: bool = True,
                   on_round: Callable[[RoundResult, list[dict]], None] | None = None,
                   class_plot: bool | None = None, resume: bool = False, lender=None, plan=None,
                   clock: StartupClock | None = None) -> RunResult:
    """Runs one federation end to end and writes its results folder (see :class:`FederationRun`);
    ``on_round`` is called after each round with its result and rows.

    The first Ctrl-C (or SIGTERM) after a round has finished stops the run after the round under
    way, with a checkpoint; a second one stops at once, keeping the rounds that finished.

    Returns:
        The run id, its folder and its summary.
    """
    run = FederationRun(config, data, progress, class_plot, resume, lender, plan, clock)
    try:
        with interrupts_deferred() as stop:
            while not run.done:
                try:
                    result, rows = run.step(stop)
                except KeyboardInterrupt:   # a second Ctrl-C: keep the rounds that finished
                    if run.next_round == run.first and run.checkpoint is None:
                        raise
                    run.bar.write(f"interrupted in round {run.next_round}; summarising the rounds that finished")
                    break
                if on_round is not None:
                    on_round(result, rows)
                stop.armed = True
                if stop.requested:
                    saved = "; checkpoint saved" * (run.checkpointed == run.next_round)
                    run.bar.write(f"stopped after round {run.next_round - 1}{saved}")
                    break
    except BaseException:
        run.close()
        raise
    return run.finish()


def restore_run(checkpoint: Checkpoint, backend, writer: MetricsWriter, run_dir: Path,
                config: ExperimentConfig) -> Bookkeeping:
    """Loads ``checkpoint`` into the backend, drops the metric parts and failure lines written after
    it, records the continuation in the manifest and returns the driver's bookkeeping."""
    backend.restore(checkpoint.server, checkpoint.clients)
    writer.truncate(checkpoint.driver["parts"])
    with (run_dir / "failures.jsonl").open("r+") as log:
        log.truncate(checkpoint.driver["failure_bytes"])
    record_resume(run_dir, checkpoint.next_round, config.model_dump(mode="json"))
    return checkpoint.driver["book"]


def cluster_changes(metrics) -> list[dict]:
    """For clustered algorithms, the membership after every round where it changed (round 0
    included): ``[{"round", "clusters": {cluster: [client ids]}}]``; empty for other runs."""
    table = cluster_table(metrics)
    changes, previous = [], None
    for round_index, row in table.iterrows():
        membership = {str(c): sorted(int(k) for k in row.index[row == c]) for c in sorted(set(row))}
        if membership != previous:
            changes.append({"round": int(round_index), "clusters": membership})
            previous = membership
    return changes


def clustering_summary(changes: list[dict]) -> dict:
    """Whether and when a clustered run split its clients, and into how many clusters it ended."""
    return {"split": len(changes) > 1, "split_rounds": [c["round"] for c in changes[1:]],
            "final_clusters": len(changes[-1]["clusters"])}


def save_clusters(run_dir: Path, metrics, changes: list[dict]) -> Path | None:
    """``clusters.json`` (``changes``) and ``clusters.png``; None when the run recorded no clusters."""
    if not changes:
        return None
    (run_dir / "clusters.json").write_text(json.dumps(changes, indent=1))
    return plot_cluster_membership(metrics, run_dir / "clusters.png")


def save_class_accuracy(run_dir: Path, config: ExperimentConfig, confusion: np.ndarray,
                        class_counts: np.ndarray) -> Path:
    """Per-class test accuracy of the last evaluation: ``class_accuracy.json`` and ``.png``."""
    accuracy = per_class_accuracy(confusion)
    (run_dir / "class_accuracy.json").write_text(json.dumps({
        "class_counts": np.asarray(class_counts).tolist(),
        "accuracy": [None if np.isnan(a) else float(a) for a in accuracy],
        "test_confusion": np.asarray(confusion).tolist(),
    }))
    return plot_class_accuracy({config.algorithm: accuracy}, class_counts, run_dir / "class_accuracy.png",
                               cuts=config.class_group_cuts)


def save_diagnostics(run_dir: Path, result: RoundResult) -> Path:
    """Writes one round's diagnostic matrices to ``diagnostics/round-NNNN.npz``."""
    folder = run_dir / "diagnostics"
    folder.mkdir(exist_ok=True)
    path = folder / f"round-{result.round:04d}.npz"
    np.savez_compressed(path, **result.diagnostics)
    return path


def plot_saved_diagnostics(run_dir: Path, metrics, domain_of) -> Path | None:
    """Draws ``diagnostics.png`` from the last saved round's matrices and the metric rows."""
    saved = sorted((run_dir / "diagnostics").glob("round-*.npz"))
    if not saved:
        return None
    last = np.load(saved[-1])
    labels = [f"{cid}:{domain_of[int(cid)]}" for cid in last["client_ids"]]
    return plot_update_diagnostics(metrics, last["overlap"], labels, run_dir / "diagnostics.png")
