"""PNG figures of a run, drawn on matplotlib's Agg canvas (no pyplot, no display)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from fgl_ray.results.summary import AVG_KEY, TEST_SPLIT, VAL_SPLIT, round_tables, server_rows
from fgl_ray.results.writer import ALL_DOMAINS, SERVER_ID


def plot_learning_curves(
    df: pd.DataFrame,
    path: str | os.PathLike[str],
    metric: str = "accuracy",
    title: str | None = None,
) -> Path:
    """Draws test ``metric`` per domain and the domain average over rounds, plus the pooled
    validation ``metric`` dashed.

    Args:
        df: the table of ``read_metrics`` for one run (server rows are used).
        path: the PNG to write (parent folders are created).
        metric: the metric to plot.
        title: the figure title; by default names the metric and the run.

    Returns:
        The PNG path.
    """
    rows = server_rows(df)
    test = round_tables(rows, TEST_SPLIT).get(metric)
    val = round_tables(rows, VAL_SPLIT).get(metric)
    fig = Figure(figsize=(8, 5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if test is not None:
        for domain in (c for c in test.columns if c not in (ALL_DOMAINS, AVG_KEY)):
            ax.plot(test.index, test[domain], linewidth=1.2, label=f"test {domain}")
        ax.plot(test.index, test[AVG_KEY], color="black", linewidth=2.2, label="test domain avg")
    if val is not None and ALL_DOMAINS in val.columns:
        ax.plot(val.index, val[ALL_DOMAINS], "--", color="gray", label=f"val {ALL_DOMAINS}")
    if title is None:
        run_ids = sorted(df["run_id"].unique())
        title = f"test {metric} per domain" + (f" ({run_ids[0]})" if run_ids else "")
    ax.set_title(title)
    ax.set_xlabel("round")
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize="small")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=120)
    return out


def plot_update_diagnostics(
    df: pd.DataFrame,
    overlap: np.ndarray,
    labels: list[str],
    path: str | os.PathLike[str],
) -> Path:
    """FedIA Figure 2 style: a client-by-client top-p overlap matrix, and the mean
    off-diagonal overlap over rounds against the random-set reference.

    Args:
        df: the run's metrics table (server ``diagnostics`` rows are used).
        overlap: one round's ``[K, K]`` Jaccard overlap matrix.
        labels: one label per row of ``overlap`` (e.g. ``"3:DE"``).
        path: the PNG to write.

    Returns:
        The PNG path.
    """
    rows = df[(df.client_id == SERVER_ID) & (df.split == "diagnostics")]
    series = rows.pivot_table(index="round", columns="metric", values="value")
    fig = Figure(figsize=(12, 5), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2, width_ratios=(1, 1.2))
    image = left.imshow(overlap, cmap="viridis", vmin=0, vmax=max(float(np.nanmax(overlap)), 1e-9))
    left.set_xticks(range(len(labels)), labels, rotation=90, fontsize=7)
    left.set_yticks(range(len(labels)), labels, fontsize=7)
    left.set_title("pairwise top-p Jaccard overlap (last diagnosed round)")
    fig.colorbar(image, ax=left, shrink=0.8)
    if "overlap_mean_off_diagonal" in series:
        right.plot(series.index, series["overlap_mean_off_diagonal"], label="mean off-diagonal overlap")
        right.plot(series.index, series["overlap_random_reference"], "k--", label="random-set reference p/(2-p)")
        right.plot(series.index, series["cosine_to_aggregate_mean"], label="mean cosine to the average update")
    right.set_xlabel("round")
    right.legend()
    right.set_title("update-field diagnostics over rounds")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    return out
