import pytest
import torch

from fgl_ray.algorithms import ALGORITHMS
from fgl_ray.algorithms.feddyn import server_correction
from fgl_ray.config import ConfigError
from fgl_ray.messages import GLOBAL, ClientUpdate
from fgl_ray.params import trainable_vector


def test_defaults_and_alpha_must_be_positive(make_config):
    assert ALGORITHMS.get("feddyn").Options().alpha == 0.01
    with pytest.raises(ConfigError, match="alpha"):
        make_config("feddyn", algorithm_options={"alpha": 0.0})


def test_server_correction_by_hand():
    h = torch.tensor([1.0, -2.0, 0.5])
    drifts = torch.tensor([[0.2, 0.4, -0.6], [1.0, 0.0, 2.0]])
    alpha, m = 0.1, 4
    expected = torch.tensor([1.0 - alpha / m * (0.2 + 1.0), -2.0 - alpha / m * (0.4 + 0.0),
                             0.5 - alpha / m * (-0.6 + 2.0)])
    torch.testing.assert_close(server_correction(h, drifts, m, alpha), expected)


def _update(client_id, num_samples, theta, client_model, lr):
    return ClientUpdate(client_id=client_id, model_key=GLOBAL, num_samples=num_samples,
                        update=-(client_model - theta) / lr, buffers=torch.zeros(0))


def test_server_keeps_h_and_corrects_the_aggregated_model(make_config, tiny_data):
    from fgl_ray.runtime.local_backend import LocalBackend

    alpha, lr = 0.1, 0.05
    server = LocalBackend(make_config("feddyn", algorithm_options={"alpha": alpha}, lr=lr), tiny_data).server
    m = len(server.client_ids)
    theta = server.models[GLOBAL].params.clone()
    gen = torch.Generator().manual_seed(0)
    d1, d2 = (0.1 * torch.randn(theta.shape, generator=gen) for _ in range(2))
    server.algorithm.aggregate(server, [_update(0, 10, theta, theta + d1, lr), _update(2, 30, theta, theta + d2, lr)])
    h1 = -alpha / m * (d1 + d2)
    averaged = (10 * (theta + d1) + 30 * (theta + d2)) / 40          # the default sample-weighted mean
    torch.testing.assert_close(server.algorithm.h[GLOBAL], h1)
    torch.testing.assert_close(server.models[GLOBAL].params, averaged - h1 / alpha)

    theta2 = server.models[GLOBAL].params.clone()
    d3 = 0.1 * torch.randn(theta.shape, generator=gen)
    server.algorithm.aggregate(server, [_update(1, 5, theta2, theta2 + d3, lr)])
    h2 = h1 - alpha / m * d3
    torch.testing.assert_close(server.algorithm.h[GLOBAL], h2)
    torch.testing.assert_close(server.models[GLOBAL].params, theta2 + d3 - h2 / alpha)


def test_extra_terms_vanish_at_round_zero(anchor_case, broadcast_of):
    case = anchor_case("feddyn", algorithm_options={"alpha": 0.5})
    ctx = case.ctx
    assert torch.equal(ctx.state["feddyn_grad"], torch.zeros_like(trainable_vector(ctx.model)))
    case.algorithm.receive(ctx, broadcast_of(ctx.model))
    _, logits = case.forward()
    case.assert_vanishes(case.algorithm.loss(ctx, ctx.data, logits), logits)


def test_client_gradient_state_follows_the_update_rule_across_rounds(make_config, make_client, ring_graph,
                                                                     broadcast_of):
    alpha = 0.5
    client = make_client(make_config("feddyn", algorithm_options={"alpha": alpha}), ring_graph(1))
    algorithm, ctx = client.algorithm, client.ctx
    grads = [ctx.state["feddyn_grad"].clone()]
    broadcast = broadcast_of(ctx.model, round_index=0)
    for round_index in range(2):
        anchor = broadcast.models[GLOBAL].params.clone()
        update = client.train(broadcast)
        assert update.stats == {}
        expected = grads[-1] - alpha * (client.weights() - anchor)
        torch.testing.assert_close(ctx.state["feddyn_grad"], expected)
        grads.append(ctx.state["feddyn_grad"].clone())
        broadcast = broadcast_of(ctx.model, round_index=round_index + 1)
    assert not torch.equal(grads[1], grads[2])

    algorithm.receive(ctx, broadcast)            # at the anchor only the linear term remains
    ctx.model.eval()
    logits = ctx.model(ctx.data.x, ctx.data.edge_index)
    extra = algorithm.loss(ctx, ctx.data, logits) - ALGORITHMS.get("fedavg").loss(algorithm, ctx, ctx.data, logits)
    torch.testing.assert_close(extra, -torch.dot(grads[-1], trainable_vector(ctx.model)))


def test_two_rounds_on_the_local_backend_fill_server_and_client_state(make_config, tiny_data, run_local):
    backend = run_local(make_config("feddyn"), tiny_data, rounds=2)
    assert backend.server.algorithm.h[GLOBAL].abs().sum() > 0
    for client in backend.host.clients.values():
        assert client.ctx.state["feddyn_grad"].abs().sum() > 0


def test_composes_with_another_aggregator(make_config, tiny_data, run_local):
    alpha = 0.1
    backend = run_local(make_config("feddyn", algorithm_options={"alpha": alpha}, aggregator="fedia"), tiny_data,
                        rounds=1)
    server = backend.server
    produced = []
    aggregate = server.aggregator.aggregate

    def recording(*args, **kwargs):
        produced.append(aggregate(*args, **kwargs))
        return produced[-1]

    server.aggregator.aggregate = recording
    backend.run_round(1)
    torch.testing.assert_close(server.models[GLOBAL].params, produced[-1] - server.algorithm.h[GLOBAL] / alpha)
