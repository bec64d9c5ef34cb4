"""Confusion-matrix scores against scikit-learn on the same labels."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from sklearn import metrics as skm

from fgl_ray.metrics import (
    class_frequency_order,
    confusion_matrix,
    group_confusions,
    group_scores,
    head_medium_tail,
    pool_confusions,
    scores_from_confusion,
)

NUM_CLASSES = 7


def _labels(seed: int, n: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """Random labels where some classes never occur as truth and some never as prediction."""
    rng = np.random.default_rng(seed)
    true_classes = rng.choice(NUM_CLASSES, size=rng.integers(2, NUM_CLASSES), replace=False)
    pred_classes = rng.choice(NUM_CLASSES, size=rng.integers(1, NUM_CLASSES), replace=False)
    y_true = rng.choice(true_classes, size=n)
    y_pred = np.where(rng.random(n) < 0.5, y_true, rng.choice(pred_classes, size=n))
    return y_true, y_pred


def _sklearn_scores(y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "y_pred contains classes not in y_true"
        return {
            "accuracy": skm.accuracy_score(y_true, y_pred),
            "balanced_accuracy": skm.balanced_accuracy_score(y_true, y_pred),
            "macro_f1": skm.f1_score(y_true, y_pred, average="macro", zero_division=0),
        }


@pytest.mark.parametrize("seed", range(12))
def test_scores_match_sklearn(seed: int) -> None:
    y_true, y_pred = _labels(seed)
    ours = scores_from_confusion(confusion_matrix(y_true, y_pred, NUM_CLASSES))
    assert ours == pytest.approx(_sklearn_scores(y_true, y_pred), abs=1e-12)


def test_confusion_matches_sklearn_and_accepts_tensors() -> None:
    y_true, y_pred = _labels(0)
    expected = skm.confusion_matrix(y_true, y_pred, labels=range(NUM_CLASSES))
    from_tensors = confusion_matrix(torch.from_numpy(y_true), torch.from_numpy(y_pred), NUM_CLASSES)
    assert from_tensors.dtype == np.int64
    np.testing.assert_array_equal(from_tensors, expected)


def test_pooled_clients_equal_concatenated_labels() -> None:
    (t1, p1), (t2, p2) = _labels(1, n=50), _labels(2, n=300)
    pooled = pool_confusions(
        [confusion_matrix(t1, p1, NUM_CLASSES), confusion_matrix(t2, p2, NUM_CLASSES)]
    )
    expected = _sklearn_scores(np.concatenate([t1, t2]), np.concatenate([p1, p2]))
    assert scores_from_confusion(pooled) == pytest.approx(expected, abs=1e-12)


def test_group_confusions_pool_by_domain() -> None:
    labels = {cid: _labels(cid, n=40 + cid) for cid in range(5)}
    domain_of = {0: "DE", 1: "EN", 2: "DE", 3: "EN", 4: "DE"}
    cms = {cid: confusion_matrix(t, p, NUM_CLASSES) for cid, (t, p) in labels.items()}
    scores = group_scores(group_confusions(cms, domain_of))
    assert list(scores) == ["DE", "EN"]
    for domain, got in scores.items():
        members = [labels[c] for c in labels if domain_of[c] == domain]
        y_true = np.concatenate([t for t, _ in members])
        y_pred = np.concatenate([p for _, p in members])
        assert got == pytest.approx(_sklearn_scores(y_true, y_pred), abs=1e-12)


def test_empty_matrix_scores_are_nan() -> None:
    empty = confusion_matrix(np.array([], dtype=int), np.array([], dtype=int), NUM_CLASSES)
    assert empty.shape == (NUM_CLASSES, NUM_CLASSES) and empty.sum() == 0
    assert all(math.isnan(v) for v in scores_from_confusion(empty).values())


@pytest.mark.parametrize(
    ("y_true", "y_pred", "error"),
    [
        ([0, 1], [0], ValueError),
        ([0, NUM_CLASSES], [0, 0], ValueError),
        ([0, -1], [0, 0], ValueError),
        ([0.0, 1.0], [0, 1], TypeError),
        ([[0, 1]], [[0, 1]], ValueError),
    ],
)
def test_confusion_rejects_bad_labels(y_true: list, y_pred: list, error: type) -> None:
    with pytest.raises(error):
        confusion_matrix(np.array(y_true), np.array(y_pred), NUM_CLASSES)


def test_pool_rejects_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match="shape"):
        pool_confusions([np.zeros((2, 2), int), np.zeros((3, 3), int)])


def test_class_frequency_order_is_descending_and_stable() -> None:
    counts = np.array([5, 9, 5, 1, 9])
    order = class_frequency_order(counts)
    assert order.tolist() == sorted(range(len(counts)), key=lambda c: (-counts[c], c))


def _group_accuracy(y_true: np.ndarray, y_pred: np.ndarray, classes: np.ndarray) -> float:
    mask = np.isin(y_true, classes)
    return float(np.mean(y_true[mask] == y_pred[mask]))


def test_head_medium_tail_thirds() -> None:
    rng = np.random.default_rng(5)
    num_classes = 9
    y_true = rng.choice(num_classes, size=500, p=np.arange(1, 10) / 45)
    y_pred = np.where(rng.random(500) < 0.6, y_true, rng.integers(0, num_classes, 500))
    order = class_frequency_order(np.bincount(y_true, minlength=num_classes))
    got = head_medium_tail(confusion_matrix(y_true, y_pred, num_classes), order)
    head, medium, tail = np.array_split(order, 3)
    assert got == pytest.approx(
        {
            "head": _group_accuracy(y_true, y_pred, head),
            "medium": _group_accuracy(y_true, y_pred, medium),
            "tail": _group_accuracy(y_true, y_pred, tail),
        }
    )


def test_head_medium_tail_custom_cuts_and_empty_group() -> None:
    num_classes = 10
    rng = np.random.default_rng(6)
    order = rng.permutation(num_classes)
    y_true = rng.choice(order[:5], size=300)  # the tail classes order[5:] never occur
    y_pred = rng.integers(0, num_classes, 300)
    got = head_medium_tail(confusion_matrix(y_true, y_pred, num_classes), order, cuts=(0.2, 0.5))
    assert got["head"] == pytest.approx(_group_accuracy(y_true, y_pred, order[:2]))
    assert got["medium"] == pytest.approx(_group_accuracy(y_true, y_pred, order[2:5]))
    assert math.isnan(got["tail"])


@pytest.mark.parametrize("num_classes, sizes", [
    (7, (2, 3, 2)),   # Cora: cuts at round(7/3) = 2 and round(14/3) = 5
    (5, (2, 1, 2)),   # Chameleon: cuts at round(5/3) = 2 and round(10/3) = 3
    (4, (1, 2, 1)),   # cuts at round(4/3) = 1 and round(8/3) = 3
    (8, (3, 2, 3)),   # cuts at round(8/3) = 3 and round(16/3) = 5
])
def test_head_medium_tail_groups_when_the_class_count_is_not_divisible_by_three(num_classes, sizes) -> None:
    order = np.random.default_rng(num_classes).permutation(num_classes)
    expected = [name for name, size in zip(("head", "medium", "tail"), sizes) for _ in range(size)]
    found = []
    for rank, cls in enumerate(order):        # a matrix whose only samples are class ``cls``, all right
        cm = np.zeros((num_classes, num_classes), dtype=np.int64)
        cm[cls, cls] = 3
        got = head_medium_tail(cm, order)
        scored = [name for name, value in got.items() if not math.isnan(value)]
        assert len(scored) == 1 and got[scored[0]] == 1.0, (rank, got)
        found.append(scored[0])
    assert found == expected


def test_head_medium_tail_rejects_bad_order() -> None:
    with pytest.raises(ValueError, match="permutation"):
        head_medium_tail(np.eye(3, dtype=int), [0, 0, 1])
