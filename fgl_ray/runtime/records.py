"""Turns a :class:`RoundResult` into long-format metric rows."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Mapping, Sequence

import torch

from fgl_ray.diagnostics import mean_off_diagonal, random_overlap_reference
from fgl_ray.messages import cluster_number, is_cluster_key
from fgl_ray.results import ALL_DOMAINS, SERVER_ID, metric_rows
from fgl_ray.runtime.server import RoundResult
from fgl_ray.tasks import Task, group_stats, pool_stats
from fgl_ray.tasks.base import EVAL_SPLITS

if TYPE_CHECKING:
    import pandas as pd

    from fgl_ray.runtime.timing import StartupClock

#: Per-client diagnostics; each also gets a per-domain row (the mean over the domain's clients).
PER_CLIENT_DIAGNOSTICS = ("cosine_to_aggregate", "active_share", "active_mean_abs", "aggregate_abs")


def diagnostic_rows(result: RoundResult, domain_of: Mapping[int, str], fraction: float) -> list[dict]:
    """Summaries of the round's update diagnostics (the full matrices are saved separately): the
    federation-wide means, and the per-client figures with their per-domain means."""
    found = result.diagnostics
    if not found:
        return []
    t = result.round
    rows = metric_rows(t, SERVER_ID, ALL_DOMAINS, "diagnostics", {
        "overlap_mean_off_diagonal": mean_off_diagonal(torch.tensor(found["overlap"])),
        "overlap_random_reference": random_overlap_reference(fraction),
        "pairwise_cosine_mean_off_diagonal": mean_off_diagonal(torch.tensor(found["pairwise_cosine"])),
        "cosine_to_aggregate_mean": float(found["cosine_to_aggregate"].mean()),
    })
    per_client = [name for name in PER_CLIENT_DIAGNOSTICS if name in found]
    by_domain: dict[str, list[int]] = {}
    for index, client_id in enumerate(found["client_ids"].tolist()):
        rows += metric_rows(t, client_id, domain_of[client_id], "diagnostics",
                            {name: float(found[name][index]) for name in per_client})
        by_domain.setdefault(domain_of[client_id], []).append(index)
    for domain, indices in by_domain.items():
        rows += metric_rows(t, SERVER_ID, domain, "diagnostics",
                            {name: float(found[name][indices].mean()) for name in per_client})
    return rows


def aggregation_rows(result: RoundResult, domain_of: Mapping[int, str]) -> list[dict]:
    """The weight each client's update got (split ``aggregation``): per client, summed per domain,
    and the largest one with its client id."""
    weights = result.aggregation_weights
    if not weights:
        return []
    t = result.round
    rows: list[dict] = []
    per_domain: dict[str, float] = {}
    for client_id, weight in sorted(weights.items()):
        rows += metric_rows(t, client_id, domain_of[client_id], "aggregation", {"client_weight": weight})
        per_domain[domain_of[client_id]] = per_domain.get(domain_of[client_id], 0.0) + weight
    for domain, weight in per_domain.items():
        rows += metric_rows(t, SERVER_ID, domain, "aggregation", {"domain_weight": weight})
    top = max(weights, key=weights.get)
    return rows + metric_rows(t, SERVER_ID, ALL_DOMAINS, "aggregation",
                              {"max_client_weight": weights[top], "max_weight_client": float(top)})


def cluster_rows(result: RoundResult, domain_of: Mapping[int, str]) -> list[dict]:
    """Each client's cluster number after the round (split ``cluster``), for clustered algorithms
    (a client's personal server model is no cluster)."""
    rows: list[dict] = []
    for client_id, key in sorted(result.assignment.items()):
        if not is_cluster_key(key):
            continue
        rows += metric_rows(result.round, client_id, domain_of[client_id], "cluster", {"cluster": cluster_number(key)})
    return rows


def round_rows(result: RoundResult, domain_of: Mapping[int, str], task: Task, fraction: float = 0.05,
               class_order: Sequence[int] | None = None,
               class_group_cuts: tuple[float, float] = (1 / 3, 2 / 3)) -> list[dict]:
    """Per-client, per-domain (pooled) and overall (pooled) scores, train metrics, failures, timings,
    aggregation weights and diagnostics.

    Scores come from the ``task``'s statistics: per client, pooled per domain and pooled over the
    federation (:meth:`~fgl_ray.tasks.Task.pooled_scores`; for classification, with
    ``class_order``, i.e. classes by decreasing GLOBAL training frequency, the overall rows also
    carry head/medium/tail accuracy at ``class_group_cuts``).
    """
    t = result.round
    rows: list[dict] = []
    for client_id, metrics in sorted(result.updates.items()):
        rows += metric_rows(t, client_id, domain_of[client_id], "train", metrics)
    for split in EVAL_SPLITS:
        per_client = {e.client_id: e.stats[split] for e in result.evaluations if split in e.stats}
        if not per_client:
            continue
        for client_id, stats in sorted(per_client.items()):
            rows += metric_rows(t, client_id, domain_of[client_id], split, task.scores(stats))
        for domain, stats in group_stats(per_client, domain_of).items():
            rows += metric_rows(t, SERVER_ID, domain, split, task.scores(stats))
        pooled = task.pooled_scores(pool_stats(per_client.values()), class_order, class_group_cuts)
        rows += metric_rows(t, SERVER_ID, ALL_DOMAINS, split, pooled)
    for evaluation in result.evaluations:
        for split, values in sorted(evaluation.metrics.items()):
            rows += metric_rows(t, evaluation.client_id, domain_of[evaluation.client_id], split, values)
    for failure in result.failures:
        rows += metric_rows(t, failure.client_id, domain_of[failure.client_id], failure.phase, {"failed": 1.0})
    rows += diagnostic_rows(result, domain_of, fraction)
    rows += aggregation_rows(result, domain_of)
    rows += cluster_rows(result, domain_of)
    rows += metric_rows(t, SERVER_ID, ALL_DOMAINS, "round", {
        "seconds": result.seconds, "train_seconds": result.timings.get("train_seconds", 0.0),
        "evaluate_seconds": result.timings.get("evaluate_seconds", 0.0),
        "participants": len(result.updates), "aggregated": float(result.aggregated),
    })
    return rows


def startup_rows(round_index: int, clock: "StartupClock") -> list[dict]:
    """The start-up breakdown (split ``startup``): ``<phase>_seconds`` per phase, ``total_seconds``, and
    what ran in the background as ``background_<part>_seconds`` (see :mod:`fgl_ray.runtime.timing`)."""
    report = clock.report()
    values = {f"{phase}_seconds": seconds for phase, seconds in report["phases"].items()}
    values["total_seconds"] = report["total"]
    values |= {f"background_{part}_seconds": seconds for part, seconds in report["background"].items()}
    return metric_rows(round_index, SERVER_ID, ALL_DOMAINS, "startup", values)


def timing_rows(result: RoundResult, write_seconds: float) -> list[dict]:
    """Where one round's time went (split ``timing``): putting the broadcasts into the object store,
    the slowest and the median client's local training, collection (what the training phase waited
    beyond the broadcast and the slowest client: clients queued on one worker, transfers,
    deserialisation), aggregation, evaluation, and writing the round's rows."""
    timings = result.timings
    seconds = [metrics["seconds"] for metrics in result.updates.values() if "seconds" in metrics]
    slowest = max(seconds, default=0.0)
    broadcast = timings.get("broadcast_seconds", 0.0)
    return metric_rows(result.round, SERVER_ID, ALL_DOMAINS, "timing", {
        "broadcast_seconds": broadcast,
        "client_slowest_seconds": slowest,
        "client_median_seconds": statistics.median(seconds) if seconds else 0.0,
        "collect_seconds": max(0.0, timings.get("train_seconds", 0.0) - broadcast - slowest),
        "aggregate_seconds": timings.get("aggregate_seconds", 0.0),
        "evaluate_seconds": timings.get("evaluate_seconds", 0.0),
        "write_seconds": write_seconds,
    })


def round_timing(metrics: "pd.DataFrame") -> dict[str, float]:
    """Mean seconds per round of each ``timing`` part and of the whole round (``round_seconds``), over
    the rounds after the first (round 0 also starts the clients)."""
    later = metrics[(metrics["round"] > metrics["round"].min()) & (metrics["client_id"] == SERVER_ID)]
    parts = later[later.split == "timing"].groupby("metric")["value"].mean()
    whole = later[(later.split == "round") & (later.metric == "seconds")]["value"]
    summary = {name: float(value) for name, value in parts.items()}
    if len(whole):
        summary["round_seconds"] = float(whole.mean())
    return summary


def local_work(metrics: "pd.DataFrame") -> dict[str, float]:
    """Local optimizer steps (the ``steps`` train rows): per client and round on average, and per
    round summed over the participants; empty when the algorithm does not count them."""
    steps = metrics[(metrics.split == "train") & (metrics.metric == "steps")]
    if steps.empty:
        return {}
    return {"steps_per_client_round": float(steps["value"].mean()),
            "steps_per_round": float(steps.groupby("round")["value"].sum().mean())}
