"""A plain-text comparison of run summaries (e.g. FedAvg vs local training)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from fgl_ray.results.summary import AVG_KEY, CLIENT_AVG_KEY

MISSING = "n/a"


def _percent(value: float | None) -> str | None:
    """``value`` (a fraction) in percent with two decimals; None when missing or NaN."""
    if value is None or math.isnan(value):
        return None
    return f"{100 * value:.2f}"


def _mean_std(stats: Mapping[str, float | None] | None) -> str:
    mean = _percent(stats["mean"]) if stats else None
    if mean is None:
        return MISSING
    return f"{mean} ± {_percent(stats['std']) or MISSING}"


def _best_val(summary: Mapping[str, Any], metric: str) -> str:
    best = summary.get("best_validation")
    value = _percent(best["all"].get(metric)) if best else None
    return f"{value} (round {best['round']})" if value is not None else MISSING


def reference_rows(summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Label -> scores of the label-only references (per-domain majority, best constant class) that
    the first summary carries (runs compared in one table share their test set); empty if none."""
    refs = next((s["references"] for s in summaries.values() if s.get("references")), None)
    if refs is None:
        return {}
    best = refs["best_constant"]
    return {"majority class per domain": refs["majority"], f"constant class {best['class']}": best}


def _value(scores: Mapping[str, float] | None, metric: str) -> str:
    return _percent((scores or {}).get(metric)) or MISSING


def comparison_table(summaries: Mapping[str, Mapping[str, Any]], metric: str = "accuracy") -> str:
    """Formats one row per run: last-K "mean ± std" in percent per domain, AVG (over domains),
    CLIENTS (the mean of the clients' own scores), ALL (pooled), and the pooled test ``metric`` at
    the best-validation round; then the label-only references (:func:`reference_rows`), which
    need no training.

    Args:
        summaries: run label -> the result of ``summarize`` (or the loaded ``summary.json``).
        metric: the metric to show.

    Returns:
        The table as text; "n/a" marks a missing value.
    """
    domains = sorted({d for s in summaries.values() for d in s["domains"]})
    rows = [
        [
            label,
            *(_mean_std(s["domains"].get(d, {}).get(metric)) for d in domains),
            _mean_std(s[AVG_KEY].get(metric)),
            _mean_std(s.get(CLIENT_AVG_KEY, {}).get(metric)),
            _mean_std(s["all"].get(metric)),
            _best_val(s, metric),
        ]
        for label, s in summaries.items()
    ]
    rows += [
        [label, *(_value(r["domains"].get(d), metric) for d in domains), _value(r[AVG_KEY], metric), MISSING,
         _value(r["all"], metric), MISSING]
        for label, r in reference_rows(summaries).items()
    ]
    columns = ["run", *domains, "AVG", "CLIENTS", "ALL", f"best-val ALL {metric}"]
    return pd.DataFrame(rows, columns=columns).to_string(index=False)


POOLED_METRICS = ("accuracy", "balanced_accuracy", "macro_f1", "head_accuracy", "medium_accuracy", "tail_accuracy")


def pooled_table(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    """One row per run: last-K "mean ± std" in percent of every metric pooled over all clients
    (for classification accuracy, balanced accuracy, macro-F1 and, where recorded, head/medium/tail
    accuracy, in that order; for other tasks every recorded metric), then the label-only references
    (head/medium/tail n/a)."""
    recorded = sorted({m for s in summaries.values() for m in s["all"]})
    metrics = [m for m in POOLED_METRICS if m in recorded] or recorded
    rows = [[label, *(_mean_std(s["all"].get(m)) for m in metrics)] for label, s in summaries.items()]
    rows += [[label, *(_value(r["all"], m) for m in metrics)] for label, r in reference_rows(summaries).items()]
    return pd.DataFrame(rows, columns=["run", *metrics]).to_string(index=False)
