import torch

from fgl_ray.runtime.client import ClientRuntime


def test_sparse_features_give_the_same_predictions_and_leave_the_partition_dense(tiny_config, tiny_data):
    graph = tiny_data.clients[0]
    runtimes = {
        mode: ClientRuntime(graph, tiny_config(sparse_features=mode), tiny_data.num_features,
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
