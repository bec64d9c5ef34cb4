"""Run summary: last-K-round mean ± std (as FedIA reports) and the best-validation round."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fgl_ray.results.manifest import write_json
from fgl_ray.results.writer import ALL_DOMAINS, SERVER_ID

TEST_SPLIT = "test"
VAL_SPLIT = "val"
AVG_KEY = "avg_over_domains"
CLIENT_AVG_KEY = "avg_over_clients"
SUMMARY_NAME = "summary.json"


def server_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Selects the server's aggregate rows of one run.

    Args:
        df: a long metrics table with a single run_id.

    Returns:
        The rows with ``client_id == "server"``; a value written twice keeps the last one.
    """
    if df["run_id"].nunique() > 1:
        raise ValueError(f"summarize expects one run, got run_ids {sorted(df['run_id'].unique())}")
    rows = df[df["client_id"] == SERVER_ID]
    return rows.drop_duplicates(subset=["round", "domain", "split", "metric"], keep="last")


def round_tables(rows: pd.DataFrame, split: str) -> dict[str, pd.DataFrame]:
    """Pivots one split of server rows into a round x domain table per metric.

    Args:
        rows: the result of :func:`server_rows`.
        split: the split to take.

    Returns:
        metric -> table indexed by round, with a column per domain, ``"all"`` where present,
        and ``"avg_over_domains"`` (the unweighted per-round mean of the domain columns).
    """
    tables = {}
    for metric, group in rows[rows["split"] == split].groupby("metric", sort=True):
        table = group.pivot(index="round", columns="domain", values="value").sort_index()
        domains = [d for d in table.columns if d != ALL_DOMAINS]
        table[AVG_KEY] = table[domains].mean(axis=1) if domains else np.nan
        tables[str(metric)] = table
    return tables


def client_tables(df: pd.DataFrame, split: str) -> dict[str, pd.DataFrame]:
    """Metric -> round x client table of the clients' own scores on ``split`` (one run)."""
    rows = df[(df["client_id"] != SERVER_ID) & (df["split"] == split)]
    rows = rows.drop_duplicates(subset=["round", "client_id", "metric"], keep="last")
    tables = {}
    for metric, group in rows.groupby("metric", sort=True):
        table = group.pivot(index="round", columns="client_id", values="value").sort_index()
        tables[str(metric)] = table[sorted(table.columns, key=int)]
    return tables


def _at_round(tests: dict[str, pd.DataFrame], clients: dict[str, pd.DataFrame], round_index: int) -> dict[str, Any]:
    """Test scores at one round: pooled, averaged over domains and over clients, and per client."""
    at = {m: t.loc[round_index] for m, t in tests.items() if round_index in t.index}
    own = {m: t.loc[round_index] for m, t in clients.items() if round_index in t.index}
    return {
        "domains": {d: {m: float(r[d]) for m, r in at.items() if d in r.index} for d in _domains(tests)},
        "all": {m: float(r[ALL_DOMAINS]) for m, r in at.items() if ALL_DOMAINS in r.index},
        AVG_KEY: {m: float(r[AVG_KEY]) for m, r in at.items()},
        CLIENT_AVG_KEY: {m: float(r.mean()) for m, r in own.items()},
        "clients": {str(c): {m: float(r[c]) for m, r in own.items() if c in r.index}
                    for c in _clients(clients)},
    }


def _clients(clients: dict[str, pd.DataFrame]) -> list[str]:
    return sorted({str(c) for table in clients.values() for c in table.columns}, key=int)


def _stats(values: pd.Series) -> dict[str, float]:
    return {"mean": float(values.mean()), "std": float(values.std(ddof=0))}


def _domains(tables: dict[str, pd.DataFrame]) -> list[str]:
    columns = {str(c) for table in tables.values() for c in table.columns}
    return sorted(columns - {ALL_DOMAINS, AVG_KEY})


def _best_validation(
    rows: pd.DataFrame, tests: dict[str, pd.DataFrame], clients: dict[str, pd.DataFrame], selection_metric: str
) -> dict[str, Any] | None:
    """The earliest round with the highest pooled validation score and its test scores (the same
    round for every client: never each client's own best, which would select on test data)."""
    val = rows[
        (rows["split"] == VAL_SPLIT)
        & (rows["domain"] == ALL_DOMAINS)
        & (rows["metric"] == selection_metric)
    ].dropna(subset=["value"])
    if val.empty:
        return None
    val = val.sort_values("round", kind="stable")
    best = int(np.argmax(val["value"].to_numpy()))
    best_round = int(val["round"].iloc[best])
    return {"round": best_round, "selection_metric": selection_metric, "val_value": float(val["value"].iloc[best]),
            **_at_round(tests, clients, best_round)}


def summarize(
    df: pd.DataFrame, last_k: int = 20, selection_metric: str = "accuracy"
) -> dict[str, Any]:
    """Summarises one run's long metrics table (server aggregate rows only).

    Test-split statistics are taken over the last ``last_k`` rounds that have test rows:
    mean and *population* standard deviation (ddof=0), skipping NaN values. A domain row is
    one with ``domain != "all"``; ``"all"`` is the pooled server row. ``avg_over_domains`` is
    the unweighted mean over domains computed per round (domains without a value at a round
    are skipped), then mean ± std over the window, as FedIA's AVG column.

    Args:
        df: the table of ``read_metrics`` for one run.
        last_k: the number of final evaluated rounds to average.
        selection_metric: the pooled validation metric that picks the best round.

    Returns:
        ``{"last_k", "rounds", "domains": {domain: {metric: {"mean", "std"}}}, "all": {metric:
        {"mean", "std"}}, "avg_over_domains": {...}, "avg_over_clients": {...}, "clients":
        {client: {metric: {"mean", "std"}}}, "final", "best_validation"}``. ``avg_over_clients``
        is the unweighted per-round mean of the clients' own scores (GCFL's average accuracy).
        ``final`` holds the test scores at the last evaluated round and ``best_validation``
        (None without validation rows) those at the earliest round of highest pooled
        validation score, each as ``{"round", "domains": {domain: {metric: value}}, "all",
        "avg_over_domains", "avg_over_clients", "clients": {client: {metric: value}}}``
        (``best_validation`` also has ``selection_metric`` and ``val_value``).
    """
    if last_k < 1:
        raise ValueError(f"last_k must be >= 1, got {last_k}")
    rows = server_rows(df)
    tests = round_tables(rows, TEST_SPLIT)
    clients = client_tables(df, TEST_SPLIT)
    test_rounds = sorted(rows.loc[rows["split"] == TEST_SPLIT, "round"].unique())
    window = [int(r) for r in test_rounds[-last_k:]]
    last = {m: t.reindex(window) for m, t in tests.items()}
    own = {m: t.reindex(window) for m, t in clients.items()}
    return {
        "last_k": last_k,
        "rounds": window,
        "domains": {
            d: {m: _stats(t[d]) for m, t in last.items() if d in t.columns} for d in _domains(tests)
        },
        "all": {m: _stats(t[ALL_DOMAINS]) for m, t in last.items() if ALL_DOMAINS in t.columns},
        AVG_KEY: {m: _stats(t[AVG_KEY]) for m, t in last.items()},
        CLIENT_AVG_KEY: {m: _stats(t.mean(axis=1)) for m, t in own.items()},
        "clients": {c: {m: _stats(t[c]) for m, t in own.items() if c in t.columns} for c in _clients(clients)},
        "final": {"round": window[-1], **_at_round(tests, clients, window[-1])} if window else None,
        "best_validation": _best_validation(rows, tests, clients, selection_metric),
    }


def _nan_to_none(obj: Any) -> Any:
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_nan_to_none(v) for v in obj]
    return obj


def write_summary(run_dir: str | os.PathLike[str], summary: dict[str, Any]) -> Path:
    """Writes ``run_dir/summary.json`` (NaN becomes null, keeping the file strict JSON).

    Args:
        run_dir: the run's output folder.
        summary: the result of :func:`summarize`.

    Returns:
        The summary path.
    """
    return write_json(Path(run_dir) / SUMMARY_NAME, _nan_to_none(summary))
