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


def test_at_the_global_point_loss_and_gradient_equal_fedavg(make_config, make_context, broadcast_of, loss_and_grad):
    prox, ctx = make_context(make_config("fedprox", algorithm_options={"mu": 0.5}, dropout=0.0))
    avg, _ = make_context(make_config("fedavg", dropout=0.0))
    prox.receive(ctx, broadcast_of(ctx.model))
    logits = ctx.model(ctx.data.x, ctx.data.edge_index)
    got = loss_and_grad(ctx.model, prox.loss(ctx, ctx.data, logits))
    want = loss_and_grad(ctx.model, avg.loss(ctx, ctx.data, logits))
    assert torch.equal(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])


def test_away_from_the_global_point_the_term_is_half_mu_squared_distance(make_config, make_context, broadcast_of):
    mu = 0.5
    prox, ctx = make_context(make_config("fedprox", algorithm_options={"mu": mu}, dropout=0.0))
    avg, _ = make_context(make_config("fedavg", dropout=0.0))
    prox.receive(ctx, broadcast_of(ctx.model))
    global_weights = trainable_vector(ctx.model)
    moved = global_weights + 0.1 * torch.randn_like(global_weights)
    load_trainable_vector(ctx.model, moved)
    logits = ctx.model(ctx.data.x, ctx.data.edge_index)
    extra = prox.loss(ctx, ctx.data, logits) - avg.loss(ctx, ctx.data, logits)
    torch.testing.assert_close(extra, 0.5 * mu * (moved - global_weights).pow(2).sum())


def test_mu_zero_trains_exactly_like_fedavg(make_config, tiny_data, run_local):
    prox = run_local(make_config("fedprox", algorithm_options={"mu": 0.0}), tiny_data, rounds=2)
    avg = run_local(make_config("fedavg"), tiny_data, rounds=2)
    assert torch.equal(prox.global_weights(), avg.global_weights())


def test_anchor_is_the_latest_global_model_and_no_statistics_are_uploaded(make_config, tiny_data, run_local):
    backend = run_local(make_config("fedprox", algorithm_options={"mu": 0.1}), tiny_data, rounds=2)
    for client in backend.pool.clients.values():
        anchor = torch.cat([a.reshape(-1) for a in client.ctx.state["fedprox_anchor"]])
        assert torch.equal(anchor, backend.global_weights())
        assert client.algorithm.upload(client.ctx) == {}
    assert backend.server.declared == {}
