"""FedEPD's graph helpers against the paper's equations written out with numpy on tiny graphs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fgl_ray.algorithms.fedepd_graph import (class_homophily, elite_counts, inject_prototypes, logit_margins,
                                             low_pass, ppr_scores, purify_edges, select_elites)
from fgl_ray.models.base import quiet_sparse_warnings

EPS = 1e-12


def both_ways(pairs):
    pairs = torch.tensor(pairs, dtype=torch.long).T
    return torch.cat([pairs, pairs.flip(0)], dim=1)


def edge_set(edge_index):
    return {tuple(e) for e in edge_index.T.tolist()}


# Two feature clusters joined by a bridge 2-3, plus a pendant edge.
FEATURES = np.array([
    [1.0, 0.0, 0.2],
    [0.93, 0.11, 0.1],
    [1.05, 0.23, 0.0],
    [0.0, 1.0, 0.87],
    [0.14, 0.9, 1.1],
    [0.02, 1.3, 0.8],
    [0.5, 0.45, 3.0],
])
PAIRS = [(0, 1), (0, 2), (1, 2), (2, 3), (3, 4), (3, 5), (4, 5), (5, 6), (1, 4)]


def purification_by_hand(x: np.ndarray, pairs: list[tuple[int, int]]):
    """Eqs. 1-5 on the undirected edge list, one edge at a time."""
    deg = np.zeros(len(x))
    for i, j in pairs:
        deg[i] += 1
        deg[j] += 1
    energy = np.array([np.sum((x[i] / math.sqrt(deg[i] + 1) - x[j] / math.sqrt(deg[j] + 1)) ** 2) for i, j in pairs])
    distance = np.array([1 - x[i] @ x[j] / (np.linalg.norm(x[i]) * np.linalg.norm(x[j])) for i, j in pairs])
    mu, sigma = energy.mean(), energy.std()                                  # population std
    cv = sigma / (mu + EPS)
    lam = cv ** 2 / (1 + cv ** 2)
    zeta = (energy - mu) / (sigma + EPS)
    cdf = lambda values: np.array([np.sum(values <= v) / len(values) for v in values])  # noqa: E731
    psi = lam * cdf(zeta) + (1 - lam) * cdf(distance)
    ratio = lam / 2
    tau = np.quantile(psi, 1 - ratio)
    kept = {pair for pair, score in zip(pairs, psi) if score <= tau}
    return lam, ratio, tau, kept, psi


def test_purification_matches_the_equations_on_a_hand_built_graph():
    lam, ratio, tau, kept, psi = purification_by_hand(FEATURES, PAIRS)
    result = purify_edges(torch.tensor(FEATURES), both_ways(PAIRS))
    # no near-ties, so the empirical CDFs do not depend on rounding
    assert np.diff(np.sort(result.energy.numpy())).min() > 1e-6
    assert np.diff(np.sort(result.cosine_distance.numpy())).min() > 1e-6
    assert result.lam == pytest.approx(lam, rel=1e-5)
    assert result.ratio == pytest.approx(ratio, rel=1e-5)
    assert result.tau == pytest.approx(tau, rel=1e-5)
    by_pair = dict(zip(map(tuple, result.pairs.T.tolist()), result.psi.tolist()))
    for pair, score in zip(PAIRS, psi):
        assert by_pair[pair] == pytest.approx(score, rel=1e-5)
    kept_pairs = {tuple(p) for p in result.pairs[:, result.kept].T.tolist()}
    assert kept_pairs == kept
    assert 0 < len(kept) < len(PAIRS)                                        # the example prunes something
    assert edge_set(result.edge_index) == {(i, j) for i, j in kept} | {(j, i) for i, j in kept}


def test_an_undirected_edge_is_kept_or_dropped_as_a_whole():
    result = purify_edges(torch.tensor(FEATURES, dtype=torch.float32), both_ways(PAIRS))
    edges = edge_set(result.edge_index)
    assert all((j, i) in edges for i, j in edges)
    assert len(edges) == 2 * int(result.kept.sum())


def test_purification_is_deterministic_and_ignores_edge_order_and_sparse_storage():
    x = torch.tensor(FEATURES, dtype=torch.float32)
    edges = both_ways(PAIRS)
    first = purify_edges(x, edges)
    shuffled = edges[:, torch.randperm(edges.shape[1], generator=torch.Generator().manual_seed(3))]
    with quiet_sparse_warnings():
        sparse = x.to_sparse_csr()
    for again in (purify_edges(x, edges), purify_edges(x, shuffled), purify_edges(sparse, edges)):
        assert edge_set(again.edge_index) == edge_set(first.edge_index)
        assert again.tau == pytest.approx(first.tau, rel=1e-6)
        assert torch.allclose(again.psi, first.psi)


def test_equal_energies_give_zero_lambda_and_keep_every_edge():
    # A 6-cycle alternating two feature vectors: every degree is 2 and every edge has energy
    # ||a - b||^2 / 3, so sigma_E = 0, cv = 0, lambda = 0, p = 0 and tau = max psi.
    a, b = np.array([1.0, 2.0, 0.0]), np.array([0.0, 1.0, 3.0])
    x = torch.tensor(np.stack([a, b] * 3), dtype=torch.float32)
    pairs = [(i, (i + 1) % 6) for i in range(6)]
    result = purify_edges(x, both_ways(pairs))
    assert torch.allclose(result.energy, torch.full((6,), float(np.sum((a - b) ** 2) / 3), dtype=torch.float64))
    assert result.lam == pytest.approx(0.0, abs=1e-12)
    assert result.ratio == pytest.approx(0.0, abs=1e-12)
    assert bool(result.kept.all())


def test_a_graph_without_edges_stays_empty():
    result = purify_edges(torch.ones(3, 2), torch.zeros(2, 0, dtype=torch.long))
    assert result.edge_index.shape == (2, 0) and result.lam == 0.0


# ---------------------------------------------------------------------------- PPR elites
def dense_ppr(n, pairs, restart, alpha, steps):
    adjacency = np.zeros((n, n))
    for i, j in pairs:
        adjacency[i, j] = adjacency[j, i] = 1
    deg = adjacency.sum(0)
    walk = adjacency / np.where(deg > 0, deg, 1)[None, :]                   # A D^{-1}
    pi = restart.copy()
    for _ in range(steps):
        pi = alpha * restart + (1 - alpha) * walk @ pi
    return pi


def test_ppr_scores_match_the_dense_iteration():
    pairs = [(0, 1), (1, 2), (2, 3), (3, 4), (1, 5)]
    restart = np.zeros((6, 2))
    restart[[0, 2, 4], 0] = 1 / 3
    restart[[5], 1] = 1.0
    got = ppr_scores(both_ways(pairs), 6, torch.tensor(restart), alpha=0.15, steps=10)
    assert np.allclose(got.numpy(), dense_ppr(6, pairs, restart, 0.15, 10))


def test_the_centre_of_a_star_is_its_class_elite():
    leaves = 6
    pairs = [(0, leaf) for leaf in range(1, leaves + 1)]
    n = leaves + 1
    y = torch.zeros(n, dtype=torch.long)
    train = torch.ones(n, dtype=torch.bool)
    elites = select_elites(both_ways(pairs), y, train, 1, rho=0.1)         # max(1, floor(0.7)) = 1 elite
    assert elites.nonzero().squeeze(-1).tolist() == [0]


def test_elites_of_a_path_are_the_top_scores_among_the_class_training_nodes():
    # Path 0-...-9, class 0 on even nodes, class 1 on odd nodes; node 8 is not a training node.
    n = 10
    pairs = [(i, i + 1) for i in range(n - 1)]
    y = torch.arange(n) % 2
    train = torch.ones(n, dtype=torch.bool)
    train[8] = False
    rho = 0.5
    elites = select_elites(both_ways(pairs), y, train, 2, rho=rho)
    for cls in (0, 1):
        members = [i for i in range(n) if y[i] == cls and train[i]]
        restart = np.zeros((n, 1))
        restart[members, 0] = 1 / len(members)
        scores = dense_ppr(n, pairs, restart, 0.15, 10)[:, 0]
        wanted = max(1, math.floor(rho * len(members)))
        best = sorted(members, key=lambda i: (-scores[i], i))[:wanted]
        chosen = [i for i in elites.nonzero().squeeze(-1).tolist() if y[i] == cls]
        assert sorted(chosen) == sorted(best)
        assert all(train[i] for i in chosen)


@pytest.mark.parametrize("rho", [0.1, 0.25, 1.0])
def test_elite_counts_follow_max_one_floor_rho_n(rho):
    sizes = torch.tensor([0, 1, 5, 9, 10, 19, 20, 25, 101])
    expected = [0 if n == 0 else max(1, math.floor(rho * n)) for n in sizes.tolist()]
    assert elite_counts(sizes, rho).tolist() == expected


# ---------------------------------------------------------------------------- low-pass, gate, margins
def dense_normalized(n, edge_index):
    adjacency = np.eye(n)
    for i, j in edge_index.T.tolist():
        adjacency[i, j] = 1
    deg = adjacency.sum(1)
    return adjacency / np.sqrt(np.outer(deg, deg))


def test_low_pass_is_the_self_looped_symmetric_normalised_adjacency():
    edges = both_ways([(0, 1), (1, 2), (2, 3), (0, 2)])
    h = torch.randn(5, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    low, high = low_pass(h, edges)
    expected = dense_normalized(5, edges) @ h.numpy()
    assert np.allclose(low.numpy(), expected)
    assert torch.allclose(low + high, h)


def test_injection_only_touches_the_chosen_nodes():
    edges = both_ways([(0, 1), (1, 2), (2, 3)])
    h = torch.randn(4, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    prototypes = torch.randn(2, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    y = torch.tensor([0, 1, 1, 0])
    nodes = torch.tensor([True, False, True, False])
    gamma = 0.3
    out = inject_prototypes(h, edges, prototypes, y, nodes, gamma)
    low = dense_normalized(4, edges) @ h.numpy()
    for i in range(4):
        if nodes[i]:
            expected = (1 - gamma) * low[i] + gamma * prototypes[y[i]].numpy() + (h[i].numpy() - low[i])
        else:
            expected = h[i].numpy()
        assert np.allclose(out[i].numpy(), expected)


def test_class_homophily_by_hand():
    # 0-1, 0-2, 1-2, 2-3, 3-4 ; labels 0 0 1 1 1 ; training nodes 0, 2, 3 ; node 5 isolated (class 2).
    edges = both_ways([(0, 1), (0, 2), (1, 2), (2, 3), (3, 4)])
    y = torch.tensor([0, 0, 1, 1, 1, 2])
    train = torch.tensor([True, False, True, True, False, True])
    q_all = class_homophily(edges, y, train, 4)
    # all labels: h0 = 1/2 (nbrs 1, 2), h2 = 1/3 (0, 1, 3), h3 = 2/2 (2, 4); node 5 has no neighbour.
    assert q_all.tolist() == pytest.approx([0.5, (1 / 3 + 1.0) / 2, 0.5, 0.5])
    q_train = class_homophily(edges, y, train, 4, labelled=train)
    # training-labelled neighbours only: h0 = 0/1 (2), h2 = 1/2 (0, 3), h3 = 1/1 (2)
    assert q_train.tolist() == pytest.approx([0.0, (0.5 + 1.0) / 2, 0.5, 0.5])


def test_logit_margins_follow_eq_15_and_vanish_for_absent_classes():
    counts = torch.tensor([40, 10, 1, 0])
    q = torch.tensor([0.2, 0.5, 0.9, 0.5], dtype=torch.float64)
    mu = 1.5
    expected = [mu * qq * math.log((40 + EPS) / (n + EPS)) if n else 0.0 for n, qq in zip(counts.tolist(), q.tolist())]
    got = logit_margins(counts, q, mu)
    assert got.tolist() == pytest.approx(expected)
    assert got[0] == 0 and got[2] > got[1] > 0
