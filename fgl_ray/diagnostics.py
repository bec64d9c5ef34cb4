"""Update-field diagnostics of the FedIA paper, Section 3.2.

From the stacked client updates of one round: the pairwise Jaccard overlap of each client's
top-p% coordinates by |u_k| (Eq. 2; random-set reference p / (2 - p)), each client's cosine
to the ordinary (sample-weighted) average update, and the pairwise signed cosine.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def top_fraction_masks(updates: Tensor, fraction: float) -> Tensor:
    """Boolean ``[K, P]``: each row marks the top ``ceil(fraction * P)`` coordinates by |u_k|."""
    count = max(1, math.ceil(fraction * updates.shape[1]))
    masks = torch.zeros(updates.shape, dtype=torch.bool)
    masks.scatter_(1, updates.abs().topk(count, dim=1).indices, True)
    return masks


def jaccard_overlap(updates: Tensor, fraction: float = 0.05) -> Tensor:
    """Pairwise ``|S_i ∩ S_j| / |S_i ∪ S_j|`` of the top-``fraction`` supports, ``[K, K]``."""
    masks = top_fraction_masks(updates, fraction).double()
    intersection = masks @ masks.T
    sizes = masks.sum(dim=1)
    return intersection / (sizes[:, None] + sizes[None, :] - intersection)


def random_overlap_reference(fraction: float) -> float:
    """Expected Jaccard overlap of two independent random sets of density ``fraction``."""
    return fraction / (2 - fraction)


def pairwise_cosine(updates: Tensor) -> Tensor:
    """Signed cosine between every pair of client updates, ``[K, K]``."""
    unit = torch.nn.functional.normalize(updates.double(), dim=1)
    return unit @ unit.T


def cosine_to_aggregate(updates: Tensor, weights: Tensor) -> Tensor:
    """Cosine between each update and the weighted average update ``sum_k w_k u_k``, ``[K]``."""
    aggregate = weights.double() @ updates.double()
    return torch.nn.functional.cosine_similarity(updates.double(), aggregate[None, :], dim=1)


def mean_off_diagonal(matrix: Tensor) -> float:
    """Mean of the off-diagonal entries of a square matrix (NaN for a 1x1 matrix)."""
    k = matrix.shape[0]
    if k < 2:
        return math.nan
    return float((matrix.sum() - matrix.diagonal().sum()) / (k * (k - 1)))
