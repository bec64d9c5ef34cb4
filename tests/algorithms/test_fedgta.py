"""FedGTA: label propagation, moments, smoothing confidence, personalised topology-aware averaging."""

import math

import pytest
import torch

from fgl_ray.algorithms.fedgta import accepted, moments, propagate_labels, smoothing_confidence
from fgl_ray.messages import GLOBAL, ClientUpdate, personal_key
from fgl_ray.results import read_metrics
from fgl_ray.runtime import run_experiment
from fgl_ray.runtime.local_backend import LocalBackend


NUM_CLASSES = 3


def test_propagation_follows_the_authors_recurrence_on_a_dense_adjacency():
    torch.manual_seed(0)
    n = 7
    edges = torch.tensor([[0, 1], [1, 2], [2, 3], [3, 0], [4, 5], [1, 5]]).T
    edge_index = torch.cat([edges, edges.flip(0)], dim=1)
    seeds = torch.softmax(torch.randn(n, NUM_CLASSES), dim=1)
    train = torch.tensor([True, False, True, False, False, True, False])
    a = torch.eye(n)
    a[edge_index[0], edge_index[1]] = 1.0
    d = a.sum(1).rsqrt()
    a_hat = d.unsqueeze(1) * a * d.unsqueeze(0)
    y = seeds.clone()
    for _ in range(4):
        y = 0.3 * a_hat @ y + 0.7 * seeds
        y[train] += seeds[train]
    torch.testing.assert_close(propagate_labels(edge_index, seeds, train, 4, 0.3), y)
    # node 6 is isolated: only its self-loop, so it keeps its seed
    torch.testing.assert_close(y[6], seeds[6])


def test_moments_are_raw_central_or_both_per_class():
    torch.manual_seed(1)
    p = torch.softmax(torch.randn(50, NUM_CLASSES), dim=1).double()
    for q in (1, 2, 5):
        torch.testing.assert_close(moments(p, 5, "raw")[q - 1], (p ** q).mean(0))
        torch.testing.assert_close(moments(p, 5, "central")[q - 1], ((p - p.mean(0)) ** q).mean(0))
    assert moments(p, 5, "hybrid").shape == (10, NUM_CLASSES)
    torch.testing.assert_close(moments(p, 5, "central")[0], torch.zeros(NUM_CLASSES, dtype=p.dtype))


def test_confidence_is_non_negative_and_grows_with_sharper_predictions_and_degree():
    degree = torch.tensor([1.0, 2.0, 3.0])
    uniform = torch.full((3, NUM_CLASSES), 1.0 / NUM_CLASSES)
    sharp = torch.eye(NUM_CLASSES)
    low, high = smoothing_confidence(uniform, degree), smoothing_confidence(sharp, degree)
    assert 0 <= float(low) < float(high)
    torch.testing.assert_close(high, torch.tensor([6 * NUM_CLASSES / math.e]), atol=1e-6, rtol=0)
    assert float(smoothing_confidence(sharp, 2 * degree)) == pytest.approx(2 * float(high))


def test_each_client_accepts_itself_and_those_above_the_threshold():
    similarity = torch.tensor([[1.0, 0.9, 0.1], [0.9, 1.0, 0.4], [0.1, 0.4, float("nan")]])
    assert accepted(similarity, 0.5) == [[0, 1], [0, 1], [2]]
    assert accepted(similarity, -1.0) == [[0, 1, 2], [0, 1, 2], [0, 1, 2]]
    assert accepted(similarity, 0.3) == [[0, 1], [0, 1, 2], [1, 2]]


def test_uploaded_statistics_have_declared_shapes_whatever_the_node_count(make_config, uploads_by_size):
    uploads = uploads_by_size(make_config("fedgta"))
    assert all(float(stats["confidence"]) >= 0 for stats in uploads)
    shapes = {tuple((k, tuple(v.shape)) for k, v in sorted(stats.items())) for stats in uploads}
    assert shapes == {(("confidence", (1,)), ("moments", (20, NUM_CLASSES)))}


def _server(make_config, tiny_data, **options):
    return LocalBackend(make_config("fedgta", algorithm_options=options), tiny_data).server


def _hand_updates(server, moments_by_client, confidence_by_client):
    """Client ``k`` trained the global model to ``W + (k + 1) * 1``, with the given statistics."""
    lr, size = server.config.lr, server.layout.size
    return [ClientUpdate(k, GLOBAL, 10, -(k + 1) * torch.ones(size) / lr, server.models[GLOBAL].buffers,
                         {"moments": m, "confidence": torch.tensor([c])})
            for k, (m, c) in enumerate(zip(moments_by_client, confidence_by_client))]


def test_personal_models_average_the_accepted_clients_by_confidence(make_config, tiny_data):
    server = _server(make_config, tiny_data, num_moments=1, moment_type="raw")
    base = server.models[GLOBAL].params.clone()
    a, b = torch.tensor([[1.0, 0.0, 0.0]]), torch.tensor([[0.0, 0.0, 1.0]])
    server.algorithm.aggregate(server, _hand_updates(server, [a, a, b], [1.0, 3.0, 5.0]))
    expected = {0: base + (1 * 1 + 3 * 2) / 4, 1: base + (1 * 1 + 3 * 2) / 4, 2: base + 3}
    for client, params in expected.items():
        assert server.assignment[client] == personal_key(client)
        torch.testing.assert_close(server.models[personal_key(client)].params, params)
    torch.testing.assert_close(server.models[GLOBAL].params, base)       # the global model is the start only


def test_next_round_starts_from_each_clients_own_model(make_config, tiny_data):
    server = _server(make_config, tiny_data, num_moments=1, moment_type="raw", accept_alpha=0.99)
    m = [torch.tensor([[1.0, 0.0, 0.0]]), torch.tensor([[0.0, 1.0, 0.0]]), torch.tensor([[0.0, 0.0, 1.0]])]
    server.algorithm.aggregate(server, _hand_updates(server, m, [1.0, 1.0, 1.0]))
    own = {k: server.models[personal_key(k)].params.clone() for k in range(3)}
    lr, size = server.config.lr, server.layout.size
    second = [ClientUpdate(k, personal_key(k), 10, -torch.ones(size) / lr,
                           server.models[GLOBAL].buffers, {"moments": m[k], "confidence": torch.tensor([1.0])}) for k in range(3)]
    server.algorithm.aggregate(server, second)
    for k in range(3):                                 # alone in its group: its own model plus its own step
        torch.testing.assert_close(server.models[personal_key(k)].params, own[k] + 1)


def test_accepting_everyone_with_sample_weights_is_fedavg(make_config, tiny_data, fedavg_after, run_local):
    fedavg = fedavg_after(3).server
    fedgta = run_local(make_config("fedgta", algorithm_options={"accept_alpha": -1.0, "weights": "samples"}),
                       tiny_data, 3).server
    for client in fedgta.client_ids:
        torch.testing.assert_close(fedgta.models[personal_key(client)].params, fedavg.models[GLOBAL].params,
                                   atol=1e-5, rtol=1e-4)


def test_runs_on_the_multimodal_backbone_as_fedmgs_compares_it(tmp_path):
    """FedGTA-MM (FedMGS's baseline): the same statistics from the multimodal GNN's predictions."""
    from fgl_ray.config import load_config
    from fgl_ray.data import build_federated_data

    values = dict(dataset="synthetic-mm", num_clients=3, hidden=16, rounds=2, local_epochs=1, torch_threads=1,
                  missing="client:0.5", synthetic={"num_nodes": 240}, task="node-classification",
                  algorithm="fedgta", backend="local", output_dir=tmp_path)
    config = load_config(values)
    assert config.model == "mm_gnn"
    frame = read_metrics(run_experiment(config, build_federated_data(config), progress=False).run_dir)
    assert (frame[frame.metric == "failed"]).empty
    assert sorted(frame[(frame.split == "test") & (frame.metric == "accuracy")]["round"].unique()) == [0, 1]


def test_a_client_that_sits_a_round_out_keeps_its_model(make_config, tiny_data):
    server = _server(make_config, tiny_data, num_moments=1, moment_type="raw", accept_alpha=-1.0)
    m = torch.tensor([[1.0, 0.0, 0.0]])
    server.algorithm.aggregate(server, _hand_updates(server, [m, m, m], [1.0, 1.0, 1.0]))
    kept = server.models[personal_key(2)].params.clone()
    lr, size = server.config.lr, server.layout.size
    second = [ClientUpdate(k, personal_key(k), 10, -torch.ones(size) / lr, server.models[GLOBAL].buffers,
                           {"moments": m, "confidence": torch.tensor([1.0])}) for k in (0, 1)]
    server.algorithm.aggregate(server, second)
    assert torch.equal(server.models[personal_key(2)].params, kept)
    torch.testing.assert_close(server.models[personal_key(0)].params, kept + 1)   # all three started equal
