"""FedIA (Algorithm 1, Eqs. 5-8) against values worked out by hand from the equations."""

import math
from decimal import Decimal

import pytest
import torch
from pydantic import ValidationError

from fgl_ray.aggregators import build_aggregator
from fgl_ray.models import build_model
from fgl_ray.params import ParamLayout

# two "layers": fc1.weight with 4 coordinates (0..3), fc2.weight with 2 coordinates (4..5)
TWO_LAYERS = ParamLayout(names=("fc1.weight", "fc2.weight"), shapes=((2, 2), (2,)))


def expected_kept(rho: float, n: int) -> int:
    """ceil(rho * n) in exact decimal arithmetic."""
    return math.ceil(Decimal(str(rho)) * n)


def softmax(xs):
    exps = [math.exp(x) for x in xs]
    return [e / sum(exps) for e in exps]


def test_two_rounds_match_hand_computation():
    agg = build_aggregator("fedia", {"rho": 0.5, "beta": 0.25}, TWO_LAYERS, [0, 1, 2])
    lr = 0.1
    w = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], dtype=torch.float64)

    # ---- round 1, all three clients
    u = torch.tensor([[1.0, 0.0, 2.0, 0.0, 1.0, 0.0],
                      [0.0, 4.0, 0.0, 1.0, 0.0, 3.0],
                      [-2.0, 0.0, 0.0, 0.0, -1.0, 0.0]], dtype=torch.float64)
    # importance, fc1: [1, 4/3, 2/3, 1/3] -> keep ceil(0.5*4)=2: coordinates 1 and 0
    #             fc2: [2/3, 1]           -> keep ceil(0.5*2)=1: coordinate 5
    mask = [True, True, False, False, False, True]
    # masked updates: c0 [1,0,.,.,.,0] c1 [0,4,.,.,.,3] c2 [-2,0,.,.,.,0]
    s = [1.0, 5.0, 2.0]
    p = softmax(s)
    alpha = [0.25 * (1 / 3) + 0.75 * pk for pk in p]
    alpha = [a / sum(alpha) for a in alpha]
    step = [alpha[0] * 1 + alpha[2] * -2, alpha[1] * 4, 0, 0, 0, alpha[1] * 3]
    expected = torch.tensor([wi - lr * si for wi, si in zip(w.tolist(), step)], dtype=torch.float64)

    new = agg.aggregate(w, u, torch.tensor([1.0, 1.0, 1.0]), [0, 1, 2], lr)
    torch.testing.assert_close(new, expected)
    assert agg.last_mask.tolist() == mask
    assert agg.last_density == pytest.approx(3 / 6)
    torch.testing.assert_close(agg.last_scores, torch.tensor(s, dtype=torch.float64))
    torch.testing.assert_close(agg.alpha, torch.tensor(alpha, dtype=torch.float64))

    # ---- round 2, clients 0 and 2 only; client 1 keeps its alpha
    u2 = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0, 2.0],
                       [3.0, 0.0, 0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    # importance, fc1: [2, 1/2, 1/2, 1/2] -> coordinate 0, then the tie 1/2/3 goes to the lowest index, 1
    #             fc2: [0, 1]             -> coordinate 5
    mask2 = [True, True, False, False, False, True]
    # masked: c0 [1,1,.,.,.,2] -> sqrt(6);  c2 [3,0,.,.,.,0] -> 3
    p2 = softmax([math.sqrt(6), 3.0])
    tilde = [0.25 * alpha[0] + 0.75 * p2[0], 0.25 * alpha[2] + 0.75 * p2[1]]
    a0, a2 = tilde[0] / sum(tilde), tilde[1] / sum(tilde)
    step2 = [a0 * 1 + a2 * 3, a0 * 1, 0, 0, 0, a0 * 2]
    expected2 = torch.tensor([wi - lr * si for wi, si in zip(expected.tolist(), step2)], dtype=torch.float64)

    new2 = agg.aggregate(new, u2, torch.tensor([5.0, 1.0]), [0, 2], lr)
    torch.testing.assert_close(new2, expected2)
    assert agg.last_mask.tolist() == mask2
    torch.testing.assert_close(agg.alpha, torch.tensor([a0, alpha[1], a2], dtype=torch.float64))


def test_rho_one_beta_one_is_uniform_average():
    layout = ParamLayout.of(build_model("mlp", 3, 2, hidden=2))
    agg = build_aggregator("fedia", {"rho": 1.0, "beta": 1.0}, layout, [0, 1, 2, 3])
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(layout.size, generator=gen, dtype=torch.float64)
    lr = 0.05
    for _ in range(3):
        u = torch.randn(4, layout.size, generator=gen, dtype=torch.float64)
        counts = torch.tensor([1.0, 2.0, 3.0, 4.0])  # ignored by FedIA
        expected = w - lr * u.sum(dim=0) / 4
        w = agg.aggregate(w, u, counts, [0, 1, 2, 3], lr)
        torch.testing.assert_close(w, expected)
        assert bool(agg.last_mask.all())
        torch.testing.assert_close(agg.alpha, torch.full((4,), 0.25, dtype=torch.float64))
    # the first round of a fresh aggregator is uniform over any participant subset (equal initial alpha)
    fresh = build_aggregator("fedia", {"rho": 1.0, "beta": 1.0}, layout, [0, 1, 2, 3])
    u = torch.randn(2, layout.size, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(fresh.aggregate(w, u, torch.ones(2), [0, 2], lr), w - lr * u.mean(dim=0))


def test_beta_one_under_partial_participation_carries_renormalised_alpha():
    # Eq. 7 stores alpha normalised over the participants; absent clients keep theirs. With beta=1:
    # round [0, 2]: alpha 1/4, 1/4 -> 1/2, 1/2; round [1, 2, 3]: alpha 1/4, 1/2, 1/4 (sum 1, kept as is)
    agg = build_aggregator("fedia", {"rho": 1.0, "beta": 1.0}, TWO_LAYERS, [0, 1, 2, 3])
    w = torch.zeros(6, dtype=torch.float64)
    w = agg.aggregate(w, torch.ones(2, 6, dtype=torch.float64), torch.ones(2), [0, 2], 1.0)
    torch.testing.assert_close(agg.alpha, torch.tensor([0.5, 0.25, 0.5, 0.25], dtype=torch.float64))
    u = torch.tensor([[4.0] * 6, [8.0] * 6, [12.0] * 6], dtype=torch.float64)
    new = agg.aggregate(w, u, torch.ones(3), [1, 2, 3], 1.0)
    torch.testing.assert_close(new, w - (0.25 * 4 + 0.5 * 8 + 0.25 * 12))


@pytest.mark.parametrize("rho", [0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0])
@pytest.mark.parametrize("kind", ["random", "zeros"])
def test_mask_keeps_exactly_ceil_rho_per_group(rho, kind):
    layout = ParamLayout(names=("a.weight", "b.weight", "c.weight", "d.weight", "e.weight"),
                         shapes=((1,), (3,), (10,), (7, 3), (100,)))
    sizes = [1, 3, 10, 21, 100]
    agg = build_aggregator("fedia", {"rho": rho}, layout, [0, 1, 2])
    gen = torch.Generator().manual_seed(2)
    u = torch.randn(3, layout.size, generator=gen) if kind == "random" else torch.zeros(3, layout.size)
    agg.aggregate(torch.zeros(layout.size), u, torch.ones(3), [0, 1, 2], 0.1)
    start = 0
    for n in sizes:
        assert int(agg.last_mask[start:start + n].sum()) == expected_kept(rho, n)
        start += n


@pytest.mark.parametrize("rho", [0.05, 0.1, 0.3, 0.7, 1.0])
def test_global_scope_keeps_ceil_rho_overall(rho):
    layout = ParamLayout(names=("a.weight", "b.weight"), shapes=((10,), (37,)))
    agg = build_aggregator("fedia", {"rho": rho, "mask_scope": "global"}, layout, [0, 1])
    u = torch.randn(2, 47, generator=torch.Generator().manual_seed(3))
    agg.aggregate(torch.zeros(47), u, torch.ones(2), [0, 1], 0.1)
    assert int(agg.last_mask.sum()) == expected_kept(rho, 47)


def test_global_scope_can_leave_a_layer_unselected_where_layer_scope_cannot():
    layout = ParamLayout(names=("a.weight", "b.weight"), shapes=((5,), (5,)))
    u = torch.tensor([[10.0, 9.0, 8.0, 7.0, 6.0, 0.1, 0.2, 0.3, 0.4, 0.5]])
    glob = build_aggregator("fedia", {"rho": 0.4, "mask_scope": "global"}, layout, [0])
    glob.aggregate(torch.zeros(10), u, torch.ones(1), [0], 1.0)
    # ceil(0.4*10)=4 largest overall: all from layer a
    assert glob.last_mask.tolist() == [True] * 4 + [False] * 6
    per_layer = build_aggregator("fedia", {"rho": 0.4}, layout, [0])
    per_layer.aggregate(torch.zeros(10), u, torch.ones(1), [0], 1.0)
    # ceil(0.4*5)=2 per layer
    assert per_layer.last_mask.tolist() == [True, True, False, False, False, False, False, False, True, True]


def test_float_rounding_does_not_add_a_coordinate():
    # 0.07 * 100 == 7.000000000000001 in floating point; the paper's budget is 7
    layout = ParamLayout(names=("a.weight",), shapes=((100,),))
    agg = build_aggregator("fedia", {"rho": 0.07}, layout, [0])
    agg.aggregate(torch.zeros(100), torch.randn(1, 100), torch.ones(1), [0], 1.0)
    assert int(agg.last_mask.sum()) == 7


def test_alpha_sums_to_one_over_participants_and_absent_clients_keep_theirs():
    layout = ParamLayout.of(build_model("mlp", 3, 2, hidden=2))
    agg = build_aggregator("fedia", {"rho": 0.3, "beta": 0.4}, layout, [0, 1, 2])
    gen = torch.Generator().manual_seed(4)
    w = torch.zeros(layout.size)
    for participants in ([0, 1, 2], [0, 2], [1], [1, 2], [0, 2]):
        before = agg.alpha.clone()
        u = torch.randn(len(participants), layout.size, generator=gen)
        w = agg.aggregate(w, u, torch.ones(len(participants)), participants, 0.1)
        assert float(agg.alpha[participants].sum()) == pytest.approx(1.0)
        absent = [c for c in range(3) if c not in participants]
        assert torch.equal(agg.alpha[absent], before[absent])


def test_partial_participation_first_round_leaves_absent_alpha_at_init():
    agg = build_aggregator("fedia", {}, TWO_LAYERS, [0, 1, 2])
    u = torch.tensor([[1.0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 5.0]])
    agg.aggregate(torch.zeros(6), u, torch.ones(2), [0, 2], 0.1)
    assert agg.alpha_of(1) == pytest.approx(1 / 3)
    assert agg.alpha_of(0) + agg.alpha_of(2) == pytest.approx(1.0)
    assert agg.alpha_of(2) > agg.alpha_of(0)  # larger masked norm, larger weight


def test_non_contiguous_client_ids():
    agg = build_aggregator("fedia", {"rho": 1.0, "beta": 0.0}, TWO_LAYERS, [3, 7, 11])
    u = torch.tensor([[0.0] * 6, [0, 0, 0, 0, 0, 1.0]])
    agg.aggregate(torch.zeros(6), u, torch.ones(2), [7, 11], 1.0)
    p = softmax([0.0, 1.0])  # beta=0: alpha = p
    assert agg.alpha_of(3) == pytest.approx(1 / 3)
    assert agg.alpha_of(7) == pytest.approx(p[0])
    assert agg.alpha_of(11) == pytest.approx(p[1])
    with pytest.raises(ValueError, match="unknown client"):
        agg.aggregate(torch.zeros(6), u, torch.ones(2), [7, 12], 1.0)


def test_deterministic_including_ties():
    layout = ParamLayout.of(build_model("mlp", 3, 2, hidden=2))
    gen = torch.Generator().manual_seed(5)
    u = torch.randint(-2, 3, (3, layout.size), generator=gen).float()  # many ties in |u|
    outs = []
    for _ in range(2):
        agg = build_aggregator("fedia", {"rho": 0.3, "beta": 0.5}, layout, [0, 1, 2])
        outs.append((agg.aggregate(torch.ones(layout.size), u, torch.ones(3), [0, 1, 2], 0.1),
                     agg.last_mask.clone(), agg.alpha.clone()))
    for a, b in zip(*outs):
        assert torch.equal(a, b)


def test_group_by_module_ranks_weight_and_bias_together():
    layout = ParamLayout.of(build_model("mlp", 3, 2, hidden=2))
    # layers.0.weight 6 (0..5), layers.0.bias 2 (6..7), layers.1.weight 4 (8..11), layers.1.bias 2 (12..13)
    assert layout.sizes == [6, 2, 4, 2]
    u = torch.tensor([[1.0, 2, 3, 4, 5, 6, 90, 80, 1, 2, 3, 4, 70, 60]])
    by_module = build_aggregator("fedia", {"rho": 0.25, "group_by": "module"}, layout, [0])
    by_module.aggregate(torch.zeros(14), u, torch.ones(1), [0], 1.0)
    # module 0 (8 coords): ceil(2)=2 -> both biases 6, 7; module 1 (6 coords): ceil(1.5)=2 -> biases 12, 13
    assert by_module.last_mask.nonzero().flatten().tolist() == [6, 7, 12, 13]
    by_tensor = build_aggregator("fedia", {"rho": 0.25}, layout, [0])
    by_tensor.aggregate(torch.zeros(14), u, torch.ones(1), [0], 1.0)
    # per tensor: ceil(1.5)=2 of weight0 -> 5, 4; ceil(.5)=1 of bias0 -> 6; ceil(1)=1 of weight1 -> 11; bias1 -> 12
    assert by_tensor.last_mask.nonzero().flatten().tolist() == [4, 5, 6, 11, 12]


def test_unselected_coordinates_do_not_move():
    agg = build_aggregator("fedia", {"rho": 0.5}, TWO_LAYERS, [0, 1])
    w = torch.arange(6.0)
    u = torch.tensor([[5.0, 1, 1, 1, 1, 5], [5.0, 1, 1, 1, 1, 5]])
    new = agg.aggregate(w, u, torch.ones(2), [0, 1], 0.1)
    # kept: 0 and (tie among 1..3 ->) 1 in fc1; 5 in fc2
    assert torch.equal(new[[2, 3, 4]], w[[2, 3, 4]])
    torch.testing.assert_close(new[[0, 1, 5]], w[[0, 1, 5]] - 0.1 * torch.tensor([5.0, 1.0, 5.0]))


def test_float32_inputs_stay_float32():
    layout = ParamLayout.of(build_model("mlp", 3, 2, hidden=2))
    agg = build_aggregator("fedia", {}, layout, [0, 1])
    new = agg.aggregate(torch.zeros(layout.size), torch.randn(2, layout.size), torch.ones(2), [0, 1], 0.1)
    assert new.dtype == torch.float32 and bool(torch.isfinite(new).all())


def test_large_scores_do_not_overflow_the_softmax():
    agg = build_aggregator("fedia", {"rho": 1.0, "beta": 0.0}, TWO_LAYERS, [0, 1])
    u = torch.stack([torch.full((6,), 1e4), torch.zeros(6)])
    new = agg.aggregate(torch.zeros(6), u, torch.ones(2), [0, 1], 1.0)
    assert bool(torch.isfinite(new).all()) and bool(torch.isfinite(agg.alpha).all())


def test_state_dict_round_trip_continues_identically():
    layout = ParamLayout.of(build_model("mlp", 3, 2, hidden=2))
    gen = torch.Generator().manual_seed(6)
    rounds = [torch.randn(3, layout.size, generator=gen) for _ in range(2)]
    first = build_aggregator("fedia", {"rho": 0.3, "beta": 0.5}, layout, [0, 1, 2])
    w = first.aggregate(torch.zeros(layout.size), rounds[0], torch.ones(3), [0, 1, 2], 0.1)
    state = first.state_dict()
    second = build_aggregator("fedia", {"rho": 0.3, "beta": 0.5}, layout, [0, 1, 2])
    second.load_state_dict(state)
    a = first.aggregate(w, rounds[1][:2], torch.ones(2), [0, 1], 0.1)
    b = second.aggregate(w, rounds[1][:2], torch.ones(2), [0, 1], 0.1)
    assert torch.equal(a, b) and torch.equal(first.alpha, second.alpha)
    other = build_aggregator("fedia", {}, layout, [0, 1])
    with pytest.raises(ValueError):
        other.load_state_dict(state)


@pytest.mark.parametrize("bad", [{"rho": 0.0}, {"rho": 1.5}, {"beta": -0.1}, {"beta": 1.1},
                                 {"mask_scope": "model"}, {"group_by": "layer"}, {"gamma": 1}])
def test_invalid_options_are_rejected(bad):
    with pytest.raises(ValidationError):
        build_aggregator("fedia", bad, TWO_LAYERS, [0])


def test_per_step_scores_divide_the_masked_norms_by_the_local_steps_and_leave_the_step_alone():
    u = torch.tensor([[3.0, 0.0, 0.0, 0.0, 4.0, 0.0],
                      [0.0, 1.0, 0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    w = torch.zeros(6, dtype=torch.float64)
    counts = torch.tensor([1.0, 1.0])
    results = {}
    for scale in ("update", "per_step"):
        agg = build_aggregator("fedia", {"rho": 1.0, "beta": 0.0, "score_scale": scale}, TWO_LAYERS, [0, 1],
                               local_steps=5)
        new = agg.aggregate(w, u, counts, [0, 1], lr=1.0)
        results[scale] = (agg.last_weights, new)
    norms = [5.0, 1.0]
    torch.testing.assert_close(results["update"][0], torch.tensor(softmax(norms), dtype=torch.float64))
    torch.testing.assert_close(results["per_step"][0], torch.tensor(softmax([n / 5 for n in norms]),
                                                                     dtype=torch.float64))
    assert results["per_step"][0].max() < results["update"][0].max()           # flatter client weights
    for scale, (alpha, new) in results.items():
        torch.testing.assert_close(new, -(alpha @ u))                            # Eq. 8 on the updates as sent


@pytest.mark.parametrize("rho", [0.01, 0.07, 0.33, 0.5, 1.0])
def test_vectorised_group_top_k_equals_a_stable_sort_per_group(rho):
    from fgl_ray.aggregators.fedia import GroupTopK, kept_count

    generator = torch.Generator().manual_seed(int(rho * 100))
    for _ in range(40):
        sizes = torch.randint(1, 40, (int(torch.randint(1, 6, (), generator=generator)),), generator=generator)
        bounds = [0, *torch.cumsum(sizes, 0).tolist()]
        groups = [slice(a, b) for a, b in zip(bounds, bounds[1:])]
        importance = torch.randint(0, 4, (bounds[-1],), generator=generator).float()   # many ties
        expected = torch.zeros(bounds[-1], dtype=torch.bool)
        for group in groups:
            order = torch.sort(importance[group], descending=True, stable=True).indices
            expected[group.start + order[:kept_count(rho, group.stop - group.start)]] = True
        assert torch.equal(GroupTopK(groups, rho)(importance), expected)


def test_blocked_column_mean_equals_the_plain_one(monkeypatch):
    from fgl_ray.aggregators import fedia

    monkeypatch.setattr(fedia, "COLUMN_BLOCK", 7)
    updates = torch.randn(5, 50, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(fedia.column_abs_mean(updates), updates.abs().mean(dim=0), atol=1e-6)
