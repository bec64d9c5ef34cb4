"""FedAdagrad / FedYogi / FedAdam (Reddi et al., 2021) against hand-computed steps."""

import math

import pytest
import torch
from pydantic import ValidationError

from fgl_ray.aggregators import build_aggregator
from fgl_ray.params import ParamLayout

LAYOUT = ParamLayout(names=("fc.weight", "fc.bias"), shapes=((1,), (1,)))
ETA, B1, B2, TAU = 0.5, 0.9, 0.99, 1e-3
OPTIONS = {"server_lr": ETA, "beta1": B1, "beta2": B2, "tau": TAU}


def sign(x):
    return (x > 0) - (x < 0)


def second_moment(rule, v, d):
    if rule == "fedadagrad":
        return v + d * d
    if rule == "fedyogi":
        return v - (1 - B2) * d * d * sign(v - d * d)
    return B2 * v + (1 - B2) * d * d


@pytest.mark.parametrize("rule", ["fedadagrad", "fedyogi", "fedadam"])
def test_two_single_client_steps_match_hand_computation(rule):
    lr = 0.1
    agg = build_aggregator(rule, OPTIONS, LAYOUT, [0])
    w = [1.0, -1.0]
    m = [0.0, 0.0]
    v = [TAU ** 2, TAU ** 2]
    weights = torch.tensor(w, dtype=torch.float64)
    for u in ([-1.0, 2.0], [3.0, 0.5]):
        for i in range(2):
            delta = -lr * u[i]  # one client: Delta = W_k - W = -lr * u
            m[i] = B1 * m[i] + (1 - B1) * delta
            v[i] = second_moment(rule, v[i], delta)
            w[i] = w[i] + ETA * m[i] / (math.sqrt(v[i]) + TAU)
        weights = agg.aggregate(weights, torch.tensor([u], dtype=torch.float64), torch.tensor([7.0]), [0], lr)
        torch.testing.assert_close(weights, torch.tensor(w, dtype=torch.float64))
        torch.testing.assert_close(agg.m, torch.tensor(m, dtype=torch.float64))
        torch.testing.assert_close(agg.v, torch.tensor(v, dtype=torch.float64))


def test_first_adam_step_by_hand_numbers():
    # Delta = -0.1 * -1 = 0.1; m = 0.1 * 0.1 = 0.01; v = 0.99e-6 + 0.01 * 0.01 = 1.0099e-4
    agg = build_aggregator("fedadam", OPTIONS, ParamLayout(names=("w",), shapes=((1,),)), [0])
    new = agg.aggregate(torch.tensor([0.0], dtype=torch.float64), torch.tensor([[-1.0]], dtype=torch.float64),
                        torch.tensor([1.0]), [0], 0.1)
    assert float(new) == pytest.approx(0.5 * 0.01 / (math.sqrt(1.0099e-4) + 1e-3))


def test_pseudo_gradient_is_sample_weighted_model_change():
    lr = 0.2
    w = torch.tensor([0.0, 0.0], dtype=torch.float64)
    client_models = torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=torch.float64)
    updates = -(client_models - w) / lr
    agg = build_aggregator("fedadam", OPTIONS, LAYOUT, [0, 1])
    new = agg.aggregate(w, updates, torch.tensor([1.0, 3.0]), [0, 1], lr)
    delta = [0.25 * 1.0, 0.75 * 2.0]
    expected = []
    for d in delta:
        m = (1 - B1) * d
        v = B2 * TAU ** 2 + (1 - B2) * d * d
        expected.append(ETA * m / (math.sqrt(v) + TAU))
    torch.testing.assert_close(new, torch.tensor(expected, dtype=torch.float64))


@pytest.mark.parametrize("rule", ["fedadagrad", "fedyogi", "fedadam"])
def test_positive_pseudo_gradient_increases_weights(rule):
    agg = build_aggregator(rule, {}, LAYOUT, [0, 1])
    w = torch.zeros(2)
    for _ in range(3):
        # u < 0 means the clients moved their weights up: Delta > 0
        new = agg.aggregate(w, -torch.rand(2, 2) - 0.1, torch.ones(2), [0, 1], 0.05)
        assert bool((new > w).all())
        w = new
    assert w.dtype == torch.float32


def test_adagrad_second_moment_never_decreases():
    layout = ParamLayout(names=("w",), shapes=((20,),))
    agg = build_aggregator("fedadagrad", {}, layout, [0, 1, 2])
    gen = torch.Generator().manual_seed(0)
    w = torch.zeros(20)
    previous = agg.v.clone()
    for _ in range(10):
        w = agg.aggregate(w, torch.randn(3, 20, generator=gen), torch.rand(3, generator=gen), [0, 1, 2], 0.1)
        assert bool((agg.v >= previous).all())
        previous = agg.v.clone()


def test_initial_v_defaults_to_tau_squared_and_must_not_be_smaller():
    agg = build_aggregator("fedyogi", {"tau": 0.01}, LAYOUT, [0])
    torch.testing.assert_close(agg.v, torch.full((2,), 1e-4, dtype=torch.float64))
    agg = build_aggregator("fedyogi", {"tau": 0.01, "initial_v": 0.5}, LAYOUT, [0])
    torch.testing.assert_close(agg.v, torch.full((2,), 0.5, dtype=torch.float64))
    with pytest.raises(ValidationError, match="initial_v"):
        build_aggregator("fedyogi", {"tau": 0.01, "initial_v": 1e-5}, LAYOUT, [0])


@pytest.mark.parametrize("bad", [{"server_lr": 0.0}, {"beta1": 1.0}, {"beta2": -0.1}, {"tau": 0.0}, {"eta": 1}])
def test_invalid_options_are_rejected(bad):
    with pytest.raises(ValidationError):
        build_aggregator("fedadam", bad, LAYOUT, [0])


def test_state_dict_round_trip_continues_identically():
    gen = torch.Generator().manual_seed(1)
    rounds = [torch.randn(2, 2, generator=gen, dtype=torch.float64) for _ in range(2)]
    first = build_aggregator("fedyogi", OPTIONS, LAYOUT, [0, 1])
    w = first.aggregate(torch.zeros(2, dtype=torch.float64), rounds[0], torch.ones(2), [0, 1], 0.1)
    second = build_aggregator("fedyogi", OPTIONS, LAYOUT, [0, 1])
    second.load_state_dict(first.state_dict())
    assert second.steps == 1
    a = first.aggregate(w, rounds[1], torch.ones(2), [0, 1], 0.1)
    b = second.aggregate(w, rounds[1], torch.ones(2), [0, 1], 0.1)
    assert torch.equal(a, b)
