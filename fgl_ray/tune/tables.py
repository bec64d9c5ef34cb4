"""A grid's stored results: ``grid.json``, the trial table and the round-curve table (no Ray).

Files in a grid folder::

    grid.json          axes, heatmap axes, facets, metric, every point (id, axis values, digest)
    trials.parquet     one row per trial: axis values, the metric's last-K mean/std per domain,
                       avg over domains and pooled, best-validation figures, run folder, times
    curves.parquet     trial id, axis values, round, split, domain, metric, value (server rows;
                       domain ``avg_over_domains`` is the per-round mean over domains)
    runs/<point id>/   each trial's run folder (metrics.parquet, summary.json, ...; trial.json)
    tune/              Tune's experiment (state for --resume, TensorBoard event files)
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Mapping

import pandas as pd
import pyarrow as pa

from fgl_ray.results.summary import AVG_KEY, SUMMARY_NAME, TEST_SPLIT, VAL_SPLIT, round_tables, server_rows
from fgl_ray.results.writer import ALL_DOMAINS, read_metrics

GRID_JSON = "grid.json"
TRIALS_TABLE = "trials.parquet"
CURVES_TABLE = "curves.parquet"
RUNS_DIRNAME = "runs"
TUNE_DIRNAME = "tune"
TRIAL_RECORD = "trial.json"

#: Leading columns of both tables (axis columns follow, named by their dotted path).
ID_COLUMNS = ("trial_id", "baseline", "label")


def write_json(path: Path, value: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(value, indent=2, sort_keys=False, default=str))
    tmp.replace(path)
    return path


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


def _value(node: Mapping[str, Any] | None, *keys: str) -> float:
    for key in keys:
        if not isinstance(node, Mapping) or node.get(key) is None:
            return math.nan
        node = node[key]
    return float(node) if node is not None else math.nan


def _axis_cell(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def _label(point: Mapping[str, Any]) -> str:
    text = " ".join(f"{p.rsplit('.', 1)[-1]}={v:g}" if isinstance(v, float) else f"{p.rsplit('.', 1)[-1]}={v}"
                    for p, v in point["axes"].items())
    return ("baseline " + text).strip() if point["baseline"] else text


def _id_columns(point: Mapping[str, Any], axis_paths: Iterable[str]) -> dict[str, Any]:
    row = {"trial_id": point["id"], "baseline": bool(point["baseline"]), "label": _label(point)}
    for path in axis_paths:
        row[path] = _axis_cell(point["axes"].get(path))
    return row


def trial_row(point: Mapping[str, Any], axis_paths: list[str], run_dir: Path, metric: Mapping[str, str],
              status: str | None = None) -> dict[str, Any]:
    """One trial's row from its run folder (summary.json, trial.json); NaN where missing."""
    summary_path, record_path = run_dir / SUMMARY_NAME, run_dir / TRIAL_RECORD
    summary = read_json(summary_path) if summary_path.is_file() else None
    record = read_json(record_path) if record_path.is_file() else {}
    name, domain = metric["name"], metric["domain"]
    row = _id_columns(point, axis_paths)
    row["status"] = status or ("TERMINATED" if summary is not None else "MISSING")
    scope = _scope(summary, domain) if summary else None
    row["score"] = _value(scope, name, "mean")
    row["score_std"] = _value(scope, name, "std")
    if summary is not None:
        for d, stats in sorted(summary.get("domains", {}).items()):
            row[f"{name}.{d}.mean"] = _value(stats, name, "mean")
            row[f"{name}.{d}.std"] = _value(stats, name, "std")
    for key in (AVG_KEY, ALL_DOMAINS):
        node = summary.get(key) if summary else None
        row[f"{name}.{key}.mean"] = _value(node, name, "mean")
        row[f"{name}.{key}.std"] = _value(node, name, "std")
    best = summary.get("best_validation") if summary else None
    row["best_val.round"] = float(best["round"]) if best else math.nan
    row["best_val.val_value"] = _value(best, "val_value")
    row[f"best_val.{name}.{AVG_KEY}"] = _value(best, AVG_KEY, name)
    row[f"best_val.{name}.{ALL_DOMAINS}"] = _value(best, ALL_DOMAINS, name)
    row["last_k"] = float(summary["last_k"]) if summary else math.nan
    row["run_dir"] = str(run_dir)
    row["tune_dir"] = str(run_dir.parent.parent / TUNE_DIRNAME / record["tune_trial_dir"]) if record else None
    row["started_at"] = float(record.get("started_at", math.nan))
    row["ended_at"] = float(record.get("ended_at", math.nan))
    row["wall_s"] = row["ended_at"] - row["started_at"]
    row["first_round_s"] = float(record.get("first_round_s", math.nan))
    return row


def _scope(summary: Mapping[str, Any], domain: str) -> Mapping[str, Any] | None:
    if domain in (AVG_KEY, ALL_DOMAINS):
        return summary.get(domain)
    return summary.get("domains", {}).get(domain)


def trials_table(description: Mapping[str, Any], folder: Path, statuses: Mapping[str, str] | None = None) -> pd.DataFrame:
    """The trial table of a grid folder, one row per point of ``grid.json`` (baselines first)."""
    paths = [axis["path"] for axis in description["axes"]]
    rows = [trial_row(point, paths, folder / RUNS_DIRNAME / point["id"], description["metric"],
                      (statuses or {}).get(point["id"]))
            for point in description["points"]]
    return pd.DataFrame(rows)


def curve_rows(point: Mapping[str, Any], axis_paths: list[str], run_dir: Path) -> pd.DataFrame | None:
    """Server val/test curves of one run in long form, with the trial's id and axis values."""
    try:
        metrics = read_metrics(run_dir)
    except FileNotFoundError:
        return None
    if metrics.empty:
        return None
    rows = server_rows(metrics)
    parts = []
    for split in (VAL_SPLIT, TEST_SPLIT):
        for metric, table in round_tables(rows, split).items():
            long = table.rename_axis(columns="domain").reset_index().melt(id_vars="round", var_name="domain",
                                                                         value_name="value")
            long["split"], long["metric"] = split, metric
            parts.append(long.dropna(subset=["value"]))
    if not parts:
        return None
    frame = pd.concat(parts, ignore_index=True)
    for key, value in reversed(list(_id_columns(point, axis_paths).items())):
        frame.insert(0, key, value)
    return frame[[*ID_COLUMNS, *axis_paths, "round", "split", "domain", "metric", "value"]]


def curves_table(description: Mapping[str, Any], folder: Path) -> pd.DataFrame:
    """Per-round curves of every trial that left metrics."""
    paths = [axis["path"] for axis in description["axes"]]
    frames = [curve_rows(point, paths, folder / RUNS_DIRNAME / point["id"]) for point in description["points"]]
    frames = [f for f in frames if f is not None]
    if not frames:
        return pd.DataFrame(columns=[*ID_COLUMNS, *paths, "round", "split", "domain", "metric", "value"])
    return pd.concat(frames, ignore_index=True)


def write_table(frame: pd.DataFrame, path: Path, axis_paths: Iterable[str] = ()) -> Path:
    """Writes ``frame`` as Parquet; an axis column mixing types is stored as text."""
    frame = frame.copy()
    for column in axis_paths:
        if column in frame:
            try:
                pa.array(frame[column].tolist())
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                frame[column] = frame[column].map(lambda v: None if v is None else str(v))
    tmp = path.with_name(f".{path.name}.tmp")
    frame.to_parquet(tmp, index=False)
    tmp.replace(path)
    return path


def write_tables(description: Mapping[str, Any], folder: Path,
                 statuses: Mapping[str, str] | None = None) -> tuple[Path, Path]:
    """Builds and writes ``trials.parquet`` and ``curves.parquet`` from the run folders."""
    paths = [axis["path"] for axis in description["axes"]]
    trials = write_table(trials_table(description, folder, statuses), folder / TRIALS_TABLE, paths)
    curves = write_table(curves_table(description, folder), folder / CURVES_TABLE, paths)
    return trials, curves


def max_overlap(intervals: Iterable[tuple[float, float]]) -> int:
    """The most intervals that are open at one instant (how many trials ran concurrently)."""
    events = []
    for start, end in intervals:
        if math.isnan(start) or math.isnan(end):
            continue
        events += [(start, 1), (end, -1)]
    running = best = 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):
        running += step
        best = max(best, running)
    return best
