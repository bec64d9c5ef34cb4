"""AdaFGL: the homophily confidence score, the knowledge graph, the two stages."""

import torch

from fgl_ray.algorithms.adafgl import homophily_confidence, rescaled, softmax_cosine
from fgl_ray.messages import GLOBAL


def two_class_graph(homophilous: bool, n: int = 40):
    """Nodes alternate classes 0/1; edges join same-class (homophilous) or other-class nodes."""
    y = torch.arange(n) % 2
    src, dst = [], []
    for i in range(n):
        for step in ((2, 4) if homophilous else (1, 3)):
            src.append(i), dst.append((i + step) % n)
    edges = torch.tensor([src, dst])
    return torch.cat([edges, edges.flip(0)], dim=1), y, torch.ones(n, dtype=torch.bool)


def test_hcs_is_high_on_a_homophilous_graph_and_low_on_a_heterophilous_one():
    torch.manual_seed(0)
    assert homophily_confidence(*two_class_graph(True), 2) == 1.0
    assert homophily_confidence(*two_class_graph(False), 2) < 0.5


def test_softmax_cosine_and_rescaling():
    torch.manual_seed(1)
    e = torch.randn(5, 3)
    s = torch.softmax(e, 1)
    expected = torch.nn.functional.cosine_similarity(s.unsqueeze(1), s.unsqueeze(0), dim=2).fill_diagonal_(0)
    torch.testing.assert_close(softmax_cosine(e), expected)
    r = torch.tensor([[0.0, 0.9], [0.3, 0.6]])                     # mean 0.45, max 0.9
    torch.testing.assert_close(rescaled(r), torch.tensor([[1.0, 1.0], [-0.3 / 0.45, (0.6 - 0.45) / 0.45 + 1.0]]))


def test_stage_one_is_fedavg_and_stage_two_leaves_the_extractor_and_predicts_with_the_clients_module(
        make_config, tiny_data, fedavg_after, run_local):
    fedavg = fedavg_after(2).server
    adafgl = run_local(make_config("adafgl", algorithm_options={"federated_rounds": 2}, rounds=4), tiny_data, 2)
    torch.testing.assert_close(adafgl.server.models[GLOBAL].params, fedavg.models[GLOBAL].params)
    extractor = adafgl.server.models[GLOBAL].params.clone()
    for round_index in (2, 3):
        result = adafgl.run_round(round_index)
        assert not result.failures and all("hcs" in metrics for metrics in result.updates.values())
    assert torch.equal(adafgl.server.models[GLOBAL].params, extractor)
    for client in adafgl.host.clients.values():
        stage = client.ctx.state["adafgl"]
        assert 0.0 <= stage["hcs"] <= 1.0 and stage["xs"].shape[1] == 4 * stage["x"].shape[1]
        logits = client.algorithm.predict(client.ctx, client.ctx.data)
        torch.testing.assert_close(logits.exp().sum(1), torch.ones(logits.shape[0]))


def test_switch_trains_one_module_chosen_by_hcs(make_config, tiny_data, run_local):
    backend = run_local(make_config("adafgl", algorithm_options={"federated_rounds": 1, "combine": "switch"},
                                    rounds=2), tiny_data, 2)
    for client in backend.host.clients.values():
        stage = client.ctx.state["adafgl"]
        trained = {name for name, p in stage["module"].named_parameters() if p.grad is not None}
        homo = any(name.startswith("homo.") for name in trained)
        assert homo == (stage["hcs"] >= 0.9) and homo != any(name.startswith("passing.") for name in trained)
