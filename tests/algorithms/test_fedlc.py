"""FedLC's calibrated cross-entropy, derived by hand."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from fgl_ray.algorithms.fedlc import calibrated_cross_entropy, calibration_margins

from .conftest import NUM_CLASSES


def logits_and_labels(rows=16, classes=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, classes, generator=gen, dtype=torch.float64)
    return logits, torch.randint(0, classes, (rows,), generator=gen)


def test_margins_are_tau_times_count_to_the_minus_quarter():
    counts = torch.tensor([81, 16, 1, 0])
    tau = 2.0
    margins = calibration_margins(counts, tau)
    assert margins[:3].tolist() == pytest.approx([tau / 3, tau / 2, tau])
    assert math.isinf(margins[3])


def test_equal_counts_give_plain_cross_entropy():
    # delta_c = tau n^{-1/4} is the same constant k for every class, and
    # -log(exp(z_y - k) / sum_c exp(z_c - k)) = -log(exp(z_y) / sum_c exp(z_c)).
    z, y = logits_and_labels()
    margins = calibration_margins(torch.full((4,), 37), tau=1.3)
    assert calibrated_cross_entropy(z, y, margins).item() == pytest.approx(F.cross_entropy(z, y).item(), rel=1e-12)


def test_unequal_counts_follow_the_formula_and_tail_classes_get_larger_margins():
    z, y = logits_and_labels()
    counts = torch.tensor([100, 30, 5, 1])
    tau = 1.0
    margins = calibration_margins(counts, tau)
    assert all(margins[i] < margins[i + 1] for i in range(3))                # rarer class, larger margin
    by_hand = 0.0
    for row, label in zip(z.tolist(), y.tolist()):
        shifted = [v - tau * n ** -0.25 for v, n in zip(row, counts.tolist())]
        by_hand += -(shifted[label] - math.log(sum(math.exp(v) for v in shifted)))
    assert calibrated_cross_entropy(z, y, margins).item() == pytest.approx(by_hand / len(y), rel=1e-10)
    # A tail-class row with equal raw logits: the calibration makes its loss larger than CE,
    # a head-class row's smaller: the tail class must win by a wider margin.
    flat = torch.zeros(2, 4, dtype=torch.float64)
    labels = torch.tensor([3, 0])
    per_row = F.cross_entropy(flat - margins, labels, reduction="none")
    assert per_row[0] > math.log(4) > per_row[1]


def test_absent_classes_drop_out_of_the_softmax():
    z, y = logits_and_labels()
    y = y % 3                                                               # class 3 absent
    margins = calibration_margins(torch.tensor([9, 9, 9, 0]), tau=1.0)
    assert calibrated_cross_entropy(z, y, margins).item() == pytest.approx(F.cross_entropy(z[:, :3], y).item(),
                                                                           rel=1e-12)


def test_count_one_keeps_absent_classes_in_the_softmax_with_the_one_node_margin():
    z, y = logits_and_labels()
    y = y % 3                                                               # class 3 absent
    tau = 0.7
    margins = calibration_margins(torch.tensor([9, 9, 9, 0]), tau=tau, absent="count_one")
    assert margins[3].item() == pytest.approx(tau)                          # tau * 1^{-1/4}
    shifted = z - torch.tensor([tau / math.sqrt(3), tau / math.sqrt(3), tau / math.sqrt(3), tau], dtype=z.dtype)
    assert calibrated_cross_entropy(z, y, margins).item() == pytest.approx(F.cross_entropy(shifted, y).item(),
                                                                           rel=1e-12)
    # the absent class is now pushed down by this client, so its loss exceeds the excluded form's
    excluded = calibration_margins(torch.tensor([9, 9, 9, 0]), tau=tau)
    assert calibrated_cross_entropy(z, y, margins) > calibrated_cross_entropy(z, y, excluded)


def test_client_loss_uses_its_training_counts(make_config, make_context, ring_graph):
    graph = ring_graph(2, classes=(1, 2))
    algorithm, ctx = make_context(make_config("fedlc", algorithm_options={"tau": 0.5}), graph)
    data = graph.data
    counts = torch.bincount(data.y[data.train_mask], minlength=NUM_CLASSES)
    assert counts[0] == 0
    logits = ctx.model(data.x, data.edge_index)
    expected = calibrated_cross_entropy(logits[data.train_mask], data.y[data.train_mask],
                                        calibration_margins(counts, 0.5))
    assert algorithm.loss(ctx, ctx.data, logits).item() == pytest.approx(expected.item(), rel=1e-6)
    assert torch.isfinite(algorithm.loss(ctx, ctx.data, logits))


def test_runs_in_process(make_config, tiny_data, run_local):
    backend = run_local(make_config("fedlc"), tiny_data, 2)
    assert backend.global_weights().isfinite().all()
