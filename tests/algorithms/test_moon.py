import math

import torch

from fgl_ray.algorithms import ALGORITHMS
from fgl_ray.algorithms.moon import model_contrastive_loss
from fgl_ray.params import trainable_vector


def _cos(a, b):
    return (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1))


def test_defaults_are_openfgl():
    options = ALGORITHMS.get("moon").Options()
    assert (options.mu, options.temperature) == (1.0, 0.5)


def test_contrastive_loss_matches_its_definition():
    torch.manual_seed(0)
    z, z_glob, z_prev = torch.randn(3, 5, 4).unbind(0)
    tau = 0.5
    pos, neg = torch.exp(_cos(z, z_glob) / tau), torch.exp(_cos(z, z_prev) / tau)
    expected = (-torch.log(pos / (pos + neg))).mean()
    torch.testing.assert_close(model_contrastive_loss(z, z_glob, z_prev, tau), expected)


def test_without_a_previous_model_the_term_vanishes_and_global_as_negative_has_no_gradient():
    torch.manual_seed(0)
    z = torch.randn(5, 4, requires_grad=True)
    z_glob = torch.randn(5, 4)
    assert model_contrastive_loss(z, z_glob, None, 0.5).item() == 0.0
    same = model_contrastive_loss(z, z_glob, z_glob, 0.5)
    torch.testing.assert_close(same, torch.tensor(math.log(2.0)))
    (grad,) = torch.autograd.grad(same, z)
    torch.testing.assert_close(grad, torch.zeros_like(grad))


def test_mu_zero_equals_cross_entropy_when_a_previous_model_exists(anchor_case, broadcast_of):
    case = anchor_case("moon", algorithm_options={"mu": 0.0})
    moon, ctx = case.algorithm, case.ctx
    moon.receive(ctx, broadcast_of(ctx.model))
    moon.local_train(ctx)                      # creates the previous local model
    z_glob, z_prev = moon._targets(ctx, ctx.data)
    assert z_prev is not None
    z, logits = case.forward()
    plain = case.assert_vanishes(moon_objective(moon, ctx, z, logits, (z_glob, z_prev)), logits)
    moon.options = moon.Options(mu=1.0)
    assert moon_objective(moon, ctx, z, logits, (z_glob, z_prev)) > plain


def test_mu_zero_trains_exactly_like_fedavg(make_config, tiny_data, run_local, fedavg_after):
    moon = run_local(make_config("moon", algorithm_options={"mu": 0.0}), tiny_data, rounds=3)
    assert torch.equal(moon.global_weights(), fedavg_after(3).global_weights())


def test_first_round_is_plain_cross_entropy_then_the_negative_term_acts(make_config, tiny_data, run_local,
                                                                        fedavg_after):
    moon = run_local(make_config("moon"), tiny_data, rounds=1)
    avg = fedavg_after(1)
    assert torch.equal(moon.global_weights(), avg.global_weights())
    moon.run_round(1)
    avg.run_round(1)
    assert not torch.equal(moon.global_weights(), avg.global_weights())


def test_previous_local_model_persists_across_rounds(make_config, make_client, ring_graph, broadcast_of):
    client = make_client(make_config("moon"), ring_graph(0))
    state = client.ctx.state
    global_copy, previous_copy = state["moon_global_model"], state["moon_previous_model"]
    assert not state["moon_has_previous"]

    first = broadcast_of(client.ctx.model, round_index=0)
    received = first.models["global"].params.clone()
    update = client.train(first)
    assert update.stats == {}
    assert torch.equal(trainable_vector(global_copy), received)   # training never moves the global copy
    trained = client.weights()
    assert state["moon_has_previous"] and torch.equal(trainable_vector(previous_copy), trained)

    second = broadcast_of(client.ctx.model, round_index=1)
    second.models["global"].params.add_(0.01)     # a different global model
    client.evaluate(second)                        # receive() alone leaves the previous model alone
    assert torch.equal(trainable_vector(previous_copy), trained)
    assert torch.equal(trainable_vector(global_copy), second.models["global"].params)

    client.train(second)
    assert not torch.equal(trainable_vector(previous_copy), trained)
    assert torch.equal(trainable_vector(previous_copy), client.weights())
    assert state["moon_global_model"] is global_copy and state["moon_previous_model"] is previous_copy


def test_runs_on_pmlp_whose_phases_differ(make_config, tiny_data, run_local):
    backend = run_local(make_config("moon", model="pmlp_gcn"), tiny_data, rounds=2)
    assert all(c.ctx.state["moon_has_previous"] for c in backend.host.clients.values())


def moon_objective(moon, ctx, z, logits, targets):
    """MOON's objective with the round's targets set, as ``local_train`` sets them."""
    ctx.state["moon_targets"] = (ctx.data, targets)
    return moon.objective(ctx, ctx.data, z, logits)
