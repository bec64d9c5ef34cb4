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


def round_diagnostics(updates: Tensor, weights: Tensor, fraction: float) -> dict[str, Tensor]:
    """Every diagnostic of one round's stacked updates ``[K, P]`` with base weights ``[K]``: the
    top-``fraction`` supports and the Gram matrix are computed once and shared."""
    support = top_fraction_indices(updates, fraction)
    u = updates.double()
    gram = u @ u.T
    return active_share(u, weights, support) | {
        "overlap": jaccard_overlap(support, updates.shape[1]),
        "pairwise_cosine": pairwise_cosine(gram),
        "cosine_to_aggregate": cosine_to_aggregate(gram, weights),
    }


def top_fraction_indices(updates: Tensor, fraction: float) -> Tensor:
    """``[K, ceil(fraction * P)]``: each row's top coordinates by |u_k| (its support)."""
    count = max(1, math.ceil(fraction * updates.shape[1]))
    return updates.abs().topk(count, dim=1).indices


def jaccard_overlap(support: Tensor, num_coordinates: int) -> Tensor:
    """Pairwise ``|S_i ∩ S_j| / |S_i ∪ S_j|`` of the supports ``[K, count]``, ``[K, K]`` (float64)."""
    masks = torch.zeros(support.shape[0], num_coordinates).scatter_(1, support, 1.0)   # counts < 2^24: exact
    intersection = (masks @ masks.T).double()
    sizes = torch.full((support.shape[0],), float(support.shape[1]), dtype=torch.float64)
    return intersection / (sizes[:, None] + sizes[None, :] - intersection)


def random_overlap_reference(fraction: float) -> float:
    """Expected Jaccard overlap of two independent random sets of density ``fraction``."""
    return fraction / (2 - fraction)


def pairwise_cosine(gram: Tensor) -> Tensor:
    """Signed cosine between every pair of client updates from their Gram matrix ``u u^T``, ``[K, K]``."""
    norms = gram.diagonal().sqrt().clamp(min=1e-300)
    return gram / (norms[:, None] * norms[None, :])


def cosine_to_aggregate(gram: Tensor, weights: Tensor) -> Tensor:
    """Cosine between each update and the weighted average update ``a = sum_k w_k u_k``, from the
    Gram matrix: ``u_k . a = (G w)_k`` and ``|a|^2 = w^T G w``, ``[K]``."""
    w = weights.double()
    dots = gram @ w
    norms = gram.diagonal().sqrt() * (w @ dots).sqrt()
    return dots / norms.clamp(min=1e-300)


def mean_off_diagonal(matrix: Tensor) -> float:
    """Mean of the off-diagonal entries of a square matrix (NaN for a 1x1 matrix)."""
    k = matrix.shape[0]
    if k < 2:
        return math.nan
    return float((matrix.sum() - matrix.diagonal().sum()) / (k * (k - 1)))


def active_share(updates: Tensor, weights: Tensor, support: Tensor) -> dict[str, Tensor]:
    """Signal dilution (Eqs. 3-4): how much base weight sits on the clients active on a coordinate.

    A coordinate ``d`` is active for client ``k`` when it is in ``k``'s ``support`` (its top
    coordinates by ``|u_k|``, as for :func:`jaccard_overlap`); with base weights ``q``,
    ``r_d = sum_{k active on d} q_k`` (active share), ``mu_d = (1/r_d) sum_{k active} q_k u_{k,d}``
    (active-client mean) and ``ubar_d = sum_k q_k u_{k,d} ~ r_d mu_d``. Per client, each is averaged
    over that client's own support, so a domain's figures are its clients' means.

    Args:
        updates: stacked client updates ``[K, P]``.
        weights: base aggregation weights ``q`` ``[K]`` (sample weights).
        support: ``[K, count]`` coordinates (:func:`top_fraction_indices`).

    Returns:
        ``{"active_share", "active_mean_abs", "aggregate_abs"}``, each ``[K]`` (float64).
    """
    u, q = updates.double(), weights.double()
    flat = support.reshape(-1)
    weighted = (q[:, None] * u.gather(1, support)).reshape(-1)
    share = torch.zeros(u.shape[1], dtype=torch.float64).index_add_(0, flat, q.repeat_interleave(support.shape[1]))
    active_sum = torch.zeros_like(share).index_add_(0, flat, weighted)
    on_support = share[support]                     # 0 only where every active client has weight 0
    active_mean = torch.where(on_support > 0, active_sum[support] / on_support.clamp(min=1e-300), 0.0)
    return {
        "active_share": on_support.mean(dim=1),
        "active_mean_abs": active_mean.abs().mean(dim=1),
        "aggregate_abs": (q @ u)[support].abs().mean(dim=1),
    }
