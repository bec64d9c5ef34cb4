import pytest
import torch

from fgl_ray.runtime.client import ClientRuntime


@pytest.mark.parametrize("model", ["gcn", "pmlp_gcn", "acm_gcn"])
def test_sparse_features_give_the_same_predictions_and_leave_the_partition_dense(tiny_config, tiny_data, model):
    graph = tiny_data.clients[0]
    runtimes = {
        mode: ClientRuntime(graph, tiny_config(sparse_features=mode, model=model), tiny_data.num_features,
                            tiny_data.num_classes)
        for mode in ("on", "off")
    }
    assert runtimes["on"].ctx.data.x.layout == torch.sparse_csr
    assert runtimes["off"].ctx.data.x.layout == torch.strided
    assert graph.data.x.layout == torch.strided
    runtimes["on"].ctx.model.load_state_dict(runtimes["off"].ctx.model.state_dict())
    logits = {mode: runtime.algorithm.predict(runtime.ctx, runtime.ctx.data) for mode, runtime in runtimes.items()}
    torch.testing.assert_close(logits["on"], logits["off"])


def test_sage_keeps_dense_features_even_when_asked_for_sparse(tiny_config, tiny_data):
    runtime = ClientRuntime(tiny_data.clients[0], tiny_config(model="sage", sparse_features="on"),
                            tiny_data.num_features, tiny_data.num_classes)
    assert runtime.ctx.data.x.layout == torch.strided


def _broadcast(runtime: ClientRuntime, round_index: int, shift: float = 0.0):
    from fgl_ray.messages import GLOBAL, Broadcast, ModelState
    from fgl_ray.params import buffer_vector, trainable_vector

    model = runtime.ctx.model
    return Broadcast(round=round_index, models={GLOBAL: ModelState(trainable_vector(model) + shift,
                                                                   buffer_vector(model))})


def _second_round_updates(config, graph, num_features, num_classes):
    """Two clients on the same data get the same round-1 broadcast after different round-0 broadcasts."""
    torch.manual_seed(0)
    first = ClientRuntime(graph, config, num_features, num_classes)
    torch.manual_seed(0)
    second = ClientRuntime(graph, config, num_features, num_classes)
    round_one = _broadcast(first, 1)
    first.train(_broadcast(first, 0))
    second.train(_broadcast(second, 0, shift=0.3))  # a different history
    return first.train(round_one).update, second.train(round_one).update


def test_reset_optimizer_state_makes_an_update_independent_of_the_previous_round(tiny_config, tiny_data):
    for optimizer in ("sgd", "adam"):
        config = tiny_config(optimizer_state="reset", optimizer=optimizer, momentum=0.9, dropout=0.0)
        a, b = _second_round_updates(config, tiny_data.clients[0], tiny_data.num_features, tiny_data.num_classes)
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_kept_optimizer_state_carries_the_previous_round_into_the_update(tiny_config, tiny_data):
    for optimizer in ("sgd", "adam"):
        config = tiny_config(optimizer_state="keep", optimizer=optimizer, momentum=0.9, dropout=0.0)
        a, b = _second_round_updates(config, tiny_data.clients[0], tiny_data.num_features, tiny_data.num_classes)
        assert (a - b).abs().max() > 1e-3


def test_local_evaluation_scores_the_locally_trained_model_not_the_broadcast(tiny_config, tiny_data):
    graph = tiny_data.clients[0]
    runtimes = {}
    for mode in ("global", "local"):
        torch.manual_seed(0)
        runtimes[mode] = ClientRuntime(graph, tiny_config(evaluate=mode), tiny_data.num_features,
                                       tiny_data.num_classes)
    start = _broadcast(runtimes["global"], 0)
    moved = _broadcast(runtimes["global"], 1, shift=0.5)  # what "the server" sends after aggregation
    for runtime in runtimes.values():
        runtime.train(start)
    trained = runtimes["local"].weights()
    runtimes["local"].evaluate(moved)
    runtimes["global"].evaluate(moved)
    torch.testing.assert_close(runtimes["local"].weights(), trained)
    torch.testing.assert_close(runtimes["global"].weights(), moved.models["global"].params)


def test_local_evaluation_before_any_training_uses_the_broadcast(tiny_config, tiny_data):
    runtime = ClientRuntime(tiny_data.clients[0], tiny_config(evaluate="local"), tiny_data.num_features,
                            tiny_data.num_classes)
    moved = _broadcast(runtime, 0, shift=0.5)
    runtime.evaluate(moved)
    torch.testing.assert_close(runtime.weights(), moved.models["global"].params)


def test_the_update_is_the_descent_direction_one_plain_sgd_step_sends_the_gradient(tiny_config, tiny_data):
    """``update = (before - after) / lr`` (the FedIA convention): after one full-batch SGD step
    without momentum or decay it is the loss gradient at the received model, and the server's step
    ``W - lr * update`` lands on the client's trained model."""
    from fgl_ray.params import shared_parameters

    lr = 0.1
    config = tiny_config(optimizer="sgd", momentum=0.0, weight_decay=0.0, dropout=0.0, local_epochs=1, lr=lr)
    runtime = ClientRuntime(tiny_data.clients[0], config, tiny_data.num_features, tiny_data.num_classes)
    broadcast = _broadcast(runtime, 0)
    ctx, task = runtime.ctx, runtime.task
    ctx.model.train()
    loss = runtime.algorithm.loss(ctx, ctx.data, task.classify(ctx.model, task.encode(ctx.model, ctx.data), ctx.data))
    gradient = torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, shared_parameters(ctx.model))])
    update = runtime.train(broadcast).update
    assert float(gradient.norm()) > 0
    torch.testing.assert_close(update, gradient, rtol=1e-3, atol=1e-5)
    torch.testing.assert_close(broadcast.models["global"].params - lr * update, runtime.weights())


class _Frozen(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0]))
        self.frozen = torch.nn.Parameter(torch.ones(2), requires_grad=False)


def _two_constant_gradient_steps(config):
    """Two optimizer steps of ``build_optimizer`` on ``loss = c . w`` (gradient ``c`` every step)."""
    from fgl_ray.runtime.client import build_optimizer

    model = _Frozen()
    optimizer = build_optimizer(config, model)
    assert [id(p) for group in optimizer.param_groups for p in group["params"]] == [id(model.w)]
    c = torch.tensor([1.0, 2.0, -3.0])
    trajectory = [model.w.detach().clone()]
    for _ in range(2):
        optimizer.zero_grad()
        (c * model.w).sum().backward()
        optimizer.step()
        trajectory.append(model.w.detach().clone())
    return c, trajectory


def test_build_optimizer_makes_sgd_with_the_configs_lr_momentum_and_weight_decay(tiny_config):
    lr, momentum, decay = 0.1, 0.7, 0.5
    c, (w0, w1, w2) = _two_constant_gradient_steps(tiny_config(optimizer="sgd", lr=lr, momentum=momentum,
                                                               weight_decay=decay))
    d1 = c + decay * w0                                       # L2 decay enters the gradient
    torch.testing.assert_close(w1, w0 - lr * d1)              # the momentum buffer starts at d1
    torch.testing.assert_close(w2, w1 - lr * (momentum * d1 + c + decay * w1))


def test_build_optimizer_makes_adam_with_the_configs_lr_and_coupled_weight_decay(tiny_config):
    lr, decay, (b1, b2), eps = 0.1, 0.5, (0.9, 0.999), 1e-8   # torch's default betas and eps
    c, (w0, w1, w2) = _two_constant_gradient_steps(tiny_config(optimizer="adam", lr=lr, weight_decay=decay))
    m = v = torch.zeros(3)
    w = w0
    for t, expected in ((1, w1), (2, w2)):                    # Kingma & Ba, Algorithm 1, with L2 in the gradient
        d = c + decay * w
        m, v = b1 * m + (1 - b1) * d, b2 * v + (1 - b2) * d * d
        w = w - lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps)
        torch.testing.assert_close(expected, w)
