import torch
import torch.nn.functional as F

from fgl_ray.algorithms import ALGORITHMS
from fgl_ray.algorithms.prototypes import class_means, class_sums, merge_prototypes
from fgl_ray.messages import GLOBAL, ClientUpdate, check_update

NUM_CLASSES, HIDDEN, NUM_FEATURES = 3, 8, 6


def test_default_lambda_is_openfgl():
    assert ALGORITHMS.get("fedproto").Options().lam == 1.0


def test_class_sums_and_means_match_a_loop():
    torch.manual_seed(0)
    h, y = torch.randn(12, 4), torch.tensor([0, 1, 1, 3, 0, 1, 3, 3, 0, 1, 1, 0])
    mask = torch.rand(12) > 0.3
    sums, counts = class_sums(h, y, mask, 5)
    means, _ = class_means(h, y, mask, 5)
    for c in range(5):
        rows = h[mask & (y == c)]
        assert counts[c] == rows.shape[0]
        torch.testing.assert_close(sums[c], rows.sum(0))
        torch.testing.assert_close(means[c], rows.mean(0) if rows.shape[0] else torch.zeros(4))


def test_merge_ignores_clients_without_a_class():
    a = (torch.tensor([[1.0, 1.0], [2.0, 0.0], [0.0, 0.0], [0.0, 0.0]]), torch.tensor([2.0, 1.0, 0.0, 0.0]))
    b = (torch.tensor([[0.0, 0.0], [4.0, 2.0], [6.0, 6.0], [0.0, 0.0]]), torch.tensor([0.0, 3.0, 1.0, 0.0]))
    c = (torch.tensor([[0.0, 0.0], [0.0, 0.0], [2.0, 2.0], [0.0, 0.0]]), torch.tensor([0.0, 0.0, 3.0, 0.0]))
    protos, present = merge_prototypes([a, b, c])
    expected = torch.stack([
        a[0][0],                                         # only client a has class 0
        (1 * a[0][1] + 3 * b[0][1]) / (1 + 3),           # client c's zero row does not count
        (1 * b[0][2] + 3 * c[0][2]) / (1 + 3),
        torch.zeros(2),                                  # nobody has class 3
    ])
    torch.testing.assert_close(protos, expected)
    assert present.tolist() == [True, True, True, False]

    as_sums = [(means * counts.unsqueeze(-1), counts) for means, counts in (a, b, c)]
    torch.testing.assert_close(merge_prototypes(as_sums, are_sums=True)[0], expected)
    unweighted, _ = merge_prototypes([a, b, c], weighted=False)
    torch.testing.assert_close(unweighted[1], (a[0][1] + b[0][1]) / 2)


def test_without_global_prototypes_the_loss_is_cross_entropy(anchor_case):
    case = anchor_case("fedproto")
    z, logits = case.forward()
    for stats in ({}, {"prototypes": torch.randn(NUM_CLASSES, HIDDEN),
                       "present": torch.zeros(NUM_CLASSES, dtype=torch.bool)}):
        case.ctx.server_stats = stats
        case.assert_vanishes(case.algorithm.objective(case.ctx, case.ctx.data, z, logits), logits)


def test_regulariser_is_mse_over_training_nodes_whose_class_has_a_prototype(make_config, make_context):
    lam = 0.7
    proto, ctx = make_context(make_config("fedproto", algorithm_options={"lam": lam}, dropout=0.0))
    prototypes = torch.randn(NUM_CLASSES, HIDDEN)
    ctx.server_stats = {"prototypes": prototypes, "present": torch.tensor([False, True, True])}
    z = ctx.model.encode(ctx.data.x, ctx.data.edge_index)
    logits = ctx.model.classify(z, ctx.data.edge_index)
    data = ctx.data
    nodes = data.train_mask & (data.y != 0)
    expected = F.cross_entropy(logits[data.train_mask], data.y[data.train_mask]) \
        + lam * ((z[nodes] - prototypes[data.y[nodes]]) ** 2).mean()
    torch.testing.assert_close(proto.objective(ctx, ctx.data, z, logits), expected)


def test_uploads_have_exactly_the_declared_shapes(make_config, make_client, ring_graph, broadcast_of):
    config = make_config("fedproto")
    client = make_client(config, ring_graph(2, classes=(1, 2)))
    update = client.train(broadcast_of(client.ctx.model))
    declared = client.algorithm.declared_stats(NUM_CLASSES, config.hidden, NUM_FEATURES)
    assert {k: tuple(v.shape) for k, v in update.stats.items()} == declared
    check_update(update, update.update.numel(), update.buffers.numel(), declared)
    data = client.ctx.data
    assert update.stats["counts"].tolist() == torch.bincount(data.y[data.train_mask], minlength=NUM_CLASSES).tolist()
    assert update.stats["counts"][0] == 0 and torch.equal(update.stats["prototypes"][0], torch.zeros(config.hidden))


def test_first_round_is_fedavg_and_later_rounds_use_the_prototypes(make_config, tiny_data, run_local, fedavg_after):
    proto = run_local(make_config("fedproto"), tiny_data, rounds=1)
    avg = fedavg_after(1)
    assert torch.equal(proto.global_weights(), avg.global_weights())
    proto.run_round(1)
    avg.run_round(1)
    assert not torch.equal(proto.global_weights(), avg.global_weights())


def test_server_prototypes_are_the_merge_of_this_rounds_uploads(make_config, tiny_data, run_local):
    backend = run_local(make_config("fedproto"), tiny_data, rounds=0)
    uploads = []
    train = backend.pool.train

    def recording(broadcast, client_ids, timeout_s):
        answers = train(broadcast, client_ids, timeout_s)
        uploads.append({a.client_id: a.stats for a in answers})
        return answers

    backend.pool.train = recording
    algorithm = backend.server.algorithm
    assert not algorithm.present.any()
    for round_index in range(2):
        backend.run_round(round_index)
        stats = uploads[-1]
        merged, present = merge_prototypes([(s["prototypes"], s["counts"]) for s in stats.values()])
        torch.testing.assert_close(algorithm.prototypes, merged)
        assert present.all() and algorithm.present.all()
        for client in backend.host.clients.values():     # the evaluation broadcast carried them
            torch.testing.assert_close(client.ctx.server_stats["prototypes"], merged)
    assert stats[2]["counts"][0] == 0                     # client 2 never has class 0
    assert not torch.equal(uploads[0][0]["prototypes"], uploads[1][0]["prototypes"])


def test_a_class_nobody_uploads_keeps_its_previous_prototype(make_config, tiny_data, run_local):
    server = run_local(make_config("fedproto"), tiny_data, rounds=0).server
    params = server.models[GLOBAL].params

    def update(client_id, means, counts):
        return ClientUpdate(client_id, GLOBAL, 10, torch.zeros_like(params), torch.zeros(0),
                            stats={"prototypes": means, "counts": counts})

    first = torch.randn(NUM_CLASSES, HIDDEN)
    server.algorithm.aggregate(server, [update(0, first, torch.tensor([2.0, 1.0, 0.0]))])
    assert server.algorithm.present.tolist() == [True, True, False]
    second = torch.randn(NUM_CLASSES, HIDDEN)
    server.algorithm.aggregate(server, [update(1, second, torch.tensor([0.0, 4.0, 5.0]))])
    expected = torch.stack([first[0], second[1], second[2]])
    torch.testing.assert_close(server.algorithm.server_stats(server)["prototypes"], expected)
    assert server.algorithm.present.all()


def test_representations_are_taken_in_the_training_phase_without_dropout(ring_graph):
    import copy

    from fgl_ray.algorithms.prototypes import training_phase
    from fgl_ray.models import build_model

    data = ring_graph(0).data
    for name in ("gcn", "pmlp_gcn"):
        torch.manual_seed(0)
        model = build_model(name, data.x.shape[1], NUM_CLASSES, hidden=HIDDEN, dropout=0.5).eval()
        reference = copy.deepcopy(model).train()
        reference.dropout = 0.0
        rng = torch.get_rng_state()
        with torch.no_grad(), training_phase(model) as inside:
            z = inside.encode(data.x, data.edge_index)
        assert torch.equal(torch.get_rng_state(), rng)                 # no random draws
        assert not model.training and model.dropout == 0.5             # restored
        with torch.no_grad():
            torch.testing.assert_close(z, reference.encode(data.x, data.edge_index))
            evaluated = model.encode(data.x, data.edge_index)
        # GCN: the training phase without dropout is the evaluation function; PMLP: it is not
        # (evaluation propagates), so prototypes and MOON targets must not use eval mode.
        assert torch.allclose(z, evaluated) == (name == "gcn")


def test_prototypes_only_form_never_moves_the_global_model_but_still_merges(make_config, tiny_data, run_local):
    config = make_config("fedproto", algorithm_options={"share_weights": False})
    backend = run_local(config, tiny_data, rounds=0)
    initial = backend.global_weights().clone()
    for round_index in range(2):
        backend.run_round(round_index)
    assert torch.equal(backend.global_weights(), initial)
    assert backend.server.algorithm.present.all()
    weights = list(backend.client_weights().values())
    assert not torch.equal(weights[0], weights[1])          # every client keeps its own model
    assert all(not torch.equal(w, initial) for w in weights)
