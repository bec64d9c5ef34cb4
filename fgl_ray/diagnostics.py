"""Update-field diagnostics of the FedIA paper, Section 3.2.

From the stacked client updates of one round: the pairwise Jaccard overlap of each client's
top-p% coordinates by |u_k| (Eq. 2; random-set reference p / (2 - p)), each client's cosine
to the ordinary (sample-weighted) average update, the pairwise signed cosine, and the
active share of Eqs. 3-4 (signal dilution).
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


def active_share(updates: Tensor, weights: Tensor, fraction: float = 0.05) -> dict[str, Tensor]:
    """Signal dilution (Eqs. 3-4): how much base weight sits on the clients active on a coordinate.

    A coordinate ``d`` is active for client ``k`` when it is among ``k``'s top-``fraction``
    coordinates by ``|u_k|`` (the supports of :func:`jaccard_overlap`); with base weights ``q``,
    ``r_d = sum_{k active on d} q_k`` (active share), ``mu_d = (1/r_d) sum_{k active} q_k u_{k,d}``
    (active-client mean) and ``ubar_d = sum_k q_k u_{k,d} ~ r_d mu_d``. Per client, each is averaged
    over that client's own top coordinates, so a domain's figures are its clients' means.

    Args:
        updates: stacked client updates ``[K, P]``.
        weights: base aggregation weights ``q`` ``[K]`` (sample weights).
        fraction: the top fraction ``p``.

    Returns:
        ``{"active_share", "active_mean_abs", "aggregate_abs"}``, each ``[K]`` (float64).
    """
    salient = top_fraction_masks(updates, fraction).double()
    u, q = updates.double(), weights.double()
    share = q @ salient                                                   # r_d
    active_sum = (q[:, None] * salient * u).sum(dim=0)
    active_mean = torch.where(share > 0, active_sum / share.clamp(min=1e-300), torch.zeros_like(share))
    aggregate = q @ u
    per_client = salient / salient.sum(dim=1, keepdim=True)              # mean over each client's support
    return {
        "active_share": per_client @ share,
        "active_mean_abs": per_client @ active_mean.abs(),
        "aggregate_abs": per_client @ aggregate.abs(),
    }
