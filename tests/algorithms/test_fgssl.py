"""FGSSL: augmented views, the supervised node contrast, the neighbourhood distillation, the frozen teacher."""

import math

import pytest
import torch

from fgl_ray.algorithms.fgssl import (PROBABILITY_TEMPERATURE, mask_feature_columns, node_contrast,
                                      structure_distillation, supervised_contrast)
from fgl_ray.params import trainable_vector


def test_feature_masking_zeroes_whole_columns_alike_for_dense_and_sparse_features():
    x = torch.rand(30, 12) + 0.1
    torch.manual_seed(3)
    dense = mask_feature_columns(x, 0.5)
    torch.manual_seed(3)
    sparse = mask_feature_columns(x.to_sparse_csr(), 0.5)
    torch.testing.assert_close(sparse.to_dense(), dense)
    zeroed = (dense == 0).all(dim=0)
    assert 0 < int(zeroed.sum()) < 12 and torch.equal(dense[:, ~zeroed], x[:, ~zeroed])


def test_node_contrast_is_the_supervised_contrastive_loss_of_a_direct_loop():
    torch.manual_seed(0)
    anchors, samples = torch.randn(6, 4), torch.randn(6, 4)
    labels = torch.tensor([0, 1, 0, 2, 1, 0])
    tau = 0.3
    total = 0.0
    for i in range(6):
        sims = [float(torch.cosine_similarity(anchors[i], samples[k], dim=0)) / tau for k in range(6)]
        log_norm = math.log(sum(math.exp(s) for s in sims))
        positives = [k for k in range(6) if labels[k] == labels[i]]
        total += -sum(sims[k] - log_norm for k in positives) / len(positives)
    assert abs(float(supervised_contrast(anchors, samples, labels, tau)) - total / 6) < 1e-5


def test_both_directions_add_the_teacher_anchored_contrast_whose_gradient_also_reaches_the_student():
    torch.manual_seed(2)
    student, teacher = torch.randn(8, 4, requires_grad=True), torch.randn(8, 4)
    labels = torch.tensor([0, 1, 0, 2, 1, 0, 2, 2])
    one = node_contrast(student, teacher, labels, 0.2, "student")
    both = node_contrast(student, teacher, labels, 0.2, "both")
    torch.testing.assert_close(both - one, supervised_contrast(teacher, student, labels, 0.2))
    assert float(both - one) > 0
    grad_one, = torch.autograd.grad(one, student)
    grad_both, = torch.autograd.grad(both, student)
    assert not torch.allclose(grad_one, grad_both)


def test_structure_distillation_is_the_mean_kl_of_neighbourhood_softmaxes():
    torch.manual_seed(1)
    n = 5
    edges = torch.tensor([[0, 1], [1, 2], [2, 0], [3, 4]]).T
    edge_index = torch.cat([edges, edges.flip(0)], dim=1)
    student, teacher = torch.randn(n, 3), torch.randn(n, 3)
    omega = 0.5
    qs, qt = (torch.softmax(v / PROBABILITY_TEMPERATURE, 1) for v in (student, teacher))
    total = 0.0
    for v in range(n):
        neighbours = sorted({int(u) for u, w in edge_index.T.tolist() if w == v} | {v})
        ps = torch.softmax(torch.stack([torch.cosine_similarity(qs[v], qs[u], dim=0) for u in neighbours]) / omega, 0)
        pt = torch.softmax(torch.stack([torch.cosine_similarity(qt[v], qt[u], dim=0) for u in neighbours]) / omega, 0)
        total += float((pt * (pt.log() - ps.log())).sum())
    assert abs(float(structure_distillation(student, teacher, edge_index, omega)) - total / n) < 1e-5
    assert float(structure_distillation(teacher, teacher, edge_index, omega)) == 0.0


def test_with_zero_weights_the_objective_is_cross_entropy(anchor_case):
    case = anchor_case("fgssl", algorithm_options={"lam": 0.0, "mu": 0.0})
    z, logits = case.forward()
    case.assert_vanishes(case.algorithm.objective(case.ctx, case.ctx.data, z, logits), logits)


@pytest.mark.parametrize("contrast", ["student", "both"])
def test_both_terms_add_to_the_loss_and_reach_the_student_only(anchor_case, contrast):
    case = anchor_case("fgssl", algorithm_options={"contrast": contrast})
    teacher = case.ctx.state["fgssl_teacher"]
    before = trainable_vector(teacher).clone()
    z, logits = case.forward()
    loss = case.algorithm.objective(case.ctx, case.ctx.data, z, logits)
    assert float(loss) > float(case.plain_loss(logits))
    loss.backward()
    assert all(p.grad is None for p in teacher.parameters())
    case.algorithm.local_train(case.ctx)
    assert torch.equal(trainable_vector(teacher), before)                   # the teacher stays the received model
    assert not torch.equal(trainable_vector(case.ctx.model), before)


def test_fgssl_propagates_pmlp_gcn_in_training_so_its_edge_drops_reach_the_student(make_config, make_context,
                                                                                  ring_graph):
    from fgl_ray.algorithms.fgssl import augmented

    _, ctx = make_context(make_config("fgssl", model="pmlp_gcn", dropout=0.0))
    assert ctx.model.propagate_in_training
    ctx.model.train()
    batch = ring_graph(0).data
    torch.manual_seed(0)
    edges_only = augmented(batch, 0.8, 0.0)                  # drops edges, keeps every feature
    assert not torch.allclose(ctx.task.encode(ctx.model, batch), ctx.task.encode(ctx.model, edges_only))
