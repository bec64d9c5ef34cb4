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
    return _save_over_rounds(fig, ax, path, metric, title)


def plot_comparison(
    runs: "dict[str, pd.DataFrame]",
    path: str | os.PathLike[str],
    metric: str = "accuracy",
) -> Path:
    """Draws each run's domain-average test ``metric`` over rounds in one figure.

    Args:
        runs: label -> the run's ``read_metrics`` table.
        path: the PNG to write.
        metric: the metric to compare.

    Returns:
        The PNG path.
    """
    fig = Figure(figsize=(8, 5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for label, df in runs.items():
        test = round_tables(server_rows(df), TEST_SPLIT).get(metric)
        if test is not None:
            ax.plot(test.index, test[AVG_KEY], linewidth=1.8, label=label)
    return _save_over_rounds(fig, ax, path, metric, f"test {metric}, average over domains")


def _save_over_rounds(fig: Figure, ax, path: str | os.PathLike[str], metric: str, title: str) -> Path:
    """Labels a ``metric``-over-rounds axes, adds its legend and writes the figure as a PNG."""
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


def per_class_accuracy(cm: np.ndarray) -> np.ndarray:
    """Recall of every class from a ``[C, C]`` confusion matrix (rows = true class); NaN where a
    class has no true sample."""
    cm = np.asarray(cm, dtype=np.float64)
    support = cm.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(support > 0, np.diag(cm) / np.where(support > 0, support, 1.0), np.nan)


def plot_class_accuracy(
    accuracies: "dict[str, np.ndarray]",
    class_counts: np.ndarray,
    path: str | os.PathLike[str],
    bins: int = 10,
    cuts: tuple[float, float] = (1 / 3, 2 / 3),
    title: str | None = None,
) -> Path:
    """FedEPD Figure 4 style: per-class test accuracy over classes sorted by training frequency.

    Classes are sorted by decreasing ``class_counts`` (ties: lower index first); with more than
    ``bins`` classes they are split into ``bins`` consecutive groups of near-equal size and each
    group shows its mean accuracy (over classes with test samples) and its mean training count.
    Gray bars (right axis) are training counts; shaded, labelled spans mark the head, medium and
    tail classes cut at ``cuts`` (fractions of the classes, as :func:`fgl_ray.metrics.head_medium_tail`).

    Args:
        accuracies: method label -> per-class accuracy ``[C]`` (NaN for classes without samples),
            e.g. :func:`per_class_accuracy` of a pooled test confusion matrix.
        class_counts: global training nodes per class ``[C]``.
        path: the PNG to write.
        bins: the most points drawn along the x axis.
        cuts: head/medium and medium/tail cut fractions.
        title: the figure title.

    Returns:
        The PNG path.
    """
    counts = np.asarray(class_counts, dtype=np.float64)
    order = np.argsort(-counts, kind="stable")
    groups = np.array_split(np.arange(order.size), min(bins, order.size))
    x = np.arange(len(groups))
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    bars = ax.twinx()
    bars.bar(x, [counts[order[g]].mean() for g in groups], color="0.85", width=0.8, zorder=0)
    bars.set_ylabel("training nodes per class")
    ax.set_zorder(bars.get_zorder() + 1)
    ax.patch.set_visible(False)
    bounds = [0, round(cuts[0] * order.size), round(cuts[1] * order.size), order.size]
    bands = zip(zip(bounds[:-1], bounds[1:]), ("tab:blue", "tab:orange", "tab:red"), ("head", "medium", "tail"))
    for (start, stop), colour, band in bands:
        inside = [i for i, g in enumerate(groups) if start <= g[0] < stop]
        if inside:
            ax.axvspan(min(inside) - 0.5, max(inside) + 0.5, color=colour, alpha=0.07)
            ax.text((min(inside) + max(inside)) / 2, 0.98, band, transform=ax.get_xaxis_transform(), ha="center",
                    va="top", color=colour, fontsize=9, fontweight="bold")
    for label, accuracy in accuracies.items():
        values = np.asarray(accuracy, dtype=np.float64)[order]
        with np.errstate(invalid="ignore"):
            means = [np.nanmean(values[g]) if np.isfinite(values[g]).any() else np.nan for g in groups]
        ax.plot(x, means, marker="o", linewidth=1.6, label=label)
    ax.set_xticks(x, [f"{g[0] + 1}" if g.size == 1 else f"{g[0] + 1}-{g[-1] + 1}" for g in groups],
                  fontsize=8, rotation=45 if len(groups) > 8 else 0)
    ax.set_xlabel("classes by training frequency (rank; head → tail)")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    if accuracies:   # below the axes, clear of the band labels
        fig.legend(loc="outside lower center", ncols=min(len(accuracies), 4), fontsize="small")
    ax.set_title(title or "per-class test accuracy, classes sorted by training frequency")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=120)
    return out


def cluster_table(df: pd.DataFrame) -> pd.DataFrame:
    """Round x client table of cluster numbers from the ``cluster`` rows of a run (empty if none)."""
    rows = df[(df["split"] == "cluster") & (df["metric"] == "cluster")]
    if rows.empty:
        return pd.DataFrame()
    table = rows.pivot_table(index="round", columns="client_id", values="value", aggfunc="last")
    return table[sorted(table.columns, key=int)].astype(int)


def plot_cluster_membership(df: pd.DataFrame, path: str | os.PathLike[str], title: str | None = None) -> Path | None:
    """Draws each client's cluster over rounds (one colour per cluster); None without cluster rows."""
    table = cluster_table(df)
    if table.empty:
        return None
    fig = Figure(figsize=(9, max(2.5, 0.28 * table.shape[1] + 1.2)), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    image = ax.imshow(table.to_numpy().T, aspect="auto", interpolation="nearest", cmap="tab20",
                      extent=(table.index.min() - 0.5, table.index.max() + 0.5, table.shape[1] - 0.5, -0.5))
    ax.set_yticks(range(table.shape[1]), [str(c) for c in table.columns])
    ax.set_xlabel("round")
    ax.set_ylabel("client")
    ax.set_title(title or "cluster of each client over rounds")
    fig.colorbar(image, ax=ax, label="cluster")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=120)
    return out
