"""Label-only reference predictors: what a model that ignores its input would score.

A trained model that collapses to one class scores exactly like a constant predictor, so a
table is only readable beside these references. They are computed from the test labels alone
(the row sums of the clients' test confusion matrices), with the same scoring as every run.

* ``constant``: one class predicted for every test sample of the federation, per class.
* ``majority``: each domain predicts its own most frequent test class (the best any
  per-domain constant can do); ``all`` pools those predictions.
* ``best_constant``: the class whose constant predictor has the highest domain-averaged
  accuracy (the paper-style AVG).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fgl_ray.metrics import scores_from_confusion

ALL = "all"
AVG = "avg_over_domains"


def constant_confusion(counts: np.ndarray, predicted: int) -> np.ndarray:
    """The confusion matrix of predicting ``predicted`` for samples with class ``counts``."""
    counts = np.asarray(counts, dtype=np.int64)
    matrix = np.zeros((counts.size, counts.size), dtype=np.int64)
    matrix[:, predicted] = counts
    return matrix


def _scored(per_domain: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Scores per domain, pooled over domains, and their unweighted mean over domains."""
    domains = {domain: scores_from_confusion(cm) for domain, cm in per_domain.items()}
    metrics = next(iter(domains.values())).keys()
    return {
        "domains": domains,
        ALL: scores_from_confusion(sum(per_domain.values())),
        AVG: {m: float(np.nanmean([s[m] for s in domains.values()])) for m in metrics},
    }


def label_counts_by_domain(client_counts: Mapping[int, np.ndarray], domain_of: Mapping[int, str]) -> dict:
    """Sums per-client class counts into per-domain class counts (domains sorted by name)."""
    totals: dict[str, np.ndarray] = {}
    for client_id, counts in client_counts.items():
        domain = domain_of[client_id]
        totals[domain] = totals.get(domain, 0) + np.asarray(counts, dtype=np.int64)
    return dict(sorted(totals.items()))


def reference_scores(client_counts: Mapping[int, np.ndarray], domain_of: Mapping[int, str]) -> dict[str, Any]:
    """The constant-predictor and per-domain majority references of one federation's test set.

    Args:
        client_counts: client id -> test samples per class (``[C]``).
        domain_of: client id -> domain name.

    Returns:
        ``{"class_counts": {domain: [C]}, "constant": {class: scores}, "majority": scores,
        "best_constant": {"class": c, **scores}}`` where ``scores`` is ``{"domains": {domain:
        {metric: value}}, "all": {...}, "avg_over_domains": {...}}`` over accuracy, balanced
        accuracy and macro-F1.
    """
    if not client_counts:
        raise ValueError("reference_scores needs the test label counts of at least one client")
    by_domain = label_counts_by_domain(client_counts, domain_of)
    num_classes = len(next(iter(by_domain.values())))
    constant = {
        str(c): _scored({d: constant_confusion(counts, c) for d, counts in by_domain.items()})
        for c in range(num_classes)
    }
    majority = _scored({d: constant_confusion(counts, int(np.argmax(counts))) for d, counts in by_domain.items()})
    best = max(constant, key=lambda c: constant[c][AVG]["accuracy"])
    return {
        "class_counts": {d: counts.tolist() for d, counts in by_domain.items()},
        "constant": constant,
        "majority": majority,
        "best_constant": {"class": int(best), **constant[best]},
    }
