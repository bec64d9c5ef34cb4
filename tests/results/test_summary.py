"""Last-K statistics, the domain average and best-validation selection."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fgl_ray.results.summary import summarize, write_summary
from fgl_ray.results.writer import METRIC_COLUMNS

DOMAINS = ("DE", "EN", "ES")
METRICS = ("accuracy", "macro_f1")
ROUNDS = np.arange(2, 62, 2)  # evaluated every second round
LAST_K = 5


def _long(values: dict[tuple[str, str, str], np.ndarray], client_id: str = "server") -> list[dict]:
    """Rows for {(domain, split, metric): value per round in ROUNDS}."""
    return [
        dict(zip(METRIC_COLUMNS, ("run", int(r), client_id, d, s, m, float(v)), strict=True))
        for (d, s, m), series in values.items()
        for r, v in zip(ROUNDS, series, strict=True)
    ]


@pytest.fixture()
def run() -> tuple[pd.DataFrame, dict, np.ndarray]:
    rng = np.random.default_rng(0)
    test = {(d, "test", m): rng.random(len(ROUNDS)) for d in (*DOMAINS, "all") for m in METRICS}
    val_all = rng.random(len(ROUNDS)) * 0.5
    val_all[[7, 12]] = 0.9  # a tie: the earlier round wins
    noise = {(d, "test", m): rng.random(len(ROUNDS)) + 5 for d in DOMAINS for m in METRICS}
    rows = _long(test) + _long({("all", "val", "accuracy"): val_all}) + _long(noise, "3")
    df = pd.DataFrame(rows).sample(frac=1.0, random_state=1)  # order must not matter
    return df, test, val_all


def _stats(values: np.ndarray) -> dict[str, float]:
    return {"mean": float(np.mean(values)), "std": float(np.std(values))}


def test_last_k_domain_all_and_average(run) -> None:
    df, test, _ = run
    summary = summarize(df, last_k=LAST_K)
    assert summary["rounds"] == ROUNDS[-LAST_K:].tolist()
    assert sorted(summary["domains"]) == list(DOMAINS)
    for m in METRICS:
        for d in DOMAINS:
            assert summary["domains"][d][m] == pytest.approx(_stats(test[d, "test", m][-LAST_K:]))
        assert summary["all"][m] == pytest.approx(_stats(test["all", "test", m][-LAST_K:]))
        per_round_avg = np.mean([test[d, "test", m] for d in DOMAINS], axis=0)
        assert summary["avg_over_domains"][m] == pytest.approx(_stats(per_round_avg[-LAST_K:]))


def test_window_longer_than_run_uses_all_rounds(run) -> None:
    df, test, _ = run
    summary = summarize(df, last_k=1000)
    assert summary["rounds"] == ROUNDS.tolist()
    assert summary["all"]["accuracy"] == pytest.approx(_stats(test["all", "test", "accuracy"]))


def test_best_validation_takes_earliest_of_tied_rounds(run) -> None:
    df, test, val_all = run
    best = summarize(df, last_k=LAST_K)["best_validation"]
    index = int(np.flatnonzero(val_all == val_all.max())[0])
    assert best["round"] == ROUNDS[index]
    assert best["val_value"] == pytest.approx(val_all.max())
    for m in METRICS:
        for d in DOMAINS:
            assert best["domains"][d][m] == pytest.approx(test[d, "test", m][index])
        assert best["all"][m] == pytest.approx(test["all", "test", m][index])
        expected_avg = np.mean([test[d, "test", m][index] for d in DOMAINS])
        assert best["avg_over_domains"][m] == pytest.approx(expected_avg)


def test_no_validation_rows_gives_no_best_round(run) -> None:
    df, _, _ = run
    assert summarize(df[df["split"] != "val"])["best_validation"] is None


def test_rewritten_value_keeps_the_last(run) -> None:
    df, test, _ = run
    last_round = int(ROUNDS[-1])
    values = ("run", last_round, "server", "all", "test", "accuracy", 2.0)
    rewrite = dict(zip(METRIC_COLUMNS, values, strict=True))
    summary = summarize(pd.concat([df, pd.DataFrame([rewrite])]), last_k=LAST_K)
    expected = test["all", "test", "accuracy"][-LAST_K:].copy()
    expected[-1] = 2.0
    assert summary["all"]["accuracy"] == pytest.approx(_stats(expected))


def test_several_runs_are_rejected(run) -> None:
    df, _, _ = run
    with pytest.raises(ValueError, match="one run"):
        summarize(pd.concat([df, df.assign(run_id="other")]))


def test_write_summary_is_strict_json(tmp_path: Path, run) -> None:
    df, _, _ = run
    summary = summarize(df, last_k=LAST_K)
    summary["all"]["accuracy"]["std"] = math.nan
    path = write_summary(tmp_path, summary)
    loaded = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON {c}"))
    assert loaded["all"]["accuracy"]["std"] is None
    assert loaded["best_validation"]["round"] == summary["best_validation"]["round"]


def test_client_figures_final_round_and_best_validation_per_client() -> None:
    rng = np.random.default_rng(3)
    per_client = {c: rng.random(len(ROUNDS)) for c in ("0", "1", "7")}
    rows = _long({("all", "test", "accuracy"): rng.random(len(ROUNDS))})
    val = rng.random(len(ROUNDS)) * 0.5
    val[4] = 0.99
    rows += _long({("all", "val", "accuracy"): val})
    for client, series in per_client.items():
        rows += _long({("DE", "test", "accuracy"): series, ("DE", "train", "accuracy"): series + 9}, client)
    summary = summarize(pd.DataFrame(rows), last_k=LAST_K)
    window = slice(len(ROUNDS) - LAST_K, None)
    mean_curve = np.mean([series for series in per_client.values()], axis=0)
    assert summary["avg_over_clients"]["accuracy"]["mean"] == pytest.approx(mean_curve[window].mean())
    assert summary["avg_over_clients"]["accuracy"]["std"] == pytest.approx(mean_curve[window].std())
    assert sorted(summary["clients"], key=int) == ["0", "1", "7"]          # train rows are not test scores
    for client, series in per_client.items():
        assert summary["clients"][client]["accuracy"]["mean"] == pytest.approx(series[window].mean())
        assert summary["final"]["clients"][client]["accuracy"] == pytest.approx(series[-1])
        assert summary["best_validation"]["clients"][client]["accuracy"] == pytest.approx(series[4])
    assert summary["final"]["round"] == int(ROUNDS[-1])
    assert summary["best_validation"]["round"] == int(ROUNDS[4])
    assert summary["best_validation"]["avg_over_clients"]["accuracy"] == pytest.approx(mean_curve[4])
