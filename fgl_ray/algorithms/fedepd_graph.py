"""Graph helpers of FedEPD (Yuan et al., "Towards Federated Long-Tailed Graph Learning: An
Energy-Guided Dual Decoupling Approach"): pure tensor functions, no dense ``N x N`` matrix.

* :func:`purify_edges` — topological purification, Eqs. 1–5: per undirected edge the
  degree-normalised Dirichlet energy on raw features, the coefficient-of-variation blend
  ``lambda``, the standardised energy and the cosine distance mapped through their empirical
  CDFs, the fusion score ``psi``, the pruning ratio ``p = lambda / 2`` and the threshold ``tau``
  at the ``(1 - p)`` quantile of ``psi``; an edge is kept iff ``psi <= tau``. Every undirected
  edge is scored once, so it is kept or dropped as a whole (both directions).
  ``O(|E| d + |E| log |E|)``.
* :func:`ppr_scores` / :func:`select_elites` — fixed-step personalised PageRank restarting on
  each class's local training nodes (Eq. 6) and the top ``max(1, floor(rho N_c))`` of them.
* :func:`low_pass` / :func:`inject_prototypes` — ``H_low = Â' H`` with ``Â'`` the self-looped,
  symmetric-normalised purified adjacency (Eqs. 10–11) and Eq. 12's injection.
* :func:`class_homophily` — node homophily on the purified graph (Eq. 13) averaged per class
  (Eq. 14); ``0.5`` where a class has no valid statistic.
* :func:`logit_margins` — Eq. 15's ``Delta^c = mu q^c log((N_max + eps) / (N_c + eps))``.

Choices the paper leaves open, documented in :mod:`fgl_ray.algorithms.fedepd`: the standard
deviation is the population one (``ddof = 0``); the quantile interpolates linearly between
order statistics (numpy's default); a zero feature vector has cosine similarity 0 with
everything; degrees are those of the original local graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

EPS = 1e-12
#: Edges scored per chunk when gathering feature rows (bounds memory to ``chunk x d``).
EDGE_CHUNK = 1 << 15


# ---------------------------------------------------------------------------- edges
def undirected_pairs(edge_index: Tensor) -> Tensor:
    """The unique undirected edges ``(u, v)`` with ``u < v`` of a graph given in both directions.

    Self-loops are dropped. Returns ``[2, m]`` int64, sorted lexicographically.
    """
    row, col = edge_index
    keep = row != col
    u = torch.minimum(row[keep], col[keep])
    v = torch.maximum(row[keep], col[keep])
    if u.numel() == 0:
        return edge_index.new_zeros(2, 0)
    return torch.unique(torch.stack([u, v]), dim=1)


def both_directions(pairs: Tensor) -> Tensor:
    """``[2, m]`` undirected pairs -> ``[2, 2m]`` edge index holding each edge both ways."""
    return torch.cat([pairs, pairs.flip(0)], dim=1)


def degrees(edge_index: Tensor, num_nodes: int) -> Tensor:
    """Out-degree of each node (for a graph stored in both directions: its number of neighbours)."""
    return torch.bincount(edge_index[0], minlength=num_nodes)


def dense_features(x: Tensor) -> Tensor:
    """``x`` as a dense float tensor (features may be stored as sparse CSR)."""
    if x.layout != torch.strided:
        x = x.to_dense()
    return x if x.is_floating_point() else x.float()


def empirical_cdf(values: Tensor) -> Tensor:
    """``F(x) = |{x' in X : x' <= x}| / |X|`` evaluated at every element of ``values`` (Eq. 4)."""
    ordered = torch.sort(values).values
    return torch.searchsorted(ordered, values, right=True).to(torch.float64) / values.numel()


def linear_quantile(values: Tensor, q: float) -> Tensor:
    """The ``q`` quantile with linear interpolation between order statistics (numpy's default)."""
    ordered = torch.sort(values.to(torch.float64)).values
    position = q * (ordered.numel() - 1)
    low = int(position // 1)
    high = min(low + 1, ordered.numel() - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass
class Purification:
    """What :func:`purify_edges` computed for one client (all per undirected edge).

    Attributes:
        edge_index: the purified graph, both directions ``[2, 2 m']``.
        pairs: every undirected edge ``[2, m]`` (``u < v``), in the order of the per-edge tensors.
        kept: boolean ``[m]``, ``psi <= tau``.
        energy: ``E_ij`` (Eq. 1).
        zeta: standardised energy (Eq. 3).
        cosine_distance: ``s_ij`` (Eq. 3).
        psi: fusion score (Eq. 4).
        lam: ``lambda_k`` (Eq. 2).
        ratio: ``p_k = lambda_k / 2``.
        tau: the ``(1 - p_k)`` quantile of ``psi`` (Eq. 5).
    """

    edge_index: Tensor
    pairs: Tensor
    kept: Tensor
    energy: Tensor
    zeta: Tensor
    cosine_distance: Tensor
    psi: Tensor
    lam: float
    ratio: float
    tau: float

    @property
    def dropped_fraction(self) -> float:
        return 1.0 - float(self.kept.double().mean()) if self.kept.numel() else 0.0


def edge_energy_and_distance(x: Tensor, pairs: Tensor, deg: Tensor,
                             chunk: int = EDGE_CHUNK) -> tuple[Tensor, Tensor]:
    """Per undirected edge ``(i, j)``: ``E_ij = || x_i / sqrt(d_i+1) - x_j / sqrt(d_j+1) ||^2``
    (Eq. 1) and the cosine distance ``s_ij = 1 - cos(x_i, x_j)`` (Eq. 3), in float64.

    Rows are gathered ``chunk`` edges at a time: ``O(|E| d)`` time, ``O(chunk d)`` extra memory.
    """
    x = dense_features(x)
    scale = (deg.to(x.dtype) + 1.0).rsqrt().unsqueeze(-1)
    energy = torch.empty(pairs.shape[1], dtype=torch.float64)
    distance = torch.empty(pairs.shape[1], dtype=torch.float64)
    norms = x.double().norm(dim=-1)
    for start in range(0, pairs.shape[1], chunk):
        i, j = pairs[0, start:start + chunk], pairs[1, start:start + chunk]
        xi, xj = x[i].double(), x[j].double()
        energy[start:start + chunk] = ((xi * scale[i].double() - xj * scale[j].double()) ** 2).sum(-1)
        dot = (xi * xj).sum(-1)
        denominator = norms[i] * norms[j]
        cosine = torch.where(denominator > 0, dot / denominator.clamp(min=EPS), torch.zeros_like(dot))
        distance[start:start + chunk] = 1.0 - cosine
    return energy, distance


def purify_edges(x: Tensor, edge_index: Tensor, eps: float = EPS) -> Purification:
    """Topological purification of one client's graph (Eqs. 1–5).

    Args:
        x: raw node features ``[n, d]`` (dense or sparse CSR).
        edge_index: the local graph, both directions of every undirected edge.
        eps: the ``epsilon`` of Eqs. 2–3.

    Returns:
        A :class:`Purification`; its ``edge_index`` holds the kept edges in both directions.
    """
    num_nodes = x.shape[0]
    pairs = undirected_pairs(edge_index)
    deg = degrees(both_directions(pairs), num_nodes)
    if pairs.shape[1] == 0:
        empty = torch.zeros(0, dtype=torch.float64)
        return Purification(both_directions(pairs), pairs, torch.zeros(0, dtype=torch.bool), empty, empty, empty,
                            empty, 0.0, 0.0, float("nan"))
    energy, distance = edge_energy_and_distance(x, pairs, deg)
    mean, std = energy.mean(), energy.std(correction=0)
    cv = std / (mean + eps)
    lam = float(cv ** 2 / (1.0 + cv ** 2))
    zeta = (energy - mean) / (std + eps)
    psi = lam * empirical_cdf(zeta) + (1.0 - lam) * empirical_cdf(distance)
    ratio = lam / 2.0
    tau = linear_quantile(psi, 1.0 - ratio)
    kept = psi <= tau
    return Purification(both_directions(pairs[:, kept]), pairs, kept, energy, zeta, distance, psi, lam, ratio,
                        float(tau))


# ---------------------------------------------------------------------------- PPR elites
def ppr_scores(edge_index: Tensor, num_nodes: int, restart: Tensor, alpha: float = 0.15, steps: int = 10) -> Tensor:
    """Fixed-step personalised PageRank for several restart distributions at once (Eq. 6).

    ``pi^(l) = alpha r + (1 - alpha) A D^{-1} pi^(l-1)``, ``pi^(0) = r``, for ``steps`` iterations;
    ``(A D^{-1} pi)_i = sum_{j in N(i)} pi_j / d_j``. A node without neighbours passes nothing on.

    Args:
        edge_index: the ORIGINAL local graph, both directions.
        num_nodes: ``n``.
        restart: ``[n, C]`` restart distributions (one column per class).
        alpha: teleport probability.
        steps: ``L``.

    Returns:
        ``[n, C]`` float64 scores.
    """
    restart = restart.to(torch.float64)
    src, dst = edge_index
    inv_deg = degrees(edge_index, num_nodes).to(torch.float64).reciprocal()
    inv_deg[torch.isinf(inv_deg)] = 0.0
    pi = restart.clone()
    for _ in range(steps):
        spread = pi * inv_deg.unsqueeze(-1)
        walked = torch.zeros_like(pi).index_add_(0, dst, spread[src])
        pi = alpha * restart + (1.0 - alpha) * walked
    return pi


def elite_counts(class_sizes: Tensor, rho: float) -> Tensor:
    """``m_c = max(1, floor(rho N_c))`` for classes with ``N_c > 0``, else 0."""
    counts = torch.floor(rho * class_sizes.to(torch.float64) + 1e-9).long().clamp(min=1)
    return torch.where(class_sizes > 0, counts, torch.zeros_like(counts))


def select_elites(edge_index: Tensor, y: Tensor, train_mask: Tensor, num_classes: int, rho: float = 0.1,
                  alpha: float = 0.15, steps: int = 10) -> Tensor:
    """The elite training nodes of every class (Eq. 6 and the top-``m`` rule).

    For class ``c`` the restart distribution is uniform over the local training nodes of class
    ``c``; the candidates are those same training nodes (the only nodes of known class), and the
    top ``max(1, floor(rho N_c))`` by PPR score are the elites (ties: lower node index first).

    Returns:
        Boolean ``[n]``: the union of all classes' elites (each elite's class is its label).
    """
    n = y.shape[0]
    train_y = torch.where(train_mask, y, torch.full_like(y, -1))
    onehot = torch.zeros(n, num_classes, dtype=torch.float64)
    rows = train_mask.nonzero().squeeze(-1)
    onehot[rows, y[rows]] = 1.0
    sizes = onehot.sum(0)
    scores = ppr_scores(edge_index, n, onehot / sizes.clamp(min=1.0), alpha, steps)
    wanted = elite_counts(sizes.long(), rho)
    elites = torch.zeros(n, dtype=torch.bool)
    for c in range(num_classes):
        if int(wanted[c]) == 0:
            continue
        candidates = (train_y == c).nonzero().squeeze(-1)
        order = torch.argsort(-scores[candidates, c], stable=True)
        elites[candidates[order[: int(wanted[c])]]] = True
    return elites


# ---------------------------------------------------------------------------- low-pass injection
def normalized_propagate(h: Tensor, edge_index: Tensor) -> Tensor:
    """``Â H`` with ``Â = D̃^{-1/2} (A + I) D̃^{-1/2}`` (Eq. 10), by scatter-add over the edges."""
    n = h.shape[0]
    loops = torch.arange(n, device=h.device)
    src = torch.cat([edge_index[0], loops])
    dst = torch.cat([edge_index[1], loops])
    deg = torch.bincount(dst, minlength=n).to(h.dtype)
    norm = deg.rsqrt()
    weight = (norm[src] * norm[dst]).unsqueeze(-1)
    return torch.zeros_like(h).index_add_(0, dst, h[src] * weight)


def low_pass(h: Tensor, edge_index: Tensor) -> tuple[Tensor, Tensor]:
    """``(H_low, H_high) = (Â' H, H - Â' H)`` (Eq. 11)."""
    low = normalized_propagate(h, edge_index)
    return low, h - low


def inject_prototypes(h: Tensor, edge_index: Tensor, prototypes: Tensor, y: Tensor, nodes: Tensor,
                      gamma: float) -> Tensor:
    """Eq. 12: ``h'_i = (1 - gamma) h_low_i + gamma p_{y_i} + h_high_i`` for ``nodes``, ``h_i`` elsewhere.

    Args:
        h: encoder output ``[n, d]``.
        edge_index: the purified graph (both directions).
        prototypes: global prototypes ``[C, d]``.
        y: labels ``[n]``.
        nodes: boolean ``[n]``, the training nodes whose class has a prototype.
        gamma: injection intensity.
    """
    low, high = low_pass(h, edge_index)
    injected = (1.0 - gamma) * low + gamma * prototypes[y].to(h.dtype) + high
    return torch.where(nodes.unsqueeze(-1), injected, h)


# ---------------------------------------------------------------------------- logit adjustment
def class_homophily(edge_index: Tensor, y: Tensor, train_mask: Tensor, num_classes: int,
                    labelled: Tensor | None = None, default: float = 0.5, eps: float = EPS) -> Tensor:
    """Class homophily gate ``q^c`` (Eqs. 13–14) on the (purified) graph.

    ``h_u = |{v in N'_u : y_v = y_u}| / (|N'_u| + eps)`` for each training node ``u``, where
    ``N'_u`` are ``u``'s neighbours whose label may be used (``labelled``; all nodes when
    ``None``). ``q^c`` is the mean of ``h_u`` over the training nodes of class ``c`` that have at
    least one such neighbour; a class with none gets ``default``.

    Returns:
        ``[C]`` float64.
    """
    n = y.shape[0]
    src, dst = edge_index
    usable = torch.ones(n, dtype=torch.bool) if labelled is None else labelled
    valid = usable[dst]
    same = valid & (y[src] == y[dst])
    neighbours = torch.zeros(n, dtype=torch.float64).index_add_(0, src, valid.double())
    agreeing = torch.zeros(n, dtype=torch.float64).index_add_(0, src, same.double())
    node_h = agreeing / (neighbours + eps)
    counted = train_mask & (neighbours > 0)
    total = torch.zeros(num_classes, dtype=torch.float64).index_add_(0, y[counted], node_h[counted])
    ones = torch.ones(int(counted.sum()), dtype=torch.float64)
    count = torch.zeros(num_classes, dtype=torch.float64).index_add_(0, y[counted], ones)
    return torch.where(count > 0, total / count.clamp(min=1.0), torch.full_like(total, default))


def logit_margins(class_counts: Tensor, q: Tensor, mu: float, eps: float = EPS) -> Tensor:
    """``Delta^c = mu q^c log((N_max + eps) / (N_c + eps))`` (Eq. 15) for present classes, 0 for
    classes without training nodes (where the literal formula gives ``~ mu q (27.6 + log N_max)``,
    an artefact of the ``1e-12`` guard)."""
    counts = class_counts.to(torch.float64)
    delta = mu * q.to(torch.float64) * torch.log((counts.max() + eps) / (counts + eps))
    return torch.where(counts > 0, delta, torch.zeros_like(delta))
