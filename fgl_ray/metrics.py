"""Classification scores derived from confusion matrices.

Clients report one C x C count matrix per split (its size does not depend on the number of
nodes). Every per-client, per-domain and overall figure is computed from such matrices, summed
where results are pooled, by :func:`scores_from_confusion`.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

K = TypeVar("K", bound=Hashable)
G = TypeVar("G", bound=Hashable)

SCORE_NAMES = ("accuracy", "balanced_accuracy", "macro_f1")
GROUP_NAMES = ("head", "medium", "tail")


def _as_labels(labels: Any, name: str) -> np.ndarray:
    """Returns a 1-D int64 array from a torch tensor, numpy array or sequence."""
    if hasattr(labels, "detach"):  # a torch.Tensor; torch itself is not needed here
        labels = labels.detach().cpu().numpy()
    arr = np.asarray(labels)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold integer class labels, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def _check_confusion(cm: np.ndarray) -> np.ndarray:
    cm = np.asarray(cm)
    if cm.ndim != 2 or cm.shape[0] != cm.shape[1]:
        raise ValueError(f"a confusion matrix must be square, got shape {cm.shape}")
    if (cm < 0).any():
        raise ValueError("a confusion matrix holds non-negative counts")
    return cm


def confusion_matrix(y_true: Any, y_pred: Any, num_classes: int) -> np.ndarray:
    """Counts (true class, predicted class) pairs.

    Args:
        y_true: true labels in ``[0, num_classes)``, a torch tensor or array-like.
        y_pred: predicted labels, same length and range.
        num_classes: C, the number of classes.

    Returns:
        An int64 array of shape [C, C]; entry [i, j] counts samples of class i predicted as j.
    """
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    true = _as_labels(y_true, "y_true")
    pred = _as_labels(y_pred, "y_pred")
    if true.shape != pred.shape:
        raise ValueError(f"y_true and y_pred differ in length: {true.size} vs {pred.size}")
    for name, arr in (("y_true", true), ("y_pred", pred)):
        if arr.size and (arr.min() < 0 or arr.max() >= num_classes):
            raise ValueError(f"{name} has labels outside [0, {num_classes})")
    counts = np.bincount(true * num_classes + pred, minlength=num_classes * num_classes)
    return counts.reshape(num_classes, num_classes).astype(np.int64, copy=False)


def scores_from_confusion(cm: np.ndarray) -> dict[str, float]:
    """Accuracy, balanced accuracy and macro-F1 of a confusion matrix.

    The definitions match scikit-learn on the underlying labels: balanced accuracy is the mean
    recall over classes with true samples (``balanced_accuracy_score``); macro-F1 is the mean
    F1 over classes present in the true or the predicted labels (``f1_score(average="macro")``
    with its default labels).

    Args:
        cm: a [C, C] count matrix, rows = true class.

    Returns:
        ``{"accuracy", "balanced_accuracy", "macro_f1"}``; all NaN when the matrix is empty.
    """
    cm = _check_confusion(cm).astype(np.float64)
    total = cm.sum()
    if total == 0:
        return {name: float("nan") for name in SCORE_NAMES}
    hits = np.diag(cm)
    true_counts = cm.sum(axis=1)
    pred_counts = cm.sum(axis=0)
    has_true = true_counts > 0
    present = has_true | (pred_counts > 0)
    recall = hits[has_true] / true_counts[has_true]
    f1 = 2.0 * hits[present] / (true_counts[present] + pred_counts[present])
    return {
        "accuracy": float(hits.sum() / total),
        "balanced_accuracy": float(recall.mean()),
        "macro_f1": float(f1.mean()),
    }


def pool_confusions(cms: Iterable[np.ndarray]) -> np.ndarray:
    """Sums confusion matrices, e.g. those of all clients of one domain.

    Args:
        cms: one or more [C, C] matrices of the same shape.

    Returns:
        Their element-wise sum (int64).
    """
    mats = [_check_confusion(cm) for cm in cms]
    if not mats:
        raise ValueError("pool_confusions needs at least one matrix")
    shapes = {m.shape for m in mats}
    if len(shapes) > 1:
        raise ValueError(f"confusion matrices differ in shape: {sorted(shapes)}")
    return np.sum(mats, axis=0, dtype=np.int64)


def group_confusions(cms: Mapping[K, np.ndarray], groups: Mapping[K, G]) -> dict[G, np.ndarray]:
    """Pools the matrices of the keys that share a group (e.g. client id -> domain).

    Args:
        cms: a matrix per key.
        groups: the group of every key of ``cms``.

    Returns:
        The summed matrix per group, in order of first appearance.
    """
    members: dict[G, list[np.ndarray]] = {}
    for key, cm in cms.items():
        members.setdefault(groups[key], []).append(cm)
    return {group: pool_confusions(mats) for group, mats in members.items()}


def group_scores(cms: Mapping[K, np.ndarray]) -> dict[K, dict[str, float]]:
    """Scores every matrix of a mapping with :func:`scores_from_confusion`.

    Args:
        cms: a matrix per key (client id, domain, ...).

    Returns:
        The scores per key.
    """
    return {key: scores_from_confusion(cm) for key, cm in cms.items()}


def class_frequency_order(class_counts: Any) -> np.ndarray:
    """Class indices sorted by decreasing frequency (ties keep the lower index first).

    Args:
        class_counts: the number of samples per class, e.g. training labels' bincount.

    Returns:
        An int64 array of class indices, most frequent first.
    """
    counts = np.asarray(class_counts)
    return np.argsort(-counts, kind="stable").astype(np.int64)


def head_medium_tail(
    cm: np.ndarray,
    class_order: Sequence[int] | np.ndarray,
    cuts: tuple[float, float] = (1 / 3, 2 / 3),
) -> dict[str, float]:
    """Accuracy on head, medium and tail classes.

    The classes, listed most frequent first in ``class_order``, are split at positions
    ``round(cuts[0] * C)`` and ``round(cuts[1] * C)``; each group's accuracy is the share of
    its true samples predicted correctly.

    Args:
        cm: a [C, C] count matrix, rows = true class.
        class_order: a permutation of ``range(C)``, most frequent class first.
        cuts: the two split fractions, ``0 <= cuts[0] <= cuts[1] <= 1``.

    Returns:
        ``{"head", "medium", "tail"}``; NaN for a group without true samples.
    """
    cm = _check_confusion(cm)
    num_classes = cm.shape[0]
    order = np.asarray(class_order, dtype=np.int64)
    if sorted(order.tolist()) != list(range(num_classes)):
        raise ValueError(f"class_order must be a permutation of range({num_classes})")
    low, high = cuts
    if not 0.0 <= low <= high <= 1.0:
        raise ValueError(f"cuts must satisfy 0 <= low <= high <= 1, got {cuts}")
    bounds = [0, round(low * num_classes), round(high * num_classes), num_classes]
    hits = np.diag(cm)
    true_counts = cm.sum(axis=1)
    result = {}
    for name, start, stop in zip(GROUP_NAMES, bounds[:-1], bounds[1:], strict=True):
        classes = order[start:stop]
        support = true_counts[classes].sum()
        result[name] = float(hits[classes].sum() / support) if support else float("nan")
    return result


SCORE_BINS = 1000


def score_histogram(scores: Any, low: float = 0.0, high: float = 1.0, bins: int = SCORE_BINS) -> np.ndarray:
    """Counts of ``scores`` in ``bins`` equal bins over ``[low, high]`` (values outside are clipped).

    Histograms of positive and negative scores are additive over clients, so a pooled AUC is the
    AUC of the summed histograms (:func:`auc_from_histograms`).
    """
    values = np.clip(np.asarray(scores, dtype=np.float64).reshape(-1), low, high)
    index = np.minimum(((values - low) / (high - low) * bins).astype(np.int64), bins - 1)
    return np.bincount(index, minlength=bins).astype(np.int64)


def auc_from_histograms(positive: np.ndarray, negative: np.ndarray) -> float:
    """ROC-AUC of binned scores: ``P(pos > neg) + P(same bin) / 2``; NaN without both kinds.

    With scores binned finely, this is the Mann-Whitney AUC up to pairs that share a bin.
    """
    positive, negative = np.asarray(positive, dtype=np.float64), np.asarray(negative, dtype=np.float64)
    total = positive.sum() * negative.sum()
    if total == 0:
        return float("nan")
    below = np.concatenate(([0.0], np.cumsum(negative)[:-1]))
    return float((positive * (below + 0.5 * negative)).sum() / total)
