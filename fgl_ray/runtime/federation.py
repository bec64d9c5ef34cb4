"""The driver-side federation loop: runs rounds on a backend and records everything."""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
from tqdm.auto import tqdm

from fgl_ray.config import ConfigError, ExperimentConfig
from fgl_ray.data import build_federated_data
from fgl_ray.data.longtail import training_class_counts
from fgl_ray.data.types import FederatedGraphData
from fgl_ray.interrupts import interrupts_deferred
from fgl_ray.metrics import class_frequency_order
from fgl_ray.models.base import model_options
from fgl_ray.results import (ALL_DOMAINS, SERVER_ID, MetricsWriter, per_class_accuracy, plot_class_accuracy,
                             plot_learning_curves, plot_update_diagnostics, read_metrics, record_resume, summarize,
                             write_manifest, write_summary)
from fgl_ray.results.plots import cluster_table, plot_cluster_membership
from fgl_ray.results.references import reference_scores
from fgl_ray.results.writer import METRICS_DIRNAME
from fgl_ray.runtime.checkpoint import CHECKPOINT_FILE, Checkpoint, load_checkpoint, save_checkpoint
from fgl_ray.runtime.coverage import Coverage, FailureLog
from fgl_ray.runtime.records import round_rows
from fgl_ray.runtime.server import RoundResult
from fgl_ray.tasks import build_task, pool_stats


@dataclass
class RunResult:
    """Where a run's files are and its summary."""

    run_id: str
    run_dir: Path
    summary: dict[str, Any]
    #: the round a resumed run continued from (None: it ran from round 0)
    resumed_from: int | None = None


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


def check_fits(config: ExperimentConfig, data: FederatedGraphData) -> None:
    """Refuses settings that name more or other clients than ``data`` has (before anything runs).

    Raises:
        ConfigError: a fault names a missing client; ``min_clients`` exceeds the clients.
    """
    unknown = sorted({c for fault in config.faults for c in fault.clients} - {g.client_id for g in data.clients})
    if unknown:
        raise ConfigError(f"faults name clients {unknown}, which this federation does not have (clients 0.."
                          f"{len(data.clients) - 1})")
    if config.min_clients > len(data.clients):
        raise ConfigError(f"min_clients {config.min_clients} exceeds the {len(data.clients)} clients of this "
                          "federation, so no round could aggregate; lower --min-clients")


def configured_for(config: ExperimentConfig, data: FederatedGraphData) -> ExperimentConfig:
    """``config`` with the model options the data dictates (a multimodal graph's modality widths)
    that its backbone accepts; options the config sets itself win."""
    accepted = model_options(config.model)
    dictated = {k: v for k, v in (data.meta.get("model_options") or {}).items() if k in accepted}
    if all(config.model_options.get(k) == v for k, v in dictated.items()):
        return config
    return config.with_overrides(model_options=dictated | config.model_options)


def open_backend(config: ExperimentConfig, data: FederatedGraphData):
    """The backend named by ``config.backend`` (the Ray one needs a running Ray session)."""
    config = configured_for(config, data)
    if config.backend == "local":
        from fgl_ray.runtime.local_backend import LocalBackend

        return LocalBackend(config, data)
    from fgl_ray.runtime.ray_backend import RayBackend

    return RayBackend(config, data)


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
    return config.run_name or f"{config.algorithm}-{config.aggregator}-{config.dataset}-{config.partition}-{stamp}"


def _pooled_val(rows: list[dict], metric: str) -> float | None:
    for row in rows:
        if (row["client_id"], row["domain"], row["split"], row["metric"]) == (SERVER_ID, ALL_DOMAINS, "val", metric):
            return row["value"]
    return None


def run_experiment(config: ExperimentConfig, data: FederatedGraphData | None = None, progress: bool = True,
                   on_round: Callable[[RoundResult, list[dict]], None] | None = None,
                   class_plot: bool | None = None, resume: bool = False) -> RunResult:
    """Runs one federation end to end and writes its results folder.

    Args:
        config: the validated experiment.
        data: pre-built client partitions (built from the config when omitted).
        progress: show a progress bar with ETA over rounds.
        on_round: called after each round with its result and rows (Tune reports here).
        class_plot: write ``class_accuracy.png``/``.json`` (per-class test accuracy of the last
            evaluation over frequency-sorted classes); default: when the dataset has >= 3 classes.
        resume: continue the run in the config's run folder from its ``checkpoint.pt`` (the
            rows of rounds after the checkpoint are discarded and those rounds run again).

    Returns:
        The run id, its folder and its summary.

    Raises:
        ConfigError: ``resume`` and the run folder holds no checkpoint.
    """
    data = data or build_federated_data(config)
    config = configured_for(config, data)
    check_fits(config, data)
    run_id = default_run_id(config)
    run_dir = Path(config.output_dir) / run_id
    checkpoint = load_checkpoint(run_dir) if resume else None
    if checkpoint is None:
        claim_run_dir(run_dir, config.overwrite)
        write_manifest(run_dir, config.model_dump(mode="json"), seeds={"seed": config.seed,
                                                                       "data_seed": config.data_seed},
                       extra={"run_id": run_id, "domains": data.domains, "num_clients": len(data.clients),
                              "client_domains": {g.client_id: g.domain for g in data.clients}})
    writer = MetricsWriter(run_dir, run_id)
    task = build_task(config)
    domain_of = {graph.client_id: graph.domain for graph in data.clients}
    class_counts = training_class_counts(data)
    class_order = class_frequency_order(class_counts)
    backend = open_backend(config, data)
    if checkpoint is None:
        book, first = Bookkeeping(Coverage(clients=len(data.clients), min_clients=config.min_clients)), 0
    else:
        book, first = restore_run(checkpoint, backend, writer, run_dir, config), checkpoint.next_round
    checkpointed = first
    bar = tqdm(range(first, config.rounds), desc=run_id, unit="round", disable=not progress, leave=True,
               initial=first, total=config.rounds)
    try:
        with (run_dir / "failures.jsonl").open("a") as sink, interrupts_deferred() as stop:
            failure_log = FailureLog(sink, bar.write, book.failure_kinds)
            for round_index in bar:
                try:
                    result = backend.run_round(round_index)
                except KeyboardInterrupt:   # a second Ctrl-C: keep the rounds that finished
                    if round_index == first and checkpoint is None:
                        raise
                    bar.write(f"interrupted in round {round_index}; summarising the rounds that finished")
                    break
                said = book.coverage.observe(result)
                if said:
                    bar.write(said)
                rows = round_rows(result, domain_of, task, config.diagnostics_fraction, class_order,
                                  config.class_group_cuts)
                book.observe(result)
                writer.write(rows)
                if result.diagnostics:
                    save_diagnostics(run_dir, result)
                failure_log.record(result)
                score = _pooled_val(rows, task.headline)
                if score is not None:
                    bar.set_postfix({f"val_{task.headline}": f"{score:.3f}", "failed": len(result.failures)})
                if round_index == first and (placements := backend.placements()):
                    (run_dir / PLACEMENTS_FILE).write_text(json.dumps(placements, indent=1))
                stop.armed = True
                finished = round_index + 1
                if finished < config.rounds and (stop.requested or (config.checkpoint_every and
                                                                    finished % config.checkpoint_every == 0)):
                    save_checkpoint(run_dir, Checkpoint(finished, *backend.checkpoint(), driver={
                        "book": book, "parts": writer.parts_written, "failure_bytes": sink.tell()}))
                    checkpointed = finished
                if on_round is not None:
                    on_round(result, rows)
                if stop.requested:
                    bar.write(f"stopped after round {round_index}" + ("; checkpoint saved" * (checkpointed == finished)))
                    break
            failure_log.close()
    finally:
        bar.close()
        backend.close()
    if book.coverage.rounds == config.rounds:   # finished: nothing left to resume
        (run_dir / CHECKPOINT_FILE).unlink(missing_ok=True)
        checkpointed = 0
    coverage, last_test, test_counts = book.coverage, book.last_test, book.test_counts
    metrics = read_metrics(run_dir)
    summary = summarize(metrics, last_k=config.last_k, selection_metric=task.headline)
    if test_counts:
        summary["references"] = reference_scores(test_counts, domain_of)
    summary["coverage"] = coverage.report(config.min_coverage, planned_rounds=config.rounds)
    if checkpointed:
        summary["checkpoint"] = {"file": CHECKPOINT_FILE, "next_round": checkpointed}
    write_summary(run_dir, summary)
    plot_learning_curves(metrics, run_dir / "learning_curves.png", metric=task.headline)
    if last_test is not None and (data.num_classes >= 3 if class_plot is None else class_plot):
        save_class_accuracy(run_dir, config, last_test, class_counts)
    if config.diagnostics:
        plot_saved_diagnostics(run_dir, metrics, domain_of)
    save_clusters(run_dir, metrics)
    return RunResult(run_id, run_dir, summary, checkpoint.next_round if checkpoint else None)


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


def save_clusters(run_dir: Path, metrics) -> Path | None:
    """For clustered algorithms: ``clusters.json`` (the membership after every round where it
    changed, round 0 included) and ``clusters.png``; None when the run recorded no clusters."""
    table = cluster_table(metrics)
    if table.empty:
        return None
    changes, previous = [], None
    for round_index, row in table.iterrows():
        membership = {str(c): sorted(int(k) for k in row.index[row == c]) for c in sorted(set(row))}
        if membership != previous:
            changes.append({"round": int(round_index), "clusters": membership})
            previous = membership
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
