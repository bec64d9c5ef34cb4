"""FGGP: FINCH, the kNN view, the prototype losses, the clustered banks and the vote."""

import math

import numpy as np
import torch
import torch.nn.functional as F

from fgl_ray.algorithms.fggp import (alignment_loss, global_prototype_loss, knn_edges, knn_vote, reconstruction_loss,
                                     weighted_prototypes)
from fgl_ray.algorithms.finch import finch
from fgl_ray.data.types import FederatedGraphData
from fgl_ray.messages import GLOBAL, ClientUpdate
from fgl_ray.runtime.local_backend import LocalBackend


def at_angles(*degrees):
    return np.array([[math.cos(math.radians(d)), math.sin(math.radians(d))] for d in degrees])


def test_finch_links_first_neighbours_and_stops_before_a_single_cluster():
    assert finch(at_angles(0, 10, 90, 100))[-1].tolist() == [0, 0, 1, 1]       # means at 5 and 95 would merge: stop
    assert [level.max() + 1 for level in finch(at_angles(0, 1, 20, 21, 180, 181, 200, 201))] == [4, 2]
    assert finch(at_angles(0, 50))[-1].tolist() == [0, 0]                        # two points: one cluster
    assert finch(at_angles(7))[-1].tolist() == [0]
    # scale does not matter: the distance is cosine
    assert finch(at_angles(0, 10, 90, 100) * np.array([[1], [5], [2], [9]]))[-1].tolist() == [0, 0, 1, 1]


def test_knn_edges_point_to_the_most_similar_other_nodes():
    h = torch.tensor(at_angles(0, 5, 50, 60, 180), dtype=torch.float32)
    edges = knn_edges(h, 2)
    targets = {i: sorted(edges[1, edges[0] == i].tolist()) for i in range(5)}
    assert targets == {0: [1, 2], 1: [0, 2], 2: [1, 3], 3: [1, 2], 4: [2, 3]}


def test_prototypes_weight_training_nodes_by_label_and_others_by_confidence():
    h = torch.tensor([[1.0, 0.0], [0.0, 2.0], [4.0, 4.0], [2.0, 0.0]])
    probs = torch.tensor([[0.2, 0.8], [0.9, 0.1], [0.6, 0.4], [0.3, 0.7]])
    train = torch.tensor([True, True, False, False])
    y = torch.tensor([0, 1, 1, 1])
    prototypes, weights = weighted_prototypes(h, probs, train, y, 3)
    torch.testing.assert_close(weights, torch.tensor([1.0 + 0.6, 1.0 + 0.7, 0.0]))
    torch.testing.assert_close(prototypes[0], (h[0] + 0.6 * h[2]) / 1.6, atol=1e-5, rtol=0)
    torch.testing.assert_close(prototypes[1], (h[1] + 0.7 * h[3]) / 1.7, atol=1e-5, rtol=0)
    assert torch.equal(prototypes[2], torch.zeros(2))


def test_alignment_loss_is_cross_entropy_of_each_pair_against_the_other_classes():
    torch.manual_seed(0)
    g, o = torch.randn(3, 4), torch.randn(3, 4)
    gn, on = F.normalize(g, dim=1), F.normalize(o, dim=1)
    expected = 0.0
    for i in range(3):
        logits = [float(gn[i] @ on[i])] + [float(gn[i] @ gn[j]) for j in range(3) if j != i] \
            + [float(gn[i] @ on[j]) for j in range(3) if j != i]
        logits = torch.tensor(logits) / 0.5
        expected += float(-torch.log_softmax(logits, 0)[0])
    assert abs(float(alignment_loss(g, o, 0.5)) - expected / 3) < 1e-5
    assert float(alignment_loss(g[:1], o[:1], 0.5)) == 0.0


def test_global_infonce_and_the_vote_use_only_valid_bank_slots():
    bank = torch.zeros(2, 2, 2)
    bank[0, 0], bank[1, 0], bank[1, 1] = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]), torch.tensor([0.6, 0.8])
    valid = torch.tensor([[True, False], [True, True]])
    h, y = torch.tensor([[1.0, 0.1], [0.1, 1.0]]), torch.tensor([0, 1])
    centres, labels = bank[valid], torch.tensor([0, 1, 1])
    sims = F.normalize(h, dim=1) @ F.normalize(centres, dim=1).T / 0.02
    expected = [float(torch.logsumexp(sims[i], 0) - torch.logsumexp(sims[i][labels == y[i]], 0)) for i in range(2)]
    assert abs(float(global_prototype_loss(h, y, bank, valid, 0.02)) - np.mean(expected)) < 1e-4
    assert knn_vote(h, bank, valid, 30, 2).argmax(1).tolist() == [0, 1]
    assert knn_vote(h, bank, valid, 1, 2).exp().max(1).values.gt(0.99).all()


def test_reconstruction_loss_balances_edges_and_non_edges():
    adjacency = torch.eye(4)
    adjacency[0, 1] = 1.0
    perfect = (adjacency * 2 - 1) * 50
    assert float(reconstruction_loss(perfect, adjacency)) < 1e-6
    assert float(reconstruction_loss(torch.zeros(4, 4), adjacency)) > 0


def test_with_every_extra_weight_at_zero_the_objective_is_cross_entropy(anchor_case):
    case = anchor_case("fggp", algorithm_options={"view_weight": 0.0, "align_weight": 0.0,
                                                   "reconstruction_weight": 0.0, "global_weight": 0.0})
    case.ctx.state["fggp_joined"] = case.ctx.data.edge_index
    z, logits = case.forward()
    case.assert_vanishes(case.algorithm.objective(case.ctx, case.ctx.data, z, logits), logits)


def test_the_server_clusters_each_class_and_keeps_a_rolling_vote_bank(make_config, ring_graph):
    clients = [ring_graph(i) for i in range(4)]
    data = FederatedGraphData(clients=clients, domains=[c.domain for c in clients], num_features=6, num_classes=3)
    server = LocalBackend(make_config("fggp", algorithm_options={"bank_size": 3}), data).server
    hidden, size = server.declared["prototypes"][1], server.layout.size
    a, b = torch.zeros(hidden), torch.zeros(hidden)
    a[0], b[1] = 1.0, 1.0

    def update(client, prototype_of_class_0, weight_1=0.0):
        prototypes = torch.stack([prototype_of_class_0, b, a])
        return ClientUpdate(client, GLOBAL, 10, torch.zeros(size), server.models[GLOBAL].buffers,
                            {"prototypes": prototypes, "weights": torch.tensor([1.0, weight_1, 0.0])})

    near_a, near_b = a * 3 + b * 0.1, b * 2 + a * 0.1
    server.algorithm.aggregate(server, [update(0, a), update(1, near_a, 1.0), update(2, b), update(3, near_b)])
    algorithm = server.algorithm
    assert algorithm.bank_valid[0].sum() == 2 and algorithm.bank_valid[1].sum() == 1 and not algorithm.bank_valid[2].any()
    centres = sorted(algorithm.bank[0][algorithm.bank_valid[0]].tolist())
    assert centres == sorted([((a + near_a) / 2).tolist(), ((b + near_b) / 2).tolist()])
    for _ in range(2):
        server.algorithm.aggregate(server, [update(k, a) for k in range(4)])     # one cluster per round
    assert algorithm.vote_valid[0].all() and algorithm.vote_valid[1].sum() == 1
    torch.testing.assert_close(algorithm.vote_bank[0][0], a)                   # the first round's slot was reused


def test_a_client_too_large_for_the_dense_edge_generator_is_refused_by_name(make_config, make_context, ring_graph,
                                                                           monkeypatch):
    import pytest

    from fgl_ray.algorithms import fggp

    monkeypatch.setattr(fggp, "MAX_DENSE_NODES", 20)
    with pytest.raises(ValueError, match="augmentor: false"):
        make_context(make_config("fggp"), ring_graph(0, n=24))
    make_context(make_config("fggp", algorithm_options={"augmentor": False}), ring_graph(0, n=24))


def test_fggp_propagates_pmlp_gcn_in_training_as_the_authors_backbone_does(make_config, make_context, ring_graph):
    _, ctx = make_context(make_config("fggp", model="pmlp_gcn", dropout=0.0))
    assert ctx.model.propagate_in_training
    ring, other = ring_graph(0).data, ring_graph(0).data.clone()
    other.edge_index = torch.stack([torch.arange(24), torch.arange(24).roll(5)])
    ctx.model.train()
    # the second view reaches the training representations (an MLP's would be the same on both graphs)
    assert not torch.allclose(ctx.task.encode(ctx.model, ring), ctx.task.encode(ctx.model, other))
    _, own = make_context(make_config("fggp", model="pmlp_gcn", model_options={"propagate_in_training": False}))
    _, fedavg = make_context(make_config("fedavg", model="pmlp_gcn"))
    assert not own.model.propagate_in_training and not fedavg.model.propagate_in_training


def test_the_algorithms_backbone_options_sit_between_the_datas_and_the_configs(make_config):
    from fgl_ray.algorithms.base import backbone_options
    from fgl_ray.describe import describe

    dictated = {"propagate_in_training": False, "modality_dims": [3, 3]}     # the second is not pmlp_gcn's
    assert backbone_options(make_config("fggp", model="pmlp_gcn"), dictated) == {"propagate_in_training": True}
    assert backbone_options(make_config("fedavg", model="pmlp_gcn"), dictated) == {"propagate_in_training": False}
    assert backbone_options(make_config("fggp", model="gcn")) == {}
    assert "on pmlp_gcn it sets propagate_in_training: True" in describe("fggp")
