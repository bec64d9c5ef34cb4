"""FedSage+: hiding and its targets, the mending, the matched and cross-subgraph losses, the banks, the limit."""

import torch

from fgl_ray.algorithms.fedsage_plus import (bank_loss, hide_nodes, matched_feature_loss, mend, missing_neighbours,
                                             neighbour_bank, used_slots)
from fgl_ray.messages import GLOBAL

from .conftest import NUM_FEATURES, ring_graph


def path_graph(n: int):
    """0 - 1 - ... - n-1 (both directions), features ``x[v] = v``."""
    src = torch.arange(n - 1)
    edges = torch.stack([src, src + 1])
    return torch.arange(n, dtype=torch.float32).unsqueeze(1).repeat(1, 2), torch.cat([edges, edges.flip(0)], dim=1)


def test_hidden_nodes_come_only_from_outside_train_and_test():
    train = torch.tensor([True, True, False, False, False, False, False, False, True, False])
    test = torch.tensor([False, False, True, False, False, False, False, False, False, True])
    hidden = hide_nodes(train, test, 0.5, torch.Generator().manual_seed(0))
    assert int(hidden.sum()) == 2 and not bool((hidden & (train | test)).any())
    assert not hide_nodes(train, test, 0.0, torch.Generator()).any()


def test_missing_neighbours_count_every_hidden_neighbour_and_keep_up_to_num_pred_of_their_features():
    x, edge_index = path_graph(6)
    hub = torch.stack([torch.zeros(4, dtype=torch.long), torch.tensor([2, 3, 4, 5])])
    edge_index = torch.cat([edge_index, hub, hub.flip(0)], dim=1)
    hidden = torch.tensor([False, False, True, True, True, False])
    counts, targets = missing_neighbours(x, edge_index, hidden, 2, torch.arange(6), torch.Generator().manual_seed(0))
    assert counts.tolist() == [3, 1, 0, 0, 0, 1]      # node 0 lost 2, 3 and 4; node 1 lost 2; node 5 lost 4
    assert set(targets[0, :, 0].tolist()) <= {2.0, 3.0, 4.0} and len(set(targets[0, :, 0].tolist())) == 2
    assert targets[1, 0, 0] == 2 and targets[1, 1].abs().sum() == 0 and targets[5, 0, 0] == 4
    assert targets[2:5].abs().sum() == 0
    _, only = missing_neighbours(x, edge_index, hidden, 2, torch.tensor([1, 5]), torch.Generator().manual_seed(0))
    torch.testing.assert_close(only, targets[[1, 5]])                # the rows asked for, in their order


def test_mending_appends_used_slots_as_neighbours_linked_both_ways():
    x, edge_index = path_graph(3)
    generated = torch.arange(3 * 2 * 2, dtype=torch.float32).view(3, 2, 2) + 100
    slots = used_slots(torch.tensor([1.7, 0.4, 5.0]), 2)
    assert slots.tolist() == [[True, False], [False, False], [True, True]]
    owners = torch.tensor([0, 1, 2])
    mended_x, mended_edges = mend(x, edge_index, owners, slots, generated)
    assert mended_x.shape == (6, 2)
    torch.testing.assert_close(mended_x[3:], torch.stack([generated[0, 0], generated[2, 0], generated[2, 1]]))
    added = {tuple(e) for e in mended_edges[:, edge_index.shape[1]:].T.tolist()}
    assert added == {(0, 3), (3, 0), (2, 4), (4, 2), (2, 5), (5, 2)}
    _, shifted = mend(x, edge_index, torch.tensor([2, 0, 1]), slots, generated)   # rows of an impaired graph
    assert {tuple(e) for e in shifted[:, edge_index.shape[1]:].T.tolist()} >= {(2, 3), (1, 4), (1, 5)}


def test_matched_feature_loss_takes_the_nearest_known_hidden_neighbour_per_used_slot():
    torch.manual_seed(0)
    n, p, f = 5, 3, 4
    generated, targets = torch.randn(n, p, f), torch.randn(n, p, f)
    counts = torch.tensor([3.0, 1.0, 2.0, 0.0, 3.0])
    missing = torch.tensor([2, 5, 0, 1, 1])
    slots = used_slots(counts, p)
    expected = torch.zeros(())
    for v in range(n):
        for s in range(int(counts[v])):
            if missing[v] > 0:
                expected += min(((generated[v, s] - targets[v, k]) ** 2).mean() for k in range(min(int(missing[v]), p)))
    torch.testing.assert_close(matched_feature_loss(generated, slots, targets, missing), expected / (n * p))
    exact = targets.clone()
    assert float(matched_feature_loss(exact, torch.ones(n, p, dtype=torch.bool), exact, torch.full((n,), p))) < 1e-6


def test_bank_loss_is_the_distance_to_the_nearest_bank_row_and_reaches_only_the_generated_features():
    torch.manual_seed(1)
    generated = torch.randn(4, 2, 3, requires_grad=True)
    bank = torch.randn(7, 3)
    slots = torch.tensor([[True, True], [True, False], [False, False], [True, True]])
    missing = torch.tensor([2, 1, 0, 0])          # node 3 lost no neighbour: its slots add nothing
    expected = sum(min(((generated[v, s] - b) ** 2).mean() for b in bank)
                   for v in range(3) for s in range(2) if slots[v, s]) / 8
    loss = bank_loss(generated, slots, missing, bank)
    torch.testing.assert_close(loss, expected)
    loss.backward()
    assert generated.grad[2].abs().sum() == 0 and generated.grad[1, 1].abs().sum() == 0
    assert generated.grad[3].abs().sum() == 0 and generated.grad[0].abs().sum() > 0


def test_the_neighbour_bank_holds_neighbour_features_and_its_shape_ignores_the_node_count():
    torch.manual_seed(2)
    for n in (8, 80):
        x, edge_index = path_graph(n)
        isolated_x = torch.cat([x, torch.full((1, 2), -1.0)])        # an isolated node is never a centre
        bank = neighbour_bank(isolated_x, edge_index, 6, 4)
        assert bank.shape == (24, 2) and bool((bank >= 0).all())


def test_stage_one_trains_the_generator_with_the_other_clients_banks_then_stage_two_mends_the_graph(
        make_config, tiny_data, run_local):
    config = make_config("fedsage_plus", model="sage", rounds=4,
                         algorithm_options={"gen_rounds": 2, "bank_nodes": 3, "num_pred": 2, "latent": 8})
    backend = run_local(config, tiny_data, 1)
    algorithm = backend.server.algorithm
    assert sorted(algorithm.banks) == [0, 1, 2] and algorithm.banks[0].shape == (6, NUM_FEATURES)
    stats = algorithm.server_stats(backend.server)
    assert stats["banks"].shape == (3, 6, NUM_FEATURES) and stats["bank_owners"].tolist() == [0, 1, 2]
    for each in backend.host.clients.values():          # every node predicts 3 missing neighbours: 2 slots used
        generator = each.ctx.state["fedsage"]["neighgen"]
        generator.count.weight.data.zero_(), generator.count.bias.data.fill_(3.0)
    client = backend.host.clients[0]
    trained = client.ctx.state["fedsage"]["neighgen"]
    before = [p.detach().clone() for p in trained.parameters()]
    result = backend.run_round(1)
    assert all(metrics["cross_loss"] > 0 for metrics in result.updates.values())
    after = list(trained.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after))
    assert algorithm.server_stats(backend.server) == {}            # stage 1 is over: no banks travel
    result = backend.run_round(2)
    assert "cross_loss" not in result.updates[0]
    state, data = client.ctx.state["fedsage"], client.ctx.data
    assert "neighgen" not in state and "optimizer" not in state    # spent once the graph is mended
    n = data.num_nodes
    mended_x, mended_edges = state["mended"]
    added = mended_edges[:, data.edge_index.shape[1]:]
    anchors = added[0, : added.shape[1] // 2]
    assert mended_x.shape[0] > n and added.shape[1] == 2 * (mended_x.shape[0] - n)
    assert set(anchors.tolist()) <= set(state["kept"].tolist())                 # only kept nodes are mended
    assert int(torch.bincount(anchors).max()) <= 2                               # at most num_pred each
    torch.testing.assert_close(mended_x[:n], data.x)
    assert client.algorithm.predict(client.ctx, data).shape == (n, 3)


def test_without_hidden_nodes_or_generated_neighbours_it_is_fedavg_of_the_classifier(make_config, tiny_data,
                                                                                      run_local):
    """FedSage+ with ``hidden_portion`` 0 and ``num_pred`` 0 is FedSage: FedAvg of GraphSAGE."""
    common = dict(model="sage", rounds=4, dropout=0.0)
    fedavg = run_local(make_config("fedavg", **common), tiny_data, 4).server
    plus = run_local(make_config("fedsage_plus", **common, algorithm_options={
        "gen_rounds": 2, "hidden_portion": 0.0, "num_pred": 0, "latent": 8}), tiny_data, 4).server
    torch.testing.assert_close(plus.models[GLOBAL].params, fedavg.models[GLOBAL].params)


def test_a_client_hides_half_its_eligible_nodes_and_keeps_every_training_node(make_config, make_context):
    graph = ring_graph(0, n=40)
    algorithm, ctx = make_context(make_config("fedsage_plus", model="sage"), graph)
    kept = ctx.state["fedsage"]["kept"]
    data = graph.data
    eligible = int((~data.train_mask & ~data.test_mask).sum())
    assert kept.numel() == data.num_nodes - eligible // 2
    assert bool(data.train_mask[kept].sum() == data.train_mask.sum())
    assert ctx.state["fedsage"]["targets"].shape == (int(data.train_mask.sum()), 5, NUM_FEATURES)


def test_the_other_clients_banks_are_moved_to_the_clients_device(make_config, make_context):
    algorithm, ctx = make_context(make_config("fedsage_plus", model="sage"))
    ctx.server_stats = {"banks": torch.randn(3, 4, 6), "bank_owners": torch.tensor([0, 1, 2])}
    ctx.device = torch.device("meta")           # not the broadcast's (CPU) device
    banks = algorithm.other_banks(ctx)
    assert len(banks) == 2 and all(bank.device.type == "meta" for bank in banks)


def test_the_authors_schedule_pretrains_locally_then_steps_fgen_alone_and_leaves_the_federated_classifier_fresh(
        make_config, tiny_data, run_local):
    config = make_config("fedsage_plus", model="sage", rounds=4, algorithm_options={
        "schedule": "authors", "pretrain_epochs": 3, "gen_rounds": 2, "bank_nodes": 3, "num_pred": 2, "latent": 8})
    backend = run_local(config, tiny_data, 0)
    fresh = backend.server.models[GLOBAL].params.clone()
    state = backend.host.clients[0].ctx.state["fedsage"]

    def snapshot(module):
        return [p.detach().clone() for p in module.parameters()]

    def changed(before, module):
        return [not torch.equal(a, b) for a, b in zip(before, module.parameters())]

    neighgen, classifier = state["neighgen"], state["classifier"]
    fgen = {id(p) for p in neighgen.fgen_parameters()}
    encoder_and_count = [p for p in neighgen.parameters() if id(p) not in fgen]
    initial = snapshot(neighgen), snapshot(classifier)
    backend.run_round(0)                                                      # local pre-training, then fGen
    assert state["pretrained"]
    assert all(changed(initial[0], neighgen)) and all(changed(initial[1], classifier))
    torch.testing.assert_close(backend.server.models[GLOBAL].params, fresh)     # the federated one never trained
    neighgen.count.weight.data.zero_(), neighgen.count.bias.data.fill_(3.0)   # 2 slots used: the banks count
    frozen = [p.detach().clone() for p in encoder_and_count], snapshot(classifier)
    generator = [p.detach().clone() for p in neighgen.fgen_parameters()]
    result = backend.run_round(1)
    assert result.updates[0]["cross_loss"] > 0
    assert all(torch.equal(a, b) for a, b in zip(frozen[0], encoder_and_count))
    assert not any(changed(frozen[1], classifier))
    assert all(not torch.equal(a, b) for a, b in zip(generator, neighgen.fgen_parameters()))
    torch.testing.assert_close(backend.server.models[GLOBAL].params, fresh)
    backend.run_round(2)                                                      # stage 2 trains it from there
    assert "classifier" not in state and not torch.equal(backend.server.models[GLOBAL].params, fresh)
