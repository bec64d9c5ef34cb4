"""Constant-predictor references computed from test label counts."""

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, balanced_accuracy_score, f1_score

from fgl_ray.results.references import reference_scores

# two domains, three clients, binary labels: domain a leans to class 0, domain b to class 1
COUNTS = {0: np.array([6, 2]), 1: np.array([3, 1]), 2: np.array([1, 5])}
DOMAINS = {0: "a", 1: "a", 2: "b"}


def _labels(counts):
    return np.repeat(np.arange(len(counts)), counts)


def test_constant_predictors_score_as_sklearn_scores_the_same_labels():
    refs = reference_scores(COUNTS, DOMAINS)
    for c in (0, 1):
        for domain, counts in (("a", COUNTS[0] + COUNTS[1]), ("b", COUNTS[2])):
            y = _labels(counts)
            pred = np.full_like(y, c)
            scores = refs["constant"][str(c)]["domains"][domain]
            assert scores["accuracy"] == pytest.approx(accuracy_score(y, pred))
            assert scores["balanced_accuracy"] == pytest.approx(balanced_accuracy_score(y, pred))
            assert scores["macro_f1"] == pytest.approx(f1_score(y, pred, average="macro"))


def test_the_constant_accuracies_of_all_classes_sum_to_one_in_every_domain():
    refs = reference_scores(COUNTS, DOMAINS)
    for domain in ("a", "b"):
        assert sum(refs["constant"][c]["domains"][domain]["accuracy"] for c in ("0", "1")) == pytest.approx(1.0)


def test_majority_is_the_best_constant_per_domain_and_best_constant_maximises_the_average():
    refs = reference_scores(COUNTS, DOMAINS)
    for domain in ("a", "b"):
        best = max(refs["constant"][c]["domains"][domain]["accuracy"] for c in ("0", "1"))
        assert refs["majority"]["domains"][domain]["accuracy"] == pytest.approx(best)
    averages = {c: refs["constant"][c]["avg_over_domains"]["accuracy"] for c in ("0", "1")}
    assert refs["best_constant"]["class"] == int(max(averages, key=averages.get))
    # the unweighted domain mean differs from the pooled figure when domains differ in size
    pooled = refs["majority"]["all"]["accuracy"]
    assert pooled == pytest.approx((9 + 5) / 18)
    assert refs["majority"]["avg_over_domains"]["accuracy"] == pytest.approx((9 / 12 + 5 / 6) / 2)


def test_run_summary_carries_the_references_of_its_test_labels(tiny_run):
    summary, data = tiny_run
    refs = summary["references"]
    expected = sum(int(g.data.test_mask.sum()) for g in data.clients)
    assert sum(sum(counts) for counts in refs["class_counts"].values()) == expected
    for domain in data.domains:
        labels = np.concatenate([g.data.y[g.data.test_mask].numpy() for g in data.clients if g.domain == domain])
        share = np.bincount(labels, minlength=data.num_classes) / labels.size
        assert refs["majority"]["domains"][domain]["accuracy"] == pytest.approx(share.max())


@pytest.fixture
def tiny_run(tmp_path):
    from fgl_ray.config import load_config
    from fgl_ray.data import build_federated_data
    from fgl_ray.runtime import run_experiment

    config = load_config(dict(dataset="synthetic", clients_per_domain=1, hidden=8, rounds=2, local_epochs=1,
                              torch_threads=1, backend="local", output_dir=tmp_path,
                              synthetic={"num_domains": 2, "nodes_per_domain": 60, "num_features": 6,
                                         "num_classes": 3}))
    data = build_federated_data(config)
    return run_experiment(config, data, progress=False).summary, data
