"""FedEPD's client and server hooks on the tiny federation (no Ray)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from fgl_ray.algorithms.fedepd_graph import logit_margins, purify_edges, select_elites
from fgl_ray.messages import ClientUpdate, check_update

from .conftest import HIDDEN, NUM_CLASSES, NUM_FEATURES


def prototype_stats(seed: int = 7, present=(True, True, True)):
    gen = torch.Generator().manual_seed(seed)
    return {"prototypes": torch.randn(NUM_CLASSES, HIDDEN, generator=gen), "present": torch.tensor(present)}


def params_of(module):
    return [p.detach().clone() for p in module.parameters()]


def test_setup_caches_the_purified_graph_elites_and_margins(make_config, make_context, ring_graph):
    graph = ring_graph(0)
    algorithm, ctx = make_context(make_config("fedepd", algorithm_options={"rho": 0.25}), graph)
    data = graph.data
    purified = purify_edges(data.x, data.edge_index)
    assert torch.equal(ctx.state["edge_index"], purified.edge_index)
    assert torch.equal(ctx.state["elites"], select_elites(data.edge_index, data.y, data.train_mask, NUM_CLASSES, 0.25))
    counts = torch.bincount(data.y[data.train_mask], minlength=NUM_CLASSES)
    assert torch.equal(ctx.state["class_counts"], counts)
    assert torch.allclose(ctx.state["delta"], logit_margins(counts, ctx.state["homophily"], 1.0).float())


def test_ablating_purification_keeps_the_original_graph(make_config, make_context, ring_graph):
    graph = ring_graph(0)
    _, ctx = make_context(make_config("fedepd", algorithm_options={"purification": False}), graph)
    assert torch.equal(ctx.state["edge_index"], graph.data.edge_index)


def test_upload_holds_only_class_sums_and_counts_over_the_elites(make_config, make_context, ring_graph):
    config = make_config("fedepd", algorithm_options={"rho": 0.5})
    algorithm, ctx = make_context(config, ring_graph(0))
    declared = algorithm.declared_stats(NUM_CLASSES, HIDDEN, NUM_FEATURES)
    assert declared == {"elite_sums": (NUM_CLASSES, HIDDEN), "elite_counts": (NUM_CLASSES,)}
    stats = algorithm.upload(ctx)
    assert {k: tuple(v.shape) for k, v in stats.items()} == declared       # nothing node-level
    data = ctx.data
    train_counts = torch.bincount(data.y[data.train_mask], minlength=NUM_CLASSES).tolist()
    assert stats["elite_counts"].tolist() == [max(1, math.floor(0.5 * n)) for n in train_counts]
    ctx.model.eval()
    with torch.no_grad():
        h = ctx.model.encode(data.x, ctx.state["edge_index"])
    elites = ctx.state["elites"]
    for c in range(NUM_CLASSES):
        assert torch.allclose(stats["elite_sums"][c], h[elites & (data.y == c)].sum(0), atol=1e-6)
    update = ClientUpdate(client_id=0, model_key="global", num_samples=1, update=torch.zeros(3),
                          buffers=torch.zeros(0), stats=stats)
    check_update(update, 3, 0, declared)


def test_the_consensus_ablation_uploads_nothing(make_config, make_context):
    algorithm, ctx = make_context(make_config("fedepd", algorithm_options={"consensus": False}))
    assert algorithm.declared_stats(NUM_CLASSES, HIDDEN, NUM_FEATURES) == {} and algorithm.upload(ctx) == {}


def test_server_prototypes_are_sums_over_counts_of_the_clients_that_have_the_class(make_config):
    from types import SimpleNamespace

    from fgl_ray.algorithms import build_algorithm

    config = make_config("fedepd")
    algorithm = build_algorithm("fedepd", {}, config)
    server = SimpleNamespace(num_classes=NUM_CLASSES, aggregate_with_aggregator=lambda updates: None)
    algorithm.setup_server(server)
    assert algorithm.server_stats(server) == {}                              # P^0 is empty
    gen = torch.Generator().manual_seed(0)
    sums = [torch.randn(NUM_CLASSES, HIDDEN, generator=gen) for _ in range(3)]
    counts = [torch.tensor([2.0, 1.0, 3.0]), torch.tensor([1.0, 4.0, 1.0]), torch.tensor([0.0, 2.0, 0.0])]
    sums[2][0] = 100.0                                                      # a client without class 0 ...
    sums[2][2] = 0.0                                                        # ... or class 2
    updates = [ClientUpdate(client_id=k, model_key="global", num_samples=10, update=torch.zeros(1),
                            buffers=torch.zeros(0), stats={"elite_sums": s, "elite_counts": m})
               for k, (s, m) in enumerate(zip(sums, counts))]
    algorithm.aggregate(server, updates)
    stats = algorithm.server_stats(server)
    assert stats["present"].tolist() == [True, True, True]
    assert torch.allclose(stats["prototypes"][0], (sums[0][0] + sums[1][0]) / 3)
    assert torch.allclose(stats["prototypes"][1], (sums[0][1] + sums[1][1] + sums[2][1]) / 7)
    assert torch.allclose(stats["prototypes"][2], (sums[0][2] + sums[1][2]) / 4)
    # a class no participant holds next round keeps its prototype
    previous = stats["prototypes"].clone()
    only = ClientUpdate(client_id=2, model_key="global", num_samples=10, update=torch.zeros(1), buffers=torch.zeros(0),
                        stats={"elite_sums": sums[2], "elite_counts": counts[2]})
    algorithm.aggregate(server, [only])
    after = algorithm.server_stats(server)["prototypes"]
    assert torch.equal(after[0], previous[0]) and torch.equal(after[2], previous[2])
    assert torch.allclose(after[1], sums[2][1] / 2)


def test_stage_two_changes_the_classifier_and_no_encoder_parameter(make_config, make_context):
    algorithm, ctx = make_context(make_config("fedepd", optimizer="adam", lr=0.05))
    ctx.optimizer = torch.optim.Adam(ctx.model.parameters(), lr=0.05)
    ctx.server_stats = prototype_stats()
    ctx.model.train()
    algorithm.base_step(ctx)                                                 # Adam state for every parameter
    encoder, classifier = ctx.model.convs[:-1], ctx.model.convs[-1]
    before_encoder, before_classifier = params_of(encoder), params_of(classifier)
    for _ in range(3):
        algorithm.calibration_step(ctx)
    assert all(torch.equal(a, b) for a, b in zip(before_encoder, params_of(encoder)))
    assert not all(torch.equal(a, b) for a, b in zip(before_classifier, params_of(classifier)))


def test_stage_two_waits_for_prototypes(make_config, make_context):
    algorithm, ctx = make_context(make_config("fedepd"))
    assert not algorithm.calibrates(ctx)
    assert algorithm.local_train(ctx)["calibrated"] == 0.0
    ctx.server_stats = prototype_stats()
    assert algorithm.calibrates(ctx)
    assert algorithm.local_train(ctx)["calibrated"] == 1.0
    ablated, ablated_ctx = make_context(make_config("fedepd", algorithm_options={"consensus": False}))
    assert ablated.calibrates(ablated_ctx)                                   # no prototypes to wait for
    off, off_ctx = make_context(make_config("fedepd", algorithm_options={"recalibration": False}))
    off_ctx.server_stats = prototype_stats()
    assert not off.calibrates(off_ctx)


@pytest.mark.parametrize("mode", ["train", "posthoc", "prior", "none"])
def test_prediction_never_uses_the_prototypes(make_config, make_context, mode):
    algorithm, ctx = make_context(make_config("fedepd", algorithm_options={"logit_adjust": mode}))
    ctx.server_stats = prototype_stats(1)
    first = algorithm.predict(ctx, ctx.data)
    ctx.server_stats = prototype_stats(2, present=(True, False, True))
    assert torch.equal(first, algorithm.predict(ctx, ctx.data))
    ctx.server_stats = {}
    assert torch.equal(first, algorithm.predict(ctx, ctx.data))
    ctx.model.eval()
    plain = ctx.model(ctx.data.x, ctx.state["edge_index"])
    expected = plain + ctx.state["delta"] if mode == "posthoc" else plain
    assert torch.allclose(first, expected)


@pytest.mark.parametrize("mode,sign", [("train", 1.0), ("prior", -1.0), ("posthoc", 0.0), ("none", 0.0)])
def test_calibration_loss_is_cross_entropy_of_adjusted_logits_on_injected_features(
        make_config, make_context, mode, sign):
    gamma = 0.3
    algorithm, ctx = make_context(make_config("fedepd", algorithm_options={"logit_adjust": mode, "gamma": gamma,
                                                                          "mu": 1.7}))
    stats = prototype_stats(3, present=(True, False, True))
    ctx.server_stats = stats
    data, edges = ctx.data, ctx.state["edge_index"]
    ctx.model.eval()
    with torch.no_grad():
        h = ctx.model.encode(data.x, edges)
    # Eq. 12 with a dense Â' (tiny graph): only training nodes whose class has a prototype change.
    n = h.shape[0]
    adjacency = torch.eye(n)
    adjacency[edges[0], edges[1]] = 1.0
    deg = adjacency.sum(1)
    a_hat = adjacency / torch.sqrt(deg[:, None] * deg[None, :])
    low = a_hat @ h
    injected = (1 - gamma) * low + gamma * stats["prototypes"][data.y] + (h - low)
    chosen = data.train_mask & stats["present"][data.y]
    h_prime = torch.where(chosen[:, None], injected, h)
    logits = ctx.model.classify(h_prime, edges) + sign * ctx.state["delta"]
    expected = F.cross_entropy(logits[data.train_mask], data.y[data.train_mask])
    with torch.no_grad():
        got = algorithm.calibration_loss(ctx)
    assert got.item() == pytest.approx(expected.item(), rel=1e-5)


def test_runs_three_rounds_in_process_and_clients_agree_on_the_global_model(make_config, tiny_data, run_local):
    backend = run_local(make_config("fedepd", rounds=3), tiny_data, 3)
    weights = backend.client_weights()
    first = next(iter(weights.values()))
    assert all(torch.equal(w, first) for w in weights.values())
    stats = backend.server.algorithm.server_stats(backend.server)
    # client 2 lacks class 0; the other two hold every class, so every class has a prototype
    assert stats["present"].tolist() == [True, True, True]
    assert stats["prototypes"].shape == (NUM_CLASSES, HIDDEN)


@pytest.mark.parametrize("weighting, count", [("nodes", lambda d: d.num_nodes),
                                             ("train_nodes", lambda d: int(d.train_mask.sum()))])
def test_clients_are_weighted_by_node_count_by_default(make_config, make_client, ring_graph, broadcast_of,
                                                       weighting, count):
    options = {} if weighting == "nodes" else {"client_weight": weighting}
    graph = ring_graph(0)
    client = make_client(make_config("fedepd", algorithm_options=options), graph)
    update = client.train(broadcast_of(client.ctx.model))
    assert update.num_samples == count(graph.data) != (graph.data.num_nodes if weighting == "train_nodes" else -1)


@pytest.mark.parametrize("schedule", ["alternate", "sequential"])
def test_the_schedule_runs_local_epochs_steps_of_each_stage_in_its_order(make_config, make_context, schedule):
    epochs = 3
    config = make_config("fedepd", local_epochs=epochs, dropout=0.0, algorithm_options={"schedule": schedule})
    algorithm, ctx = make_context(config)
    twin, twin_ctx = make_context(config)                                  # the same initial model
    ctx.server_stats = twin_ctx.server_stats = prototype_stats()
    assert algorithm.local_train(ctx)["calibrated"] == 1.0
    twin_ctx.model.train()
    stage_one, stage_two = (lambda: twin.base_step(twin_ctx)), (lambda: twin.calibration_step(twin_ctx))
    steps = [stage_one, stage_two] * epochs if schedule == "alternate" else [stage_one] * epochs + [stage_two] * epochs
    for step in steps:
        step()
    assert all(torch.equal(a, b) for a, b in zip(params_of(ctx.model), params_of(twin_ctx.model)))


def _relabelled_outside_training(graph):
    """``graph`` with every validation and test node moved to the next class (training labels kept)."""
    from fgl_ray.data.types import ClientGraph

    data = graph.data.clone()
    held_out = ~data.train_mask
    data.y = torch.where(held_out, (data.y + 1) % NUM_CLASSES, data.y)
    return ClientGraph(client_id=graph.client_id, domain=graph.domain, data=data)


def test_nothing_a_client_caches_reads_validation_or_test_labels(make_config, make_context, ring_graph):
    graph = ring_graph(0)
    other = _relabelled_outside_training(graph)
    config = make_config("fedepd")                                          # homophily_labels: train
    algorithm, ctx = make_context(config, graph)
    _, moved = make_context(config, other)
    assert ctx.state.keys() == moved.state.keys()
    for key, value in ctx.state.items():
        assert torch.equal(torch.as_tensor(value), torch.as_tensor(moved.state[key])), key
    ctx.server_stats = moved.server_stats = prototype_stats()            # both stages train identically too
    torch.manual_seed(0)
    algorithm.local_train(ctx)
    torch.manual_seed(0)
    algorithm.local_train(moved)
    assert all(torch.equal(a, b) for a, b in zip(params_of(ctx.model), params_of(moved.model)))
    # the relabelling does reach the literal gate (all neighbours' labels), so the check above has teeth
    literal = make_config("fedepd", algorithm_options={"homophily_labels": "all"})
    _, leaky = make_context(literal, graph)
    _, leaky_moved = make_context(literal, other)
    assert not torch.equal(leaky.state["homophily"], leaky_moved.state["homophily"])
