import pytest
import torch

from fgl_ray.config import ConfigError
from fgl_ray.params import load_trainable_vector, trainable_vector


def test_options_default_to_openfgl_and_reject_unknown_names(make_config):
    assert make_config("fedprox").algorithm_options == {}
    from fgl_ray.algorithms import ALGORITHMS

    assert ALGORITHMS.get("fedprox").Options().mu == 1e-3
    with pytest.raises(ConfigError, match="mu"):
        make_config("fedprox", algorithm_options={"mu": -1.0})
    with pytest.raises(ConfigError):
        make_config("fedprox", algorithm_options={"lambda": 1.0})


def test_at_the_global_point_loss_and_gradient_equal_fedavg(anchor_case, broadcast_of):
    case = anchor_case("fedprox", algorithm_options={"mu": 0.5})
    case.algorithm.receive(case.ctx, broadcast_of(case.ctx.model))
    _, logits = case.forward()
    case.assert_vanishes(case.algorithm.loss(case.ctx, case.ctx.data, logits), logits)


def test_away_from_the_global_point_the_term_is_half_mu_squared_distance(anchor_case, broadcast_of):
    mu = 0.5
    case = anchor_case("fedprox", algorithm_options={"mu": mu})
    prox, ctx = case.algorithm, case.ctx
    prox.receive(ctx, broadcast_of(ctx.model))
    global_weights = trainable_vector(ctx.model)
    moved = global_weights + 0.1 * torch.randn_like(global_weights)
    load_trainable_vector(ctx.model, moved)
    _, logits = case.forward()
    extra = prox.loss(ctx, ctx.data, logits) - case.plain_loss(logits)
    torch.testing.assert_close(extra, 0.5 * mu * (moved - global_weights).pow(2).sum())


def test_mu_zero_trains_exactly_like_fedavg(make_config, tiny_data, run_local, fedavg_after):
    prox = run_local(make_config("fedprox", algorithm_options={"mu": 0.0}), tiny_data, rounds=2)
    assert torch.equal(prox.global_weights(), fedavg_after(2).global_weights())


def test_anchor_is_the_latest_global_model_and_no_statistics_are_uploaded(make_config, tiny_data, run_local):
    backend = run_local(make_config("fedprox", algorithm_options={"mu": 0.1}), tiny_data, rounds=2)
    for client in backend.host.clients.values():
        anchor = torch.cat([a.reshape(-1) for a in client.ctx.state["fedprox_anchor"]])
        assert torch.equal(anchor, backend.global_weights())
        assert client.algorithm.upload(client.ctx) == {}
    assert backend.server.declared == {}
