"""FedSPA: the edge-typed ACM-GCN backbone, the clients' statistics, the bias-driven aggregation."""

import math

import pytest
import torch
import torch.nn.functional as F

from fgl_ray.algorithms.fedspa import bias_weights, high_frequency_energy
from fgl_ray.messages import GLOBAL, ClientUpdate
from fgl_ray.models import build_model
from fgl_ray.models.acm import (
    ATTENTION_GROUPS,
    HETERO,
    HOMO,
    UNKNOWN,
    ACMLayer,
    TypedGraph,
    attention_group,
    label_edge_types,
)
from fgl_ray.runtime.local_backend import LocalBackend

from .conftest import NUM_CLASSES, NUM_FEATURES


def small_graph():
    """Six nodes, directed edges with a duplicate and a self-loop; nodes 0-3 labelled."""
    edge_index = torch.tensor([[0, 1, 2, 3, 1, 4, 5, 0, 2, 2], [1, 0, 3, 0, 2, 1, 4, 5, 3, 2]])
    y = torch.tensor([0, 0, 1, 1, 2, 0])
    known = torch.tensor([True, True, True, True, False, False])
    return edge_index, y, known


def test_edge_types_follow_the_labels_of_known_nodes():
    edge_index, y, known = small_graph()
    expected = []
    for s, t in edge_index.T.tolist():
        if known[s] and known[t]:
            expected.append(HOMO if y[s] == y[t] else HETERO)
        else:
            expected.append(UNKNOWN)
    assert label_edge_types(edge_index, y, known).tolist() == expected
    assert set(expected) == {HOMO, HETERO, UNKNOWN}


def test_a_layer_equals_its_dense_recomputation():
    torch.manual_seed(0)
    edge_index, y, known = small_graph()
    types = label_edge_types(edge_index, y, known)
    n, layer = 6, ACMLayer(4, 3)
    x = torch.randn(n, 4)
    a, typed = torch.eye(n), torch.zeros(3, n, n)
    for (s, t), kind in zip(edge_index.T.tolist(), types.tolist()):
        a[t, s] += 1.0                       # messages flow source -> target
        typed[kind, t, s] += 1.0
    a_hat = a / a.sum(1, keepdim=True)
    low = F.relu(a_hat @ x @ layer.weight_low)
    high = F.relu((torch.eye(n) - a_hat) @ x @ layer.weight_high)
    mlp = F.relu(x @ layer.weight_mlp)
    (low_homo, low_het, low_unk), (high_homo, high_het, high_unk) = typed @ low, typed @ high
    g_low, g_high = torch.sigmoid(layer.gate(low_unk)), torch.sigmoid(layer.gate(high_unk))
    scores = torch.cat([low_het @ layer.att_hetero_low, high_het @ layer.att_hetero_high,
                        low_homo @ layer.att_homo_low, high_homo @ layer.att_homo_high,
                        g_low * (low_unk @ layer.att_hetero_low) + (1 - g_low) * (low_unk @ layer.att_homo_low),
                        g_high * (high_unk @ layer.att_hetero_high) + (1 - g_high) * (high_unk @ layer.att_homo_high),
                        mlp @ layer.att_mlp], dim=1)
    alpha = torch.softmax(torch.sigmoid(scores) @ layer.mixer / 7, dim=1)
    channels = [low_het, high_het, low_homo, high_homo, low_unk, high_unk, mlp]
    expected = 7 * sum(alpha[:, c:c + 1] * channel for c, channel in enumerate(channels))
    torch.testing.assert_close(layer(x, TypedGraph(edge_index, types, n)), expected)
    assert all(float(channel.detach().abs().sum()) > 0 for channel in channels)


def test_normalised_typed_sums_divide_by_the_degree_and_add_up_to_the_low_pass_neighbour_part():
    torch.manual_seed(0)
    edge_index, y, known = small_graph()
    types = label_edge_types(edge_index, y, known)
    h = torch.randn(6, 3)
    summed = TypedGraph(edge_index, types, 6).typed_sums(h)
    graph = TypedGraph(edge_index, types, 6, normalised=True)
    normalised = graph.typed_sums(h)
    in_degree = 1 + torch.bincount(edge_index[1], minlength=6).float().unsqueeze(1)      # self-looped
    for total, mean in zip(summed, normalised):
        torch.testing.assert_close(mean, total / in_degree)
    torch.testing.assert_close(sum(normalised) + h / in_degree, graph.low_pass(h))
    model = build_model("acm_gcn", 4, NUM_CLASSES, hidden=5, typed_aggregation="normalised")
    assert model.typed_graph(edge_index, 6).normalised


def test_edge_types_stay_with_their_tensor_and_other_graphs_are_all_unknown():
    torch.manual_seed(1)
    edge_index, y, known = small_graph()
    model = build_model("acm_gcn", 4, NUM_CLASSES, hidden=5, dropout=0.0)
    x = torch.randn(6, 4)
    untyped = model(x, edge_index)
    model.set_edge_types(edge_index, label_edge_types(edge_index, y, known))
    typed = model(x, edge_index)
    assert not torch.allclose(typed, untyped)
    copy = edge_index.clone()
    torch.testing.assert_close(model(x, copy), untyped)
    assert [s.numel() for s, _ in model.typed_graph(copy, 6).typed] == [0, 0, edge_index.shape[1]]
    torch.testing.assert_close(model(x, edge_index), typed)        # the registration outlives the other graph


def test_gradients_reach_every_parameter_of_the_decoupled_model(make_config, make_context):
    _, ctx = make_context(make_config("fedspa"))
    data = ctx.data
    ctx.model.train()
    loss = F.cross_entropy(ctx.model(data.x, data.edge_index)[data.train_mask], data.y[data.train_mask])
    loss.backward()
    missing = [name for name, p in ctx.model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert missing == []


def test_energy_is_the_mean_rayleigh_quotient_of_the_dense_laplacian():
    torch.manual_seed(2)
    edge_index, _, _ = small_graph()
    x = torch.randn(6, 10).double()
    x[:, 3] = 0.0                                         # a zero column is skipped
    columns = torch.randperm(10, generator=torch.Generator().manual_seed(7))[:5]
    a = torch.zeros(6, 6, dtype=torch.float64)
    a[edge_index[0], edge_index[1]] = 1.0                 # the duplicate edge counts once
    laplacian = torch.diag(a.sum(1)) - a
    quotients = [x[:, k] @ laplacian @ x[:, k] / (x[:, k] @ x[:, k]) for k in columns.tolist() if k != 3]
    got = high_frequency_energy(x, edge_index, 0.5, torch.Generator().manual_seed(7))
    torch.testing.assert_close(got, torch.stack(quotients).mean())
    assert float(high_frequency_energy(torch.zeros(6, 4), edge_index, 1.0, torch.Generator())) == 0.0


def test_fisher_is_the_squared_gradient_of_the_mean_log_likelihood(make_config, make_context):
    for nodes in ("train", "all"):
        algorithm, ctx = make_context(make_config("fedspa", algorithm_options={"fisher_nodes": nodes}))
        data, model = ctx.data, ctx.model
        fisher = algorithm.fisher(ctx)
        mask = data.train_mask if nodes == "train" else torch.ones_like(data.train_mask)
        model.zero_grad()
        log_probs = F.log_softmax(model(data.x, data.edge_index), dim=1)
        log_probs[mask, data.y[mask]].mean().backward()
        for group in ATTENTION_GROUPS:
            expected = torch.cat([p.grad.reshape(-1) ** 2 for n, p in model.named_parameters()
                                  if attention_group(n) == group])
            torch.testing.assert_close(fisher[group], expected)
            assert float(expected.sum()) > 0


def test_uploaded_statistics_have_declared_shapes_whatever_the_node_count(make_config, uploads_by_size):
    config = make_config("fedspa")
    shapes = {tuple((k, tuple(v.shape)) for k, v in sorted(stats.items())) for stats in uploads_by_size(config)}
    size = 2 * (config.hidden + NUM_CLASSES)
    assert shapes == {(("energy", (1,)), ("fisher_hetero", (size,)), ("fisher_homo", (size,)))}


def _server(make_config, tiny_data, **changes):
    return LocalBackend(make_config("fedspa", **changes), tiny_data).server


def _hand_updates(server, energies, fishers, counts=(10, 10, 10)):
    """Client ``k`` trained the global model to ``W + (k + 1)``; both attention groups get ``fishers[k]``."""
    lr, size = server.config.lr, server.layout.size
    width = server.algorithm.declared_stats(NUM_CLASSES, server.config.hidden, NUM_FEATURES)["fisher_homo"][0]
    return [ClientUpdate(k, GLOBAL, counts[k], -(k + 1) * torch.ones(size) / lr, server.models[GLOBAL].buffers,
                         {"energy": torch.tensor([e], dtype=torch.float64),
                          **{f"fisher_{g}": torch.full((width,), f) for g in ATTENTION_GROUPS}})
            for k, (e, f) in enumerate(zip(energies, fishers))]


def _softmin(values):
    """``exp(-minmax(v))`` normalised, written out."""
    low, high = min(values), max(values)
    raw = [math.exp(-(v - low) / (high - low)) for v in values]
    return torch.tensor([r / sum(raw) for r in raw], dtype=torch.float64)


def test_attention_tensors_follow_the_fisher_and_the_others_the_homophily_bias(make_config, tiny_data):
    for bias, differences in (("deviation", [4 / 3, 1 / 3, 5 / 3]), ("energy", [1.0, 2.0, 4.0])):
        server = _server(make_config, tiny_data, algorithm_options={"bias": bias})
        base = server.models[GLOBAL].params.clone()
        # energies 1, 2, 4 (mean 7/3); Fisher values 0, 1, 5 (mean 2): distances 2, 1, 3 per entry
        server.algorithm.aggregate(server, _hand_updates(server, [1.0, 2.0, 4.0], [0.0, 1.0, 5.0]))
        steps = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
        other, attention = float(_softmin(differences) @ steps), float(_softmin([2.0, 1.0, 3.0]) @ steps)
        params = server.models[GLOBAL].params
        for name, part in server.layout.slices().items():
            expected = attention if attention_group(name) else other
            torch.testing.assert_close(params[part], base[part] + expected, msg=name)
        recorded = torch.tensor([server.aggregation_weights[k] for k in range(3)], dtype=torch.float64)
        torch.testing.assert_close(recorded, _softmin(differences))


def test_equal_statistics_give_the_plain_mean_as_fedavg_does_with_equal_counts(make_config, tiny_data):
    server = _server(make_config, tiny_data)
    fedavg = LocalBackend(make_config("fedavg", model="acm_gcn"), tiny_data).server
    torch.testing.assert_close(server.models[GLOBAL].params, fedavg.models[GLOBAL].params)
    updates = _hand_updates(server, [3.0, 3.0, 3.0], [0.5, 0.5, 0.5])
    for update in updates:
        update.update = update.update * torch.linspace(-1, 2, update.update.numel())
    server.algorithm.aggregate(server, updates)
    fedavg.algorithm.aggregate(fedavg, updates)
    torch.testing.assert_close(server.models[GLOBAL].params, fedavg.models[GLOBAL].params)
    assert torch.equal(bias_weights(torch.zeros(3, dtype=torch.float64)), torch.full((3,), 1 / 3, dtype=torch.float64))


def test_without_hbda_and_decoupling_a_run_is_fedavg_with_the_same_backbone(make_config, tiny_data, run_local):
    fedavg = run_local(make_config("fedavg", model="acm_gcn"), tiny_data, 3).server
    ablated = run_local(make_config("fedspa", algorithm_options={"aggregation": "samples", "decouple": False}),
                        tiny_data, 3).server
    torch.testing.assert_close(ablated.models[GLOBAL].params, fedavg.models[GLOBAL].params)
    decoupled = run_local(make_config("fedspa", algorithm_options={"aggregation": "samples"}), tiny_data, 3).server
    assert not torch.allclose(decoupled.models[GLOBAL].params, fedavg.models[GLOBAL].params)
    full = run_local(make_config("fedspa"), tiny_data, 3).server
    assert not torch.allclose(full.models[GLOBAL].params, decoupled.models[GLOBAL].params)


def test_another_aggregator_replaces_hbda_and_clients_skip_the_statistics(make_config, make_context, tiny_data):
    algorithm, ctx = make_context(make_config("fedspa", aggregator="fedia"))
    assert algorithm.upload(ctx) == {}
    server = _server(make_config, tiny_data, aggregator="fedia")
    reference = LocalBackend(make_config("fedavg", model="acm_gcn", aggregator="fedia"), tiny_data).server
    updates = [ClientUpdate(k, GLOBAL, 10 + k, torch.randn(server.layout.size), server.models[GLOBAL].buffers)
               for k in range(3)]
    server.algorithm.aggregate(server, updates)
    reference.algorithm.aggregate(reference, updates)
    torch.testing.assert_close(server.models[GLOBAL].params, reference.models[GLOBAL].params)
    assert server.aggregation_weights == reference.aggregation_weights and server.aggregation_weights


def test_the_backbone_defaults_to_acm_gcn_and_another_is_refused(make_config):
    assert make_config("fedspa").model == "acm_gcn"
    with pytest.raises(ValueError, match="needs the model acm_gcn"):
        make_config("fedspa", model="gcn")
