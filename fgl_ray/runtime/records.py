"""Turns a :class:`RoundResult` into long-format metric rows."""

from __future__ import annotations

from typing import Mapping, Sequence

import torch

from fgl_ray.diagnostics import mean_off_diagonal, random_overlap_reference
from fgl_ray.metrics import group_confusions, head_medium_tail, scores_from_confusion
from fgl_ray.results import ALL_DOMAINS, SERVER_ID, metric_rows
from fgl_ray.runtime.server import RoundResult

EVAL_SPLITS = ("val", "test")
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


def round_rows(result: RoundResult, domain_of: Mapping[int, str], fraction: float = 0.05,
               class_order: Sequence[int] | None = None,
               class_group_cuts: tuple[float, float] = (1 / 3, 2 / 3)) -> list[dict]:
    """Per-client, per-domain (pooled) and overall (pooled) scores, train metrics, failures, timings,
    aggregation weights and diagnostics.

    With ``class_order`` (classes by decreasing GLOBAL training frequency), the overall rows also
    carry ``head_accuracy``, ``medium_accuracy`` and ``tail_accuracy``
    (:func:`~fgl_ray.metrics.head_medium_tail` at ``class_group_cuts``; a group without test or
    validation samples, e.g. the medium group of two classes, is left out).
    """
    t = result.round
    rows: list[dict] = []
    for client_id, metrics in sorted(result.updates.items()):
        rows += metric_rows(t, client_id, domain_of[client_id], "train", metrics)
    for split in EVAL_SPLITS:
        per_client = {e.client_id: e.confusion[split] for e in result.evaluations}
        if not per_client:
            continue
        for client_id, cm in sorted(per_client.items()):
            rows += metric_rows(t, client_id, domain_of[client_id], split, scores_from_confusion(cm))
        for domain, cm in group_confusions(per_client, domain_of).items():
            rows += metric_rows(t, SERVER_ID, domain, split, scores_from_confusion(cm))
        pooled = group_confusions(per_client, {cid: ALL_DOMAINS for cid in per_client})[ALL_DOMAINS]
        scores = scores_from_confusion(pooled)
        if class_order is not None:
            groups = head_medium_tail(pooled, class_order, class_group_cuts)
            scores |= {f"{name}_accuracy": value for name, value in groups.items() if value == value}  # no NaN
        rows += metric_rows(t, SERVER_ID, ALL_DOMAINS, split, scores)
    for failure in result.failures:
        rows += metric_rows(t, failure.client_id, domain_of[failure.client_id], failure.phase, {"failed": 1.0})
    rows += diagnostic_rows(result, domain_of, fraction)
    rows += aggregation_rows(result, domain_of)
    rows += metric_rows(t, SERVER_ID, ALL_DOMAINS, "round", {
        "seconds": result.seconds, **result.timings,
        "participants": len(result.updates), "aggregated": float(result.aggregated),
    })
    return rows
