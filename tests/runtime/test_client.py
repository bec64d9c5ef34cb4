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
    logits = {mode: runtime.algorithm.predict(runtime.ctx) for mode, runtime in runtimes.items()}
    torch.testing.assert_close(logits["on"], logits["off"])


def test_sage_keeps_dense_features_even_when_asked_for_sparse(tiny_config, tiny_data):
    runtime = ClientRuntime(tiny_data.clients[0], tiny_config(model="sage", sparse_features="on"),
                            tiny_data.num_features, tiny_data.num_classes)
    assert runtime.ctx.data.x.layout == torch.strided
