"""Grid heatmaps (FedIA Figure 11 / FedEPD Figure 5 style) on matplotlib's Agg canvas (no pyplot).

One heatmap of the grid's metric over its two heatmap axes per value combination of the other
(facet) axes; a cell whose score beats the baseline run with the same facet values is outlined.
Drawn from ``grid.json`` and ``trials.parquet`` alone, so ``fgl-ray report`` redraws it without
rerunning anything.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

HEATMAP_STEM = "heatmap"


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _show(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _short(path: str) -> str:
    return path.rsplit(".", 1)[-1]


def heatmap_matrix(description: Mapping[str, Any], scores: Mapping[str, float],
                   facet_values: Mapping[str, Any]) -> tuple[np.ndarray, list[Any], list[Any], float]:
    """The score matrix ``[len(y values), len(x values)]`` of one facet and its baseline score.

    Args:
        description: ``grid.json``.
        scores: trial id -> score (NaN for trials without one).
        facet_values: facet axis path -> value selecting the slice.

    Returns:
        (matrix with NaN where no trial scored, x values, y values, baseline score or NaN).
    """
    x_path, y_path = description["heatmap"]
    values = {axis["path"]: axis["values"] for axis in description["axes"]}
    xs, ys = values[x_path], values[y_path]
    col = {_key(v): i for i, v in enumerate(xs)}
    row = {_key(v): i for i, v in enumerate(ys)}
    wanted = {path: _key(v) for path, v in facet_values.items()}
    matrix = np.full((len(ys), len(xs)), np.nan)
    baseline = math.nan
    for point in description["points"]:
        axes = point["axes"]
        if any(_key(axes.get(path)) != key for path, key in wanted.items()):
            continue
        score = float(scores.get(point["id"], math.nan))
        if point["baseline"]:
            baseline = score
            continue
        matrix[row[_key(axes[y_path])], col[_key(axes[x_path])]] = score
    return matrix, list(xs), list(ys), baseline


def beats_baseline(matrix: np.ndarray, baseline: float) -> np.ndarray:
    """Cells strictly above the baseline score (none when the baseline has no score)."""
    if math.isnan(baseline):
        return np.zeros(matrix.shape, dtype=bool)
    with np.errstate(invalid="ignore"):
        return np.nan_to_num(matrix, nan=-np.inf) > baseline


def _percent(values: np.ndarray) -> bool:
    finite = values[np.isfinite(values)]
    return finite.size > 0 and float(finite.min()) >= 0.0 and float(finite.max()) <= 1.0


def plot_heatmap(matrix: np.ndarray, xs: Sequence[Any], ys: Sequence[Any], baseline: float, path: Path,
                 x_label: str, y_label: str, title: str, metric_label: str) -> Path:
    """Draws one heatmap; outlined cells beat ``baseline``. Fractions are shown in percent."""
    scale = 100.0 if _percent(np.append(matrix.ravel(), baseline)) else 1.0
    shown = matrix * scale
    fig = Figure(figsize=(max(6.4, 1.2 * len(xs) + 3.2), 0.9 * len(ys) + 2.6), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    finite = shown[np.isfinite(shown)]
    image = ax.imshow(np.ma.masked_invalid(shown), cmap="viridis", origin="lower", aspect="auto",
                      vmin=float(finite.min()) if finite.size else None, vmax=float(finite.max()) if finite.size else None)
    ax.set_xticks(range(len(xs)), [_show(v) for v in xs])
    ax.set_yticks(range(len(ys)), [_show(v) for v in ys])
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    better = beats_baseline(matrix, baseline)
    middle = (float(finite.min()) + float(finite.max())) / 2 if finite.size else 0.0
    for (i, j), value in np.ndenumerate(shown):
        text = "n/a" if math.isnan(value) else f"{value:.2f}"
        ax.text(j, i, text, ha="center", va="center", fontsize=9,
                color="black" if not math.isnan(value) and value > middle else "white")
        if better[i, j]:
            ax.add_patch(Rectangle((j - 0.45, i - 0.45), 0.9, 0.9, fill=False, edgecolor="red", linewidth=2.5))
    bar = fig.colorbar(image, ax=ax, shrink=0.9)
    bar.set_label(metric_label + (" (%)" if scale == 100.0 else ""))
    reference = "no baseline" if math.isnan(baseline) else f"baseline {baseline * scale:.2f}; red outline: better"
    ax.set_title(f"{title}\n{metric_label}, last-K mean; {reference}", fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=120)
    return path


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text).strip("_")


def plot_grid_heatmaps(description: Mapping[str, Any], trials: pd.DataFrame, folder: Path) -> tuple[list[Path], list[str]]:
    """Draws every heatmap of a grid into ``folder``.

    Returns:
        (PNG paths, notes): with other than two heatmap axes, no PNG and a note saying why.
    """
    if not description.get("heatmap"):
        count = len(description["axes"])
        return [], [f"no heatmap: the grid has {count} axis{'es' if count != 1 else ''}; a heatmap needs two "
                    "(name them with heatmap: {x: ..., y: ...})"]
    scores = dict(zip(trials["trial_id"], trials["score"].astype(float)))
    x_path, y_path = description["heatmap"]
    facets = description.get("facets", [])
    values = {axis["path"]: axis["values"] for axis in description["axes"]}
    metric = description["metric"]
    metric_label = f"test {metric['name']} ({metric['domain']})"
    paths, notes = [], []
    for combo in itertools.product(*(values[f] for f in facets)):
        chosen = dict(zip(facets, combo))
        matrix, xs, ys, baseline = heatmap_matrix(description, scores, chosen)
        suffix = "".join(f"-{_short(p)}={_show(v)}" for p, v in chosen.items())
        facet_text = ", ".join(f"{_short(p)}={_show(v)}" for p, v in chosen.items())
        title = f"{description['name']}{': ' + facet_text if facet_text else ''}"
        if np.isnan(matrix).all():
            notes.append(f"heatmap{suffix}: no trial has a score yet")
        path = folder / (f"{HEATMAP_STEM}-{_slug(suffix[1:])}.png" if suffix else f"{HEATMAP_STEM}.png")
        paths.append(plot_heatmap(matrix, xs, ys, baseline, path, x_path, y_path, title, metric_label))
    return paths, notes
