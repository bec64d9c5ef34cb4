"""The plain-text comparison table."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fgl_ray.results.summary import summarize
from fgl_ray.results.table import MISSING, comparison_table, pooled_table
from fgl_ray.results.writer import metric_rows


def _summary(seed: int, domains: tuple[str, ...], with_val: bool = True) -> dict:
    rng = np.random.default_rng(seed)
    rows = []
    for r in range(1, 8):
        for domain in (*domains, "all"):
            rows += metric_rows(r, "server", domain, "test", {"accuracy": rng.random()})
        if with_val:
            rows += metric_rows(r, "server", "all", "val", {"accuracy": rng.random()})
    return summarize(pd.DataFrame(rows).assign(run_id=f"run{seed}"), last_k=3)


def _cell(stats: dict) -> str:
    return f"{100 * stats['mean']:.2f} ± {100 * stats['std']:.2f}"


def test_table_rows_and_cells() -> None:
    fedavg, local = _summary(0, ("DE", "EN")), _summary(1, ("EN", "ES"), with_val=False)
    text = comparison_table({"fedavg": fedavg, "local": local})
    header, first, second = text.splitlines()
    assert header.split()[:7] == ["run", "DE", "EN", "ES", "AVG", "CLIENTS", "ALL"]
    assert first.split()[0] == "fedavg" and second.split()[0] == "local"
    for cell in (
        _cell(fedavg["domains"]["DE"]["accuracy"]),
        _cell(fedavg["avg_over_domains"]["accuracy"]),
        _cell(fedavg["all"]["accuracy"]),
        f"{100 * fedavg['best_validation']['all']['accuracy']:.2f}",
        f"(round {fedavg['best_validation']['round']})",
    ):
        assert cell in first
    assert _cell(local["domains"]["ES"]["accuracy"]) in second
    assert second.count(MISSING) == 3  # no DE column value, no client rows, no best-validation round


def test_pooled_table_shows_every_recorded_pooled_metric() -> None:
    rows = []
    for r in range(1, 6):
        rows += metric_rows(r, "server", "all", "test", {"accuracy": r / 10, "macro_f1": r / 20, "tail_accuracy": r / 40})
    summary = summarize(pd.DataFrame(rows).assign(run_id="lt"), last_k=2)
    header, row = pooled_table({"fedepd": summary}).splitlines()
    assert header.split() == ["run", "accuracy", "macro_f1", "tail_accuracy"]   # recorded ones, fixed order
    for metric in ("accuracy", "macro_f1", "tail_accuracy"):
        assert _cell(summary["all"][metric]) in row
    # last two rounds: accuracy 0.4 and 0.5 -> 45.00 ± 5.00 (population std)
    assert "45.00 ± 5.00" in row


def test_tables_end_with_the_label_only_references() -> None:
    from fgl_ray.results.references import reference_scores

    summary = _summary(0, ("DE", "EN"))
    summary["references"] = reference_scores({0: np.array([3, 1]), 1: np.array([1, 4])}, {0: "DE", 1: "EN"})
    lines = comparison_table({"fedavg": summary}).splitlines()
    assert lines[-2].split()[:4] == ["majority", "class", "per", "domain"]
    assert lines[-2].split()[4:6] == ["75.00", "80.00"]          # 3/4 on DE, 4/5 on EN
    assert lines[-1].split()[:3] == ["constant", "class", "1"]   # AVG (1/4 + 4/5)/2 beats (3/4 + 1/5)/2
    pooled = pooled_table({"fedavg": summary}).splitlines()
    assert pooled[-1].split()[:4] == ["constant", "class", "1", "55.56"]   # 5 of 9 pooled
