"""``fgl-ray report``: redraws a grid's or a run's figures from stored results (no Ray, no rerun)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from fgl_ray.results import plot_learning_curves, read_metrics, summarize, write_summary
from fgl_ray.results.summary import SUMMARY_NAME
from fgl_ray.tune.plots import plot_grid_heatmaps
from fgl_ray.tune.tables import GRID_JSON, TRIALS_TABLE, read_json

TRIAL_COLUMNS = ["trial_id", "label", "status", "score", "score_std", "best_val.round"]


def format_trials(frame: pd.DataFrame, limit: int = 12) -> str:
    """The best ``limit`` trials by score, then the baselines, as text."""
    ranked = frame.sort_values("score", ascending=False, na_position="last")
    shown = pd.concat([ranked[~ranked["baseline"]].head(limit), ranked[ranked["baseline"]]])
    columns = [c for c in TRIAL_COLUMNS if c in shown]
    shown = shown[columns].copy()
    if "best_val.round" in shown:
        shown["best_val.round"] = shown["best_val.round"].astype("Int64")
    return shown.to_string(index=False, float_format=lambda v: f"{v:.4f}")


def is_grid_folder(folder: Path) -> bool:
    return (Path(folder) / GRID_JSON).is_file()


def redraw_grid(folder: Path) -> tuple[list[Path], list[str], str]:
    """Heatmaps of a grid folder from ``grid.json`` and ``trials.parquet``.

    Returns:
        (PNG paths, notes, a text table of the best trials and the baselines).
    """
    folder = Path(folder)
    table = folder / TRIALS_TABLE
    if not table.is_file():
        raise FileNotFoundError(f"{folder} has {GRID_JSON} but no {TRIALS_TABLE}; the grid has not finished "
                                "once (resume it with fgl-ray tune <grid.yaml> --resume)")
    trials = pd.read_parquet(table)
    heatmaps, notes = plot_grid_heatmaps(read_json(folder / GRID_JSON), trials, folder)
    return heatmaps, notes, format_trials(trials)


def redraw_run(folder: Path) -> tuple[Path, dict]:
    """Learning curves of one run folder; its summary is recomputed when missing.

    Returns:
        (the PNG path, the summary).
    """
    folder = Path(folder)
    metrics = read_metrics(folder)
    summary_path = folder / SUMMARY_NAME
    manifest = folder / "manifest.json"
    config = read_json(manifest).get("config", {}) if manifest.is_file() else {}
    metric = headline_metric(config)
    if summary_path.is_file():
        summary = read_json(summary_path)
    else:
        summary = summarize(metrics, last_k=int(config.get("last_k", 20)), selection_metric=metric)
        write_summary(folder, summary)
    return plot_learning_curves(metrics, folder / "learning_curves.png", metric=metric), summary


def headline_metric(config: dict) -> str:
    """The headline metric of the task a run's stored config resolves to (accuracy if it cannot say)."""
    from fgl_ray.config import ConfigError, load_config
    from fgl_ray.tasks import build_task

    where = ("run_name", "output_dir", "data_dir")   # where it ran says nothing of its task (and may be gone)
    try:
        return build_task(load_config({k: v for k, v in config.items() if k not in where})).headline
    except (ConfigError, ValueError):
        return "accuracy"
