"""PNG figures of a run, drawn on matplotlib's Agg canvas (no pyplot, no display)."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from fgl_ray.results.summary import AVG_KEY, TEST_SPLIT, VAL_SPLIT, round_tables, server_rows
from fgl_ray.results.writer import ALL_DOMAINS


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
