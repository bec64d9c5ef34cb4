"""Each readout's metric on hand-made cases with a known answer, and its additive statistics."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.metrics import roc_auc_score
from torch_geometric.data import Data

from fgl_ray.config import load_config
from fgl_ray.data.types import ClientGraph
from fgl_ray.metrics import auc_from_histograms, score_histogram
from fgl_ray.tasks import build_task, pool_stats
from fgl_ray.data.splits import split_edges
from fgl_ray.tasks.link_prediction import sample_non_edges
from fgl_ray.tasks.modality import derangement, expected_hits, expected_reciprocal_rank, info_nce, tied_ranks


def test_auc_from_histograms_by_hand_and_against_sklearn():
    positive, negative = np.array([0, 1, 2]), np.array([2, 1, 0])       # bins low / mid / high
    # pairs: pos-high beats every negative (2*3), pos-mid beats neg-low (1*2) and ties neg-mid (1*1/2)
    assert auc_from_histograms(positive, negative) == pytest.approx((2 * 3 + 1 * 2 + 0.5) / 9)
    rng = np.random.default_rng(0)
    pos, neg = rng.beta(3, 2, 400), rng.beta(2, 3, 500)
    expected = roc_auc_score(np.r_[np.ones(400), np.zeros(500)], np.r_[pos, neg])
    assert auc_from_histograms(score_histogram(pos), score_histogram(neg)) == pytest.approx(expected, abs=2e-3)
    assert np.isnan(auc_from_histograms(np.zeros(3), np.ones(3)))


def test_pooled_histograms_give_the_auc_of_all_scores():
    rng = np.random.default_rng(1)
    parts = [(rng.beta(3, 2, 50 * k), rng.beta(2, 3, 40 * k)) for k in (1, 2, 3)]
    pooled = pool_stats({"positive": score_histogram(p), "negative": score_histogram(n)} for p, n in parts)
    everything = roc_auc_score(np.r_[np.ones(300), np.zeros(240)],
                               np.r_[np.concatenate([p for p, _ in parts]), np.concatenate([n for _, n in parts])])
    assert auc_from_histograms(pooled["positive"], pooled["negative"]) == pytest.approx(everything, abs=2e-3)


def _ring(n=30):
    src = torch.arange(n)
    ring = torch.stack([src, (src + 1) % n])
    chords = torch.stack([src[::3], (src[::3] + 7) % n])
    edge_index = torch.cat([ring, chords, ring.flip(0), chords.flip(0)], dim=1)
    return Data(x=torch.randn(n, 4), edge_index=edge_index, y=src % 2, train_mask=src < 18, val_mask=(src >= 18) & (src < 24),
                test_mask=src >= 24)


def test_edge_split_partitions_the_undirected_edges_and_negatives_are_non_edges():
    data = _ring()
    train, val, test = split_edges(data.edge_index, (0.6, 0.2, 0.2), torch.Generator().manual_seed(0))
    undirected = data.edge_index[:, data.edge_index[0] < data.edge_index[1]]
    together = torch.cat([train, val, test], dim=1)
    assert together.shape[1] == undirected.shape[1]
    assert {tuple(e) for e in together.T.tolist()} == {tuple(e) for e in undirected.T.tolist()}
    negatives = sample_non_edges(data.edge_index, data.num_nodes, 50, torch.Generator().manual_seed(1))
    existing = {tuple(e) for e in data.edge_index.T.tolist()}
    assert negatives.shape == (2, 50) and not any(tuple(e) in existing for e in negatives.T.tolist())
    assert bool((negatives[0] != negatives[1]).all())


def test_link_prediction_trains_on_training_edges_only_and_scores_a_perfect_model_at_one():
    config = load_config({"dataset": "synthetic-mm", "task": "link-prediction", "model": "gcn"})
    task = build_task(config)
    data = task.prepare(ClientGraph(0, "d", _ring()), None, "cpu")
    train = {tuple(e) for e in data.edge_index.T.tolist()}
    held = {tuple(e) for e in torch.cat([data.val_pos, data.test_pos], dim=1).T.tolist()}
    assert not train & held and not train & {(b, a) for a, b in held}

    def oracle(batch):                                   # knows the whole graph: 1 for edges, 0 otherwise
        edges = {tuple(e) for e in data.full_edge_index.T.tolist()}
        return torch.tensor([10.0 if tuple(p) in edges else -10.0 for p in batch.pairs.T.tolist()])

    stats = task.evaluate(oracle, data, 2)
    assert task.scores(stats["test"])["auc"] == pytest.approx(1.0)


def _modal(n=12):
    return Data(x=torch.ones(n, 2), y=torch.zeros(n, dtype=torch.long), train_mask=torch.zeros(n, dtype=torch.bool),
                val_mask=torch.zeros(n, dtype=torch.bool), test_mask=torch.ones(n, dtype=torch.bool),
                edge_index=torch.empty(2, 0, dtype=torch.long))


def test_derangements_have_no_fixed_point():
    for count in (2, 3, 10, 57):
        mapping = derangement(count, torch.Generator().manual_seed(count))
        assert sorted(mapping.tolist()) == list(range(count)) and bool((mapping != torch.arange(count)).all())


def test_matching_auc_is_one_for_identical_views_and_half_for_unrelated_ones():
    task = build_task(load_config({"dataset": "synthetic-mm", "task": "modality-matching"}))
    data = task.prepare(ClientGraph(0, "d", _modal()), None, "cpu")
    views = torch.randn(12, 8)
    aligned = task.evaluate(lambda batch: torch.cat([views, views], dim=-1), data, 1)
    assert task.scores(aligned["test"])["auc"] == pytest.approx(1.0)
    constant = task.evaluate(lambda batch: torch.ones(12, 16), data, 1)    # every pair scores the same
    assert task.scores(constant["test"])["auc"] == pytest.approx(0.5)


def test_complete_node_matching_never_pairs_with_an_incomplete_node():
    task = build_task(load_config({"dataset": "synthetic-mm", "task": "modality-matching"}))
    graph = _modal()
    graph.x[6:, 1] = 0                                   # nodes 6..11 lack their text
    data = task.prepare(ClientGraph(0, "d", graph), None, "cpu")
    generator = torch.Generator().manual_seed(0)
    visual, text = torch.randn(12, 8, generator=generator), torch.randn(12, 8, generator=generator)
    scores = []
    for _ in range(2):
        stats = task.evaluate(lambda batch: torch.cat([visual, text], dim=-1), data, 1)["test"]
        scores.append((task.scores(stats)["auc_complete"], stats["negative_complete"].sum()))
        visual[6:], text[6:] = torch.randn(6, 8, generator=generator), torch.randn(6, 8, generator=generator)
    assert scores[0] == scores[1] and scores[0][1] == 6


def test_retrieval_recall_by_hand():
    task = build_task(load_config({"dataset": "synthetic-mm", "task": "modality-retrieval"}))
    data = task.prepare(ClientGraph(0, "d", _modal()), None, "cpu")
    views = F.normalize(torch.randn(12, 8), dim=-1)
    perfect = task.scores(task.evaluate(lambda batch: torch.cat([views, views], dim=-1), data, 1)["test"])
    assert [perfect[m] for m in ("recall_at_1", "recall_at_5", "mrr")] == pytest.approx([1.0, 1.0, 1.0])
    shuffled = torch.roll(views, 1, dims=0)              # each text's own visual partner is another node's
    ranks = []
    similarity = views @ shuffled.T
    for query in range(12):
        ranks.append(1 + int((similarity[query] > similarity[query, query]).sum()))
    got = task.scores(task.evaluate(lambda batch: torch.cat([shuffled, views], dim=-1), data, 1)["test"])
    # visual = shuffled, text = views: text->visual ranks from `similarity`; visual->text from its transpose
    reverse = [1 + int((similarity.T[q] > similarity.T[q, q]).sum()) for q in range(12)]
    expected = (np.mean(np.array(ranks) <= 5) + np.mean(np.array(reverse) <= 5)) / 2
    assert got["recall_at_5"] == pytest.approx(expected)


def test_info_nce_is_lowest_for_aligned_views():
    views = torch.randn(16, 8)
    assert info_nce(views, views) < info_nce(views, torch.randn(16, 8))


def test_a_constant_embedding_retrieves_at_chance_not_first():
    task = build_task(load_config({"dataset": "synthetic-mm", "task": "modality-retrieval"}))
    data = task.prepare(ClientGraph(0, "d", _modal(20)), None, "cpu")
    text = torch.randn(20, 8)
    constant = task.scores(task.evaluate(lambda batch: torch.cat([torch.ones(20, 8), text], dim=-1), data, 1)["test"])
    # text -> visual: all 20 candidates tie, so the partner's place is uniform over 1..20; visual -> text:
    # the 20 identical queries rank the 20 texts once, so the partners' ranks are exactly 1..20. Both
    # directions: P(rank <= k) = k / 20 and E[1 / rank] = H_20 / 20.
    harmonic = sum(1 / r for r in range(1, 21))
    assert constant["recall_at_1"] == pytest.approx(1 / 20)
    assert constant["recall_at_5"] == pytest.approx(5 / 20)
    assert constant["mrr"] == pytest.approx(harmonic / 20)


def test_retrieval_ties_survive_float_noise():
    # identical candidates whose float32 cosines differ in the last bits still tie
    text = F.normalize(torch.randn(10, 128, generator=torch.Generator().manual_seed(0)), dim=-1)
    visual = F.normalize(torch.full((10, 128), 0.3), dim=-1)
    higher, ties = tied_ranks(text @ visual.T)
    assert higher.tolist() == [0] * 10 and ties.tolist() == [9] * 10
    assert expected_hits(higher, ties, 5).tolist() == pytest.approx([0.5] * 10)


def test_expected_reciprocal_rank_is_the_mean_over_tied_places():
    higher, ties = torch.tensor([0, 3, 2]), torch.tensor([0, 0, 4])
    by_hand = [1.0, 1 / 4, np.mean([1 / r for r in range(3, 8)])]
    assert expected_reciprocal_rank(higher, ties).tolist() == pytest.approx(by_hand)
    assert expected_hits(torch.tensor([2]), torch.tensor([4]), 5).item() == pytest.approx(3 / 5)


def test_confident_link_scores_keep_their_auc():
    from fgl_ray.tasks.link_prediction import LOGIT_BINS, LOGIT_RANGE

    rng = np.random.default_rng(2)
    pos, neg = rng.normal(12, 3, 3000), rng.normal(6, 4, 3000)          # logits far beyond the sigmoid's range
    exact = roc_auc_score(np.r_[np.ones(3000), np.zeros(3000)], np.r_[pos, neg])
    binned = auc_from_histograms(score_histogram(pos, *LOGIT_RANGE, bins=LOGIT_BINS),
                                 score_histogram(neg, *LOGIT_RANGE, bins=LOGIT_BINS))
    assert binned == pytest.approx(exact, abs=2e-3)


def test_a_dense_client_gets_every_non_edge_it_has_and_never_hangs():
    triangle = torch.tensor([[0, 1, 1, 2, 2, 0], [1, 0, 2, 1, 0, 2]])
    assert sample_non_edges(triangle, 3, 5, None).shape == (2, 0)
    path = torch.tensor([[0, 1], [1, 0]])                               # nodes 0-1 linked, 2 alone: 4 non-edges
    found = sample_non_edges(path, 3, 10, None)
    assert found.shape == (2, 4) and len({tuple(p) for p in found.T.tolist()}) == 4


def test_two_view_link_prediction_gets_a_view_without_held_out_edges_and_prepare_keeps_it(shared_datasets):
    from fgl_ray.data import build_federated_data

    values = {"dataset": "cora-mm", "data_dir": str(shared_datasets), "num_clients": 5}
    links = build_federated_data(load_config({**values, "task": "link-prediction"})).clients
    nodes = build_federated_data(load_config({**values, "task": "node-classification"})).clients
    for link, node in zip(links, nodes):
        torch.testing.assert_close(link.data.x[:, 128:], node.data.x[:, 128:])      # the text view is the same
        assert not torch.allclose(link.data.x[:, :128], node.data.x[:, :128])       # the structure view is not
    task = build_task(load_config({**values, "task": "link-prediction"}))
    torch.testing.assert_close(task.prepare(links[0], None, "cpu").x, links[0].data.x)
