"""GCFL / GCFL+: split criteria, min-cut bipartition, DTW sequences, cluster-wise aggregation."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from fgl_ray.algorithms import ALGORITHMS
from fgl_ray.algorithms.gcfl import (DATASET_CRITERIA, FALLBACK_CRITERIA, GRADIENT_NORM, dtw_distances,
                                     min_cut_bipartition, similarity_weights, update_norms)
from fgl_ray.config import load_config
from fgl_ray.messages import GLOBAL, ClientUpdate
from fgl_ray.runtime.local_backend import LocalBackend

LR = 1e-3
GROUP_A, GROUP_B = [0, 2, 3], [1, 4, 5]


def _server(tmp_path, tiny_graph_data_6, algorithm="gcfl", **options):
    config = load_config(dict(dataset="synthetic-graphs", num_clients=6, hidden=8, num_layers=2, rounds=30,
                              backend="local", torch_threads=1, output_dir=tmp_path, algorithm=algorithm, lr=LR,
                              algorithm_options={"eps1": 0.05, "eps2": 0.1} | options))
    return LocalBackend(config, tiny_graph_data_6).server


@pytest.fixture(scope="module")
def tiny_graph_data_6():
    from fgl_ray.data import build_federated_data

    return build_federated_data(load_config(dict(dataset="synthetic-graphs", num_clients=6)))


def _opposed_updates(server, groups=(GROUP_A, GROUP_B), scale=1.0, seed=0):
    """Weight changes +v (group A) and -v (group B) plus small noise, as descent updates u = -dW / lr."""
    size = server.layout.size
    generator = torch.Generator().manual_seed(seed)
    direction = torch.randn(size, generator=generator)
    direction = scale * direction / direction.norm()
    updates = []
    for sign, group in zip((1.0, -1.0), groups):
        for client in group:
            change = sign * direction + 0.01 * scale * torch.randn(size, generator=generator) / size ** 0.5
            updates.append(ClientUpdate(client, server.assignment.get(client, GLOBAL), 10 + client,
                                        -change / LR, torch.zeros(0)))
    return sorted(updates, key=lambda u: u.client_id)


def _aggregate(server, updates, round_index):
    server.round_index = round_index
    server.algorithm.aggregate(server, updates)


def test_opposed_groups_are_split_into_exactly_those_groups(tmp_path, tiny_graph_data_6):
    server = _server(tmp_path, tiny_graph_data_6)
    _aggregate(server, _opposed_updates(server), round_index=25)
    clusters = sorted(server.algorithm.clusters.values())
    assert clusters == [GROUP_A, GROUP_B]
    keys = {server.assignment[c] for c in GROUP_A}, {server.assignment[c] for c in GROUP_B}
    assert all(len(k) == 1 for k in keys) and keys[0] != keys[1] and GLOBAL not in keys[0] | keys[1]


@pytest.mark.parametrize("round_index, scale, groups", [
    (19, 1.0, (GROUP_A, GROUP_B)),          # before the 20-round warm-up
    (25, 0.05, (GROUP_A, GROUP_B)),         # max norm 0.05 below eps2 = 0.1
    (25, 1.0, (GROUP_A + GROUP_B, [])),     # every client moves the same way: mean norm above eps1
])
def test_nothing_splits_before_the_warm_up_or_below_the_criteria(tmp_path, tiny_graph_data_6, round_index, scale,
                                                                  groups):
    server = _server(tmp_path, tiny_graph_data_6)
    updates = _opposed_updates(server, groups=groups, scale=scale)
    _aggregate(server, updates, round_index)
    assert list(server.algorithm.clusters.values()) == [list(range(6))]


def test_a_cluster_of_two_never_splits(tmp_path, tiny_graph_data_6):
    algorithm = _server(tmp_path, tiny_graph_data_6).algorithm
    opposed = {0: torch.ones(4), 1: -torch.ones(4), 2: torch.ones(4)}        # mean 1/3 of a unit row, max norm 2
    assert not algorithm.should_split(25, [0, 1], opposed)                    # mean 0 < eps1, max 2 > eps2
    assert algorithm.should_split(25, [0, 1, 2], {0: torch.ones(4), 1: -torch.ones(4), 2: torch.zeros(4)})


def test_cluster_aggregation_is_the_sample_weighted_mean_change_from_the_clusters_model(tmp_path, tiny_graph_data_6):
    server = _server(tmp_path, tiny_graph_data_6)
    before = server.models[GLOBAL].params.clone()
    updates = _opposed_updates(server)
    _aggregate(server, updates, round_index=25)
    for members in server.algorithm.clusters.values():
        group = [u for u in updates if u.client_id in members]
        counts = torch.tensor([float(u.num_samples) for u in group], dtype=torch.float64)
        changes = torch.stack([-LR * u.update.double() for u in group])        # dW_j
        expected = before.double() + (counts[:, None] * changes).sum(0) / counts.sum()
        key = server.assignment[members[0]]
        torch.testing.assert_close(server.models[key].params.double(), expected)


def test_update_norms_and_min_cut_on_a_hand_made_case():
    changes = torch.tensor([[3.0, 4.0], [-3.0, -4.0], [0.0, 2.0]])
    mean_norm, max_norm = update_norms(changes)
    assert mean_norm == pytest.approx(2 / 3) and max_norm == pytest.approx(5.0)
    weights = np.array([[0, 9, 9, 1], [9, 0, 9, 1], [9, 9, 0, 1], [1, 1, 1, 0]], dtype=float)
    assert min_cut_bipartition(weights, [10, 11, 12, 13]) == ([10, 11, 12], [13])


def _dtw(a, b):
    """Textbook DTW with squared steps and a square root at the end (dtaidistance's definition)."""
    cost = np.full((len(a) + 1, len(b) + 1), np.inf)
    cost[0, 0] = 0.0
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            cost[i, j] = (a[i - 1] - b[j - 1]) ** 2 + min(cost[i - 1, j], cost[i, j - 1], cost[i - 1, j - 1])
    return np.sqrt(cost[-1, -1])


def test_dtw_distances_match_a_direct_computation():
    sequences = [[0.1, 0.3, 0.2, 0.5], [0.1, 0.1, 0.3, 0.5], [0.9, 0.1, 0.8, 0.2]]
    got = dtw_distances(sequences)
    for i, a in enumerate(sequences):
        for j, b in enumerate(sequences):
            assert got[i, j] == pytest.approx(_dtw(a, b))
    scaled = dtw_distances(sequences, standardize=True)
    standardized = [np.asarray(s) / np.std(s) for s in sequences]
    assert scaled[0, 2] == pytest.approx(_dtw(standardized[0], standardized[2]))


def test_gcfl_plus_waits_for_full_sequences_and_restarts_them_after_a_split(tmp_path, tiny_graph_data_6):
    server = _server(tmp_path, tiny_graph_data_6, algorithm="gcfl_plus", seq_length=3, sequence="update_norm")
    algorithm = server.algorithm
    for round_index in (20, 21):
        _aggregate(server, _opposed_updates(server, seed=round_index), round_index)
        assert len(algorithm.clusters) == 1                                 # fewer than 3 norms recorded
    assert all(len(seq) == 2 for seq in algorithm.sequences.values())
    _aggregate(server, _opposed_updates(server, seed=22), 22)
    assert len(algorithm.clusters) == 2
    assert all(seq == [] for seq in algorithm.sequences.values())


def test_dataset_defaults_follow_gcfl_and_options_override_them(tmp_path, tiny_graph_data_6):
    server = _server(tmp_path, tiny_graph_data_6, algorithm="gcfl_plus")
    assert server.algorithm.defaults() == FALLBACK_CRITERIA
    assert server.algorithm.criteria() == (0.05, 0.1)
    assert DATASET_CRITERIA["tu-proteins"] == (0.03, 0.06, 10)


def test_gcfl_plus_sequences_default_to_the_uploaded_gradient_norms(tmp_path, tiny_graph_data_6):
    server = _server(tmp_path, tiny_graph_data_6, algorithm="gcfl_plus")
    updates = [replace(u, stats={GRADIENT_NORM: torch.tensor([float(u.client_id) + 0.5])})
               for u in _opposed_updates(server)]
    _aggregate(server, updates, round_index=3)
    assert server.algorithm.sequences == {c: [c + 0.5] for c in range(6)}
    assert server.algorithm.declared_stats(2, 8, 5) == {GRADIENT_NORM: (1,)}


def _trained_client(tmp_path, data, loss_scale):
    """Client 0 after one round of Adam from the initial model, its loss multiplied by ``loss_scale``."""
    config = load_config(dict(dataset="synthetic-graphs", num_clients=6, hidden=8, num_layers=2, rounds=2,
                              backend="local", torch_threads=1, output_dir=tmp_path, algorithm="gcfl_plus",
                              optimizer="adam", lr=0.01, local_epochs=3))
    backend = LocalBackend(config, data)
    client = backend.host.clients[0]
    plain = client.algorithm.loss
    client.algorithm.loss = lambda ctx, batch, logits: loss_scale * plain(ctx, batch, logits)
    return client.train(backend.server.broadcast(0))


def test_under_adam_the_gradient_norm_sees_a_loss_scale_that_the_update_norm_does_not(tmp_path, tiny_graph_data_6):
    """Why GCFL+ reads gradients: Adam's steps hardly depend on the gradients' scale."""
    plain, scaled = (_trained_client(tmp_path, tiny_graph_data_6, scale) for scale in (1.0, 10.0))
    gradient_ratio = float(scaled.stats[GRADIENT_NORM] / plain.stats[GRADIENT_NORM])
    update_ratio = float(scaled.update.norm() / plain.update.norm())
    assert gradient_ratio == pytest.approx(10.0, rel=0.05)
    assert update_ratio == pytest.approx(1.0, rel=0.05)


def test_cut_weights_shift_or_add_one_to_the_cosine_similarities():
    changes = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.2]])
    cosine = torch.nn.functional.normalize(changes.double(), dim=1)
    cosine = (cosine @ cosine.T).numpy()
    np.testing.assert_allclose(similarity_weights(changes, "plus_one"), cosine + 1.0)
    shifted = similarity_weights(changes, "shift")
    off_diagonal = shifted[~np.eye(3, dtype=bool)]
    assert off_diagonal.min() == pytest.approx(0.0) and (off_diagonal >= 0).all()
    np.testing.assert_allclose(shifted - shifted[0, 1], cosine - cosine[0, 1])


@pytest.mark.parametrize("options, splits", [
    ({}, False),                                                         # the warm-up outlasts the run
    ({"eps1": 1e9, "eps2": 1e-9, "warmup_rounds": 1}, True),            # criteria every cluster meets
])
def test_a_run_says_whether_and_when_it_split(tmp_path, tiny_graph_data_6, caplog, options, splits):
    from fgl_ray.runtime import run_experiment

    config = load_config(dict(dataset="synthetic-graphs", num_clients=6, hidden=8, num_layers=2, rounds=4,
                              backend="local", torch_threads=1, output_dir=tmp_path, algorithm="gcfl",
                              algorithm_options=options))
    with caplog.at_level("WARNING", logger="fgl_ray.runtime.federation"):
        summary = run_experiment(config, tiny_graph_data_6, progress=False).summary
    clustering = summary["clustering"]
    assert clustering["split"] is splits
    assert bool(clustering["split_rounds"]) is splits and all(1 <= r < 4 for r in clustering["split_rounds"])
    assert (clustering["final_clusters"] > 1) is splits
    assert ("never split" in caplog.text) is ("--algorithm-options" in caplog.text) is not splits
    warmup = ALGORITHMS.get("gcfl").Options(**options).warmup_rounds
    assert (f"no split is tested before round {warmup} " in caplog.text) is not splits


@pytest.fixture(scope="module")
def planted_runs(tmp_path_factory):
    """Self-training, FedAvg, GCFL and GCFL+ on two planted groups whose label rules differ."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from gcfl_planted import planted_config

    from fgl_ray.data import build_federated_data
    from fgl_ray.runtime import run_experiment

    folder = tmp_path_factory.mktemp("planted")
    data = build_federated_data(planted_config(100, 0, folder, "local"))
    return {m: run_experiment(planted_config(100, 0, folder, m), data, progress=False)
            for m in ("local", "fedavg", "gcfl", "gcfl_plus")}              # GCFL with its default criteria


@pytest.mark.parametrize("method", ["gcfl", "gcfl_plus"])
def test_on_planted_groups_clustered_fl_splits_along_them_and_beats_fedavg_and_local(planted_runs, method):
    import json

    from gcfl_planted import within_groups

    result = planted_runs[method]
    final = list(json.loads((result.run_dir / "clusters.json").read_text())[-1]["clusters"].values())
    assert result.summary["clustering"]["split"] and within_groups(final)
    score = {m: r.summary["avg_over_clients"]["accuracy"]["mean"] for m, r in planted_runs.items()}
    assert score["fedavg"] < score["local"]                   # one model cannot fit both rules
    assert score[method] > score["local"] + 0.05 and score[method] > score["fedavg"] + 0.2


def _relative_server(tmp_path, data, **options):
    config = load_config(dict(dataset="synthetic-graphs", num_clients=6, hidden=8, num_layers=2, rounds=30,
                              backend="local", torch_threads=1, output_dir=tmp_path, algorithm="gcfl", lr=LR,
                              algorithm_options={"warmup_rounds": 2} | options))
    return LocalBackend(config, data).server


@pytest.mark.parametrize("groups, scale, splits", [
    ((GROUP_A, GROUP_B), 1.0, True),          # opposed groups that still move as in the warm-up
    ((GROUP_A + GROUP_B, []), 1.0, False),    # every client agrees: the mean change does not cancel
    ((GROUP_A, GROUP_B), 0.1, False),         # opposed, but barely moving any more
])
def test_relative_criteria_split_opposed_groups_that_still_move(tmp_path, tiny_graph_data_6, groups, scale, splits):
    server = _relative_server(tmp_path, tiny_graph_data_6)
    assert server.algorithm.relative                        # no eps given, no authors' values for this dataset
    for round_index in (0, 1):                              # warm-up: the clients move by about 1
        _aggregate(server, _opposed_updates(server, seed=round_index), round_index)
    assert len(server.algorithm.warmup_norms) == 2
    _aggregate(server, _opposed_updates(server, groups=groups, scale=scale, seed=2), 2)
    clusters = sorted(server.algorithm.clusters.values())
    assert clusters == ([GROUP_A, GROUP_B] if splits else [list(range(6))])


def test_auto_criteria_keep_the_authors_values_where_they_exist(tmp_path, tiny_graph_data_6):
    assert not _relative_server(tmp_path, tiny_graph_data_6, eps1=0.05).algorithm.relative
    assert _relative_server(tmp_path, tiny_graph_data_6, criteria="relative", eps1=0.05).algorithm.relative
    proteins = load_config(dict(dataset="tu-proteins", algorithm="gcfl"))
    from fgl_ray.algorithms.base import build_algorithm

    assert not build_algorithm("gcfl", {}, proteins).relative
