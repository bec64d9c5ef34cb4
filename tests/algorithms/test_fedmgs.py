"""FedMGS: availability gating, prototype banks, the upload, the losses and the ablation switches."""

import pytest
import torch

from fgl_ray.algorithms.fedmgs import bank_spread, prototype_loss, reconstruction_loss
from fgl_ray.config import load_config
from fgl_ray.data import build_federated_data
from fgl_ray.data.multimodal import pack, unpack
from fgl_ray.messages import GLOBAL, ClientUpdate
from fgl_ray.models import build_model
from fgl_ray.models.multimodal import Prototypes

DIMS = (5, 3)


def _model(**options):
    torch.manual_seed(0)
    return build_model("mm_gnn", sum(DIMS) + 2, 4, hidden=8, num_layers=2, modality_dims=DIMS, **options).eval()


def _graph(n=10):
    generator = torch.Generator().manual_seed(1)
    available = torch.ones(n, 2, dtype=torch.bool)
    available[[1, 4], 0] = False                      # visual missing
    available[[2, 7], 1] = False                      # text missing
    x = pack(torch.randn(n, DIMS[0], generator=generator) * available[:, :1],
             torch.randn(n, DIMS[1], generator=generator) * available[:, 1:], available)
    src = torch.arange(n)
    edge_index = torch.cat([torch.stack([src, (src + 1) % n]), torch.stack([(src + 1) % n, src])], dim=1)
    return x, edge_index, available


def _with_garbage_placeholders(x, available):
    visual, text, _ = unpack(x, DIMS)
    noisy_visual = torch.where(available[:, :1], visual, torch.full_like(visual, 7.5))
    noisy_text = torch.where(available[:, 1:], text, torch.full_like(text, -3.0))
    return pack(noisy_visual, noisy_text, available)


def test_placeholder_values_never_reach_the_graph_encoding_when_gated():
    model = _model()
    x, edge_index, available = _graph()
    clean = model.forward_parts(x, edge_index)
    noisy = model.forward_parts(_with_garbage_placeholders(x, available), edge_index)
    for key in ("s", "h", "z"):
        torch.testing.assert_close(clean[key], noisy[key], rtol=0, atol=0)
    ungated = (model.forward_parts(x, edge_index, gate=False), model.forward_parts(
        _with_garbage_placeholders(x, available), edge_index, gate=False))
    assert not torch.allclose(ungated[0]["h"], ungated[1]["h"])          # the ablation lets them in


def test_observed_modalities_pass_through_and_missing_ones_are_filled():
    model = _model()
    x, edge_index, available = _graph()
    parts = model.forward_parts(x, edge_index)
    assert torch.equal(parts["f"][available], parts["z"][available])
    eta = parts["eta"][~available].unsqueeze(-1)
    expected = eta * parts["z_hat"][~available] + (1 - eta) * parts["h"].unsqueeze(1).expand_as(parts["z"])[~available]
    torch.testing.assert_close(parts["f"][~available], expected)
    direct = model.forward_parts(x, edge_index, fusion=False)            # w/o reliability fusion
    torch.testing.assert_close(direct["f"][~available], direct["z_hat"][~available])


def test_the_spread_scales_confidence_down_and_prototypes_enter_the_synthesis():
    model = _model()
    x, edge_index, _ = _graph()
    banks = torch.randn(2, 4, 8)
    valid = torch.tensor([[True, True, False, True], [True, False, True, True]])
    flat = Prototypes(banks, valid, torch.zeros(2))
    spread = Prototypes(banks, valid, torch.tensor([2.0, 3.0]))
    without = model.forward_parts(x, edge_index)
    a = model.forward_parts(x, edge_index, flat, torch.full((10,), -1))
    b = model.forward_parts(x, edge_index, spread, torch.full((10,), -1))
    assert not torch.allclose(a["z_hat"], without["z_hat"])                # pi changes the synthesis input
    ratio = b["eta"] / a["eta"]
    torch.testing.assert_close(ratio, torch.sigmoid(-model.beta * spread.spread).expand_as(ratio) / 0.5)


def test_spread_is_the_mean_per_dimension_variance_over_valid_classes():
    banks = torch.tensor([[[0.0, 2.0], [2.0, 4.0], [99.0, 99.0]], [[1.0, 1.0], [5.0, 5.0], [3.0, 3.0]]])
    valid = torch.tensor([[True, True, False], [True, False, False]])
    spread = bank_spread(banks, valid)
    assert spread[0] == pytest.approx(1.0)                               # variances 1 and 1 over two classes
    assert spread[1] == 0.0                                              # fewer than two valid classes


def test_losses_by_hand():
    parts = {"available": torch.tensor([[True, True], [True, False]]), "z": torch.zeros(2, 2, 3),
             "z_hat": torch.ones(2, 2, 3)}
    assert reconstruction_loss(None, parts, "all") == pytest.approx(3.0)   # one complete node, ||1||^2 = 3
    parts["available"][0, 1] = False
    assert reconstruction_loss(None, parts, "all") == 0.0
    s = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    prototypes = Prototypes(torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 0.0]]]),
                            torch.tensor([[True, True], [True, False]]), torch.zeros(2))
    got = prototype_loss(s, torch.tensor([0, -1]), prototypes, temperature=0.5)
    logits = torch.tensor([1.0, 0.0]) / 0.5                               # cos with class means, unlabelled row out
    assert got == pytest.approx(float(-torch.log_softmax(logits, 0)[0]))


def test_the_reconstruction_loss_trains_the_synthesizers_alone_unless_asked():
    model = _model()                                                      # eval: no dropout between the passes
    x, edge_index, _ = _graph()
    prototypes = Prototypes(torch.randn(2, 4, 8), torch.ones(2, 4, dtype=torch.bool), torch.zeros(2))
    reached = {}
    for gradient in ("synthesizer", "all"):
        model.zero_grad(set_to_none=True)
        parts = model.forward_parts(x, edge_index, prototypes, torch.full((10,), -1))
        loss = reconstruction_loss(model, parts, gradient)
        loss.backward()
        reached[gradient] = (float(loss), {name.split(".")[0] for name, p in model.named_parameters()
                                           if p.grad is not None and bool(p.grad.abs().sum() > 0)})
    assert reached["synthesizer"][0] == pytest.approx(reached["all"][0])     # the same value either way
    assert reached["synthesizer"][1] == {"synthesizers"}
    assert {"synthesizers", "encoders", "convs"} <= reached["all"][1]


@pytest.fixture(scope="module")
def federation():
    config = load_config({"dataset": "synthetic-mm", "algorithm": "fedmgs", "num_clients": 3, "hidden": 16,
                          "local_epochs": 1, "rounds": 3, "missing": "node:0.5", "backend": "local",
                          "torch_threads": 1, "synthetic": {"num_nodes": 240}})
    data = build_federated_data(config)
    from fgl_ray.runtime import open_backend

    return open_backend(config, data), data


def test_the_upload_is_model_banks_and_counts_only(federation):
    backend, data = federation
    client = backend.host.clients[0]
    update = client.train(backend.server.broadcast(0))
    assert set(update.stats) == {"prototypes", "counts"}
    assert update.stats["prototypes"].shape == (2, data.num_classes, 16)
    assert update.stats["counts"].shape == (2, data.num_classes)
    graph = client.ctx.data
    available = graph.x[:, -2:] > 0.5
    for m in range(2):
        observed = graph.train_mask & available[:, m]
        expected = torch.bincount(graph.y[observed], minlength=data.num_classes).float()
        assert torch.equal(update.stats["counts"][m], expected)
    sizes = {c.ctx.data.num_nodes for c in backend.host.clients.values()}
    shapes = {tuple(c.train(backend.server.broadcast(0)).stats["prototypes"].shape)
              for c in backend.host.clients.values()}
    assert len(sizes) > 1 and len(shapes) == 1                            # no node-count dimension


def test_an_entry_nobody_observed_stays_absent_and_counts_weight_the_merge(federation):
    backend, _ = federation
    server = backend.server
    params = server.models[GLOBAL].params
    algorithm = server.algorithm
    algorithm.setup_server(server)

    def update(client, banks, counts):
        return ClientUpdate(client, GLOBAL, 5, torch.zeros_like(params), torch.zeros(0),
                            stats={"prototypes": banks, "counts": counts})

    classes = algorithm.banks.shape[1]
    first, second = torch.randn(2, classes, 16), torch.randn(2, classes, 16)
    counts_a, counts_b = torch.zeros(2, classes), torch.zeros(2, classes)
    counts_a[0, 0], counts_b[0, 0], counts_b[1, 1] = 1.0, 3.0, 2.0
    algorithm.aggregate(server, [update(0, first, counts_a), update(1, second, counts_b)])
    torch.testing.assert_close(algorithm.banks[0, 0], (first[0, 0] + 3 * second[0, 0]) / 4)
    torch.testing.assert_close(algorithm.banks[1, 1], second[1, 1])
    assert algorithm.valid.sum() == 2 and not algorithm.valid[1, 0]
    assert torch.equal(algorithm.banks[1, 0], torch.zeros(16))          # absent, not averaged in
    stats = algorithm.server_stats(server)
    assert set(stats) == {"prototypes", "valid", "spread"}


def test_prototypes_exist_after_a_round_and_the_ablation_sends_none(tmp_path):
    values = {"dataset": "synthetic-mm", "algorithm": "fedmgs", "num_clients": 3, "hidden": 16, "local_epochs": 1,
              "missing": "client:0.5", "backend": "local", "torch_threads": 1, "synthetic": {"num_nodes": 240}}
    data = build_federated_data(load_config(values))
    from fgl_ray.runtime import open_backend

    full = open_backend(load_config(values), data)
    full.run_round(0)
    assert full.server.algorithm.valid.all()
    ablated = open_backend(load_config(values | {"algorithm_options": {"prototype_synthesis": False}}), data)
    ablated.run_round(0)
    assert ablated.server.broadcast(1).stats == {}
    assert ablated.host.clients[0].train(ablated.server.broadcast(1)).stats == {}


def test_fedmgs_refuses_another_backbone():
    with pytest.raises(ValueError, match="needs the model mm_gnn"):
        load_config({"dataset": "synthetic-mm", "algorithm": "fedmgs", "model": "gcn"})


def _trained_client(**algorithm_options):
    """Client 0 after one round, holding the round-1 broadcast, in eval mode."""
    values = {"dataset": "synthetic-mm", "algorithm": "fedmgs", "num_clients": 3, "hidden": 16,
              "local_epochs": 1, "missing": "node:0.5", "backend": "local", "torch_threads": 1,
              "synthetic": {"num_nodes": 240}, "algorithm_options": algorithm_options}
    from fgl_ray.runtime import open_backend

    backend = open_backend(load_config(values), build_federated_data(load_config(values)))
    backend.run_round(0)
    client = backend.host.clients[0]
    client.algorithm.receive(client.ctx, backend.server.broadcast(1))
    client.ctx.model.eval()
    return client


@pytest.mark.parametrize(("query", "label_matters"), [("label", True), ("predicted", False)])
def test_the_query_option_decides_whether_a_training_label_enters_the_synthesis(query, label_matters):
    client = _trained_client(query=query)
    batch = client.ctx.data.clone()
    missing = batch.train_mask & ~(batch.x[:, -2:] > 0.5).all(dim=1)
    assert missing.any()
    with torch.no_grad():
        before = client.algorithm.parts(client.ctx, batch)[0]["readout"][missing]
        batch.y = (batch.y + 1) % int(batch.y.max() + 1)
        after = client.algorithm.parts(client.ctx, batch)[0]["readout"][missing]
    assert (not torch.allclose(before, after)) == label_matters


def test_a_class_estimate_queries_the_valid_bank_entries_it_names():
    model = _model()
    x, edge_index, _ = _graph()
    banks = torch.randn(2, 4, 8)
    valid = torch.tensor([[True, True, False, True], [True, False, True, True]])
    estimate = torch.zeros(10, 4)
    estimate[:, 2] = 1.0                                                  # class 2: no visual prototype
    estimate[:5] = torch.tensor([0.25, 0.75, 0.0, 0.0])
    labels = torch.full((10,), -1)
    labels[9] = 3
    pi = model.forward_parts(x, edge_index, Prototypes(banks, valid, torch.zeros(2)), labels,
                             class_estimate=estimate)["pi"]
    torch.testing.assert_close(pi[0, 0], 0.25 * banks[0, 0] + 0.75 * banks[0, 1])
    torch.testing.assert_close(pi[0, 1], banks[1, 0])                    # text lacks class 1: renormalised
    torch.testing.assert_close(pi[6, 1], banks[1, 2])
    assert torch.equal(pi[6, 0], torch.zeros(8))                          # nothing valid to select
    torch.testing.assert_close(pi[9], banks[:, 3])                       # a label query outranks the estimate


def test_unlabelled_nodes_can_query_the_classifiers_prediction():
    client = _trained_client(query="label", unlabelled_query="classifier")
    ctx, algorithm, batch = client.ctx, client.algorithm, client.ctx.data
    x, edge_index = ctx.task.node_inputs(batch)
    labels = torch.where(batch.train_mask, batch.y, torch.full_like(batch.y, -1))
    prototypes = algorithm.prototypes(ctx)
    with torch.no_grad():
        first = ctx.model.forward_parts(x, edge_index, prototypes, labels, temperature=algorithm.tau())
        estimate = torch.softmax(ctx.model.classify(first["readout"], edge_index), dim=-1)
        by_hand = ctx.model.forward_parts(x, edge_index, prototypes, labels, temperature=algorithm.tau(),
                                          class_estimate=estimate)
        parts = algorithm.parts(ctx, batch)[0]
    torch.testing.assert_close(parts["readout"], by_hand["readout"])
    unlabelled = ~batch.train_mask
    assert not torch.allclose(parts["pi"][unlabelled], first["pi"][unlabelled])   # not the prototype softmax
    torch.testing.assert_close(parts["pi"][batch.train_mask], first["pi"][batch.train_mask])


def test_unlabelled_nodes_can_query_the_prototype_softmax_in_one_pass():
    client = _trained_client(query="label", unlabelled_query="prototypes")
    batch = client.ctx.data
    with torch.no_grad():
        one_pass = client.algorithm.parts(client.ctx, batch)[0]
        x, edge_index = client.ctx.task.node_inputs(batch)
        labels = torch.where(batch.train_mask, batch.y, torch.full_like(batch.y, -1))
        expected = client.ctx.model.forward_parts(x, edge_index, client.algorithm.prototypes(client.ctx), labels,
                                                  temperature=client.algorithm.tau())
    torch.testing.assert_close(one_pass["readout"], expected["readout"])


def test_by_default_every_node_queries_the_classifier_whatever_its_split():
    client = _trained_client()
    batch = client.ctx.data
    with torch.no_grad():
        default = client.algorithm.parts(client.ctx, batch)[0]
        swapped = batch.clone()
        swapped.train_mask, swapped.test_mask = batch.test_mask, batch.train_mask
        moved = client.algorithm.parts(client.ctx, swapped)[0]
    torch.testing.assert_close(default["pi"], moved["pi"])               # a training label changes nothing
    with torch.no_grad():
        by_hand = _trained_client(query="predicted", unlabelled_query="classifier").algorithm.parts(
            client.ctx, batch)[0]
    torch.testing.assert_close(default["readout"], by_hand["readout"])


def test_auto_queries_the_prototypes_where_no_classifier_is_trained():
    from fgl_ray.algorithms import build_algorithm

    config = load_config({"dataset": "synthetic-mm", "algorithm": "fedmgs", "task": "link-prediction"})
    algorithm = build_algorithm("fedmgs", {}, config)
    for task, source in (("link-prediction", "prototypes"), ("node-classification", "classifier")):
        ctx = type("Ctx", (), {"task": type("Task", (), {"name": task})()})()
        assert algorithm.estimate_source(ctx) == source


def test_masked_reconstruction_context_is_the_forward_pass_of_a_node_missing_the_modality():
    from fgl_ray.data.multimodal import hide_modality

    model = _model()
    x, edge_index, available = _graph()
    complete = available.all(dim=1)
    prototypes = Prototypes(torch.randn(2, 4, 8), torch.ones(2, 4, dtype=torch.bool), torch.zeros(2))
    queries = torch.full((10,), -1)
    parts = model.forward_parts(x, edge_index, prototypes, queries)
    contexts = [model.forward_parts(hide_modality(x, DIMS, m, complete), edge_index, prototypes, queries)
                for m in range(2)]
    for m, context in enumerate(contexts):
        assert not context["available"][complete, m].any() and context["available"][complete, 1 - m].all()
        torch.testing.assert_close(context["s"][complete], parts["z"][complete, 1 - m])   # s holds z^{m'} alone
        assert not torch.allclose(context["h"][complete], parts["h"][complete])
    target = parts["z"][complete]
    by_hand = torch.stack([contexts[m]["z_hat"][complete, m] for m in range(2)], dim=1)
    expected = (by_hand - target).pow(2).sum(-1).mean()
    for gradient in ("synthesizer", "all"):
        got = reconstruction_loss(model, parts, gradient, contexts)
        assert float(got) == pytest.approx(float(expected))
        assert float(got) != pytest.approx(float(reconstruction_loss(model, parts, gradient)))


def test_the_masked_reconstruction_trains_and_its_loss_differs_from_the_observed_one():
    losses = {}
    for context in ("observed", "masked"):
        client = _trained_client(reconstruction_context=context)
        client.ctx.model.train()
        losses[context] = client.algorithm.local_train(client.ctx)["reconstruction_loss"]
    assert losses["masked"] > 0 and losses["observed"] > 0 and losses["masked"] != losses["observed"]


def test_a_softplus_beta_stays_positive_and_starts_at_the_free_one():
    model = _model()
    torch.testing.assert_close(model.reliability_scale(True), model.reliability_scale(False))   # both 1 at start
    with torch.no_grad():
        model.beta.fill_(-3.0)
    assert (model.reliability_scale(False) < 0).all() and (model.reliability_scale(True) > 0).all()
    x, edge_index, available = _graph()
    spread = Prototypes(torch.randn(2, 4, 8), torch.ones(2, 4, dtype=torch.bool), torch.full((2,), 2.0))
    queries = torch.full((10,), -1)
    free = model.forward_parts(x, edge_index, spread, queries)["eta"]
    positive = model.forward_parts(x, edge_index, spread, queries, positive_beta=True)["eta"]
    missing = ~available
    assert (positive[missing] < free[missing]).all()          # a negative beta had turned the penalty into a bonus


def test_diagnostics_split_eta_and_accuracy_by_nodes_and_reach_the_metrics(tmp_path):
    from fgl_ray.runtime.federation import run_experiment
    from fgl_ray.results import read_metrics

    values = {"dataset": "synthetic-mm", "algorithm": "fedmgs", "num_clients": 3, "hidden": 16, "rounds": 2,
              "local_epochs": 1, "missing": "node:0.5", "backend": "local", "torch_threads": 1,
              "synthetic": {"num_nodes": 240}, "output_dir": str(tmp_path), "run_name": "diag"}
    config = load_config(values)
    result = run_experiment(config, build_federated_data(config), progress=False)
    rows = read_metrics(result.run_dir)
    rows = rows[(rows["round"] == 1) & (rows["client_id"] != "server")]
    test = rows[rows["split"] == "test"].pivot(index="client_id", columns="metric", values="value")
    train = rows[rows["split"] == "train"].pivot(index="client_id", columns="metric", values="value")
    assert {"eta_missing", "accuracy_missing", "accuracy_complete", "missing_fraction"} <= set(test.columns)
    assert {"accuracy", "eta_missing", "loss"} <= set(train.columns)
    assert ((test["eta_missing"] > 0) & (test["eta_missing"] < 1)).all()
    share = test["missing_fraction"]
    mixed = share * test["accuracy_missing"] + (1 - share) * test["accuracy_complete"]
    assert (mixed - test["accuracy"]).abs().max() < 1e-6               # the two groups make up the task's accuracy


def test_the_classifier_query_is_refused_where_no_classifier_is_trained():
    with pytest.raises(ValueError, match="unlabelled_query 'classifier' reads the node classifier"):
        load_config({"dataset": "synthetic-mm", "algorithm": "fedmgs", "task": "link-prediction",
                     "algorithm_options": {"unlabelled_query": "classifier"}})
