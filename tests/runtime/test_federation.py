"""End-to-end federations on both backends (Ray tests share one session-scoped Ray)."""

import json

import pandas as pd
import pytest
import torch

from fgl_ray.algorithms import ALGORITHMS
from fgl_ray.tasks import TASKS
from fgl_ray.results import read_metrics
from fgl_ray.runtime import open_backend, run_experiment



def _backend_fixture(request, backend):
    if backend == "ray":
        request.getfixturevalue("ray_session")


def _untimed(summary: dict) -> dict:
    """A summary without its wall-clock parts (the start-up breakdown and the per-round timings)."""
    return {key: value for key, value in summary.items() if key not in ("startup", "round_timing")}


def _scores(run_dir) -> pd.DataFrame:
    frame = read_metrics(run_dir)
    frame = frame[~frame.metric.str.contains("seconds")].drop(columns="run_id")
    return frame.sort_values(["round", "client_id", "domain", "split", "metric"]).reset_index(drop=True)


#: Every (algorithm, task) pair the algorithms declare, with the fixtures of that task's tiny federation.
PAIRS = [(algorithm, task) for algorithm in ALGORITHMS.names() for task in ALGORITHMS.get(algorithm).tasks]


def _one_pair_per_algorithm(pairs):
    """Each algorithm once, on its task that the pairs chosen so far use least (spreads them over the tasks)."""
    chosen = []
    for algorithm in dict.fromkeys(a for a, _ in pairs):
        tasks = [t for a, t in pairs if a == algorithm]
        chosen.append((algorithm, min(tasks, key=lambda t: sum(task == t for _, task in chosen))))
    return chosen


#: The Ray backend runs each algorithm and each task once, on one class's warm workers (a fresh worker
#: costs seconds); the in-process backend runs every pair, and the equality tests below, on fresh
#: workers, tie the two backends together.
RAY_PAIRS = _one_pair_per_algorithm(PAIRS)
TASK_FIXTURES = {"node-classification": ("tiny_config", "tiny_data"),
                 "graph-classification": ("tiny_graph_config", "tiny_graph_data"),
                 **{task: ("tiny_multimodal_config", "tiny_multimodal_data")
                    for task in ("link-prediction", "modality-matching", "modality-retrieval")}}
#: Node classification on multimodal graphs: the algorithms that need the multimodal backbone.
MULTIMODAL_ONLY = {name for name in ALGORITHMS.names() if ALGORITHMS.get(name).models == ("mm_gnn",)}


def _runs_two_rounds_with_three_clients(request, algorithm, task, backend, lender=None):
    fixtures = TASK_FIXTURES[task]
    if algorithm in MULTIMODAL_ONLY:
        fixtures = ("tiny_multimodal_config", "tiny_multimodal_data")
    make_config, data = (request.getfixturevalue(name) for name in fixtures)
    config = make_config(algorithm=algorithm, backend=backend, task=task)
    assert config.resolved_task() == task
    result = run_experiment(config, data, progress=False, lender=lender)
    frame = read_metrics(result.run_dir)
    headline = TASKS.get(task).headline
    tested = frame[(frame.split == "test") & (frame.metric == headline)]
    assert sorted(tested["round"].unique()) == [0, 1]
    assert set(tested.client_id) == {"0", "1", "2", "server"}
    assert set(tested[tested.client_id == "server"].domain) == set(data.domains) | {"all"}
    assert tested.value.between(0, 1).all()
    assert (frame[frame.metric == "failed"]).empty
    for name in ("manifest.json", "summary.json", "learning_curves.png"):
        assert (result.run_dir / name).stat().st_size > 0


@pytest.mark.parametrize("algorithm, task", PAIRS)
def test_every_supported_algorithm_and_task_runs_two_rounds_with_three_clients(request, algorithm, task):
    _runs_two_rounds_with_three_clients(request, algorithm, task, "local")


class TestOnRay:
    """On one class's warm workers, as a Simulator's runs borrow them."""

    @pytest.mark.parametrize("algorithm, task", RAY_PAIRS)
    def test_every_algorithm_and_every_task_runs_two_rounds_with_three_clients(self, request, warm_workers,
                                                                                algorithm, task):
        _runs_two_rounds_with_three_clients(request, algorithm, task, "ray", lender=warm_workers)


def test_the_ray_matrix_covers_every_algorithm_and_every_task():
    assert {a for a, _ in RAY_PAIRS} == {a for a, _ in PAIRS}
    assert {t for _, t in RAY_PAIRS} == {t for _, t in PAIRS}


def test_same_seeds_give_identical_metrics_on_both_backends(request, tiny_config, tiny_data):
    request.getfixturevalue("ray_session")
    runs = [run_experiment(tiny_config(backend=b, run_name=b, rounds=3), tiny_data, progress=False)
            for b in ("local", "ray")]
    local, ray = (_scores(r.run_dir) for r in runs)
    pd.testing.assert_frame_equal(local, ray, check_exact=True)
    assert json.dumps(_untimed(runs[0].summary), sort_keys=True) == json.dumps(_untimed(runs[1].summary),
                                                                             sort_keys=True)  # NaN-safe


def test_graph_classification_gives_identical_metrics_on_both_backends_and_in_a_fresh_rng(request, tiny_graph_config,
                                                                                         tiny_graph_data):
    request.getfixturevalue("ray_session")
    torch.manual_seed(12345)                    # unshared layers must not take the driver's RNG state
    runs = [run_experiment(tiny_graph_config(backend=b, run_name=b, algorithm="gcfl"), tiny_graph_data, progress=False)
            for b in ("local", "ray")]
    torch.manual_seed(999)
    again = run_experiment(tiny_graph_config(backend="local", run_name="again", algorithm="gcfl"), tiny_graph_data,
                           progress=False)
    local, ray, repeated = (_scores(r.run_dir) for r in (*runs, again))
    pd.testing.assert_frame_equal(local, ray, check_exact=True)
    pd.testing.assert_frame_equal(local, repeated, check_exact=True)


@pytest.mark.parametrize("backend", ["local", "ray"])
def test_client_models_hold_the_new_global_weights_after_a_round(request, tiny_config, tiny_data, backend):
    _backend_fixture(request, backend)
    handle = open_backend(tiny_config(backend=backend), tiny_data)
    try:
        initial = handle.global_weights().clone()
        handle.run_round(0)
        new = handle.global_weights()
        assert not torch.equal(initial, new)
        held = handle.client_weights()
        assert sorted(held) == [0, 1, 2]
        for weights in held.values():
            assert torch.equal(weights, new)
    finally:
        handle.close()


@pytest.mark.parametrize("backend", ["local", "ray"])
def test_a_raising_client_is_reported_and_the_round_completes(request, tiny_config, tiny_data, backend):
    _backend_fixture(request, backend)
    result = run_experiment(tiny_config(backend=backend, failures={0: [1]}), tiny_data, progress=False)
    frame = read_metrics(result.run_dir)
    failed = frame[frame.metric == "failed"]
    assert list(zip(failed["round"], failed.client_id, failed.split)) == [(0, "1", "train")]
    rounds = frame[(frame.split == "round")].pivot(index="round", columns="metric", values="value")
    assert rounds.loc[0, "participants"] == 2 and rounds.loc[0, "aggregated"] == 1
    assert rounds.loc[1, "participants"] == 3
    log = (result.run_dir / "failures.jsonl").read_text()
    assert "SimulatedClientFailure" in log and '"client_id": 1' in log


def test_too_few_updates_leave_the_global_model_unchanged(tiny_config, tiny_data):
    handle = open_backend(tiny_config(backend="local", failures={0: [0, 1]}, min_clients=2), tiny_data)
    before = handle.global_weights().clone()
    result = handle.run_round(0)
    assert not result.aggregated
    assert torch.equal(handle.global_weights(), before)


def test_an_interrupted_run_keeps_every_finished_round(tiny_config, tiny_data):
    config = tiny_config(backend="local", rounds=5, run_name="interrupted")

    def stop_after_third(result, rows):
        if result.round == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_experiment(config, tiny_data, progress=False, on_round=stop_after_third)
    frame = read_metrics(config.output_dir / "interrupted")
    assert sorted(frame["round"].unique()) == [0, 1, 2]


def test_one_mean_round_equals_averaging_independently_trained_client_models(tiny_config, tiny_data):
    from fgl_ray.runtime.client import ClientRuntime
    from fgl_ray.params import trainable_vector

    config = tiny_config(backend="local")
    handle = open_backend(config, tiny_data)
    opening = handle.server.broadcast(0)
    models, counts = [], []
    for graph in tiny_data.clients:  # a twin of each client, trained outside the federation
        twin = ClientRuntime(graph, config, tiny_data.num_features, tiny_data.num_classes)
        twin.train(opening)
        models.append(trainable_vector(twin.ctx.model).double())
        counts.append(float(graph.data.train_mask.sum()))
    handle.run_round(0)
    expected = sum(c * m for c, m in zip(counts, models)) / sum(counts)
    torch.testing.assert_close(handle.global_weights().double(), expected, rtol=1e-5, atol=1e-6)


def test_diagnostics_are_recorded_saved_and_plotted(tiny_config, tiny_data):
    result = run_experiment(tiny_config(backend="local", diagnostics=True), tiny_data, progress=False)
    frame = read_metrics(result.run_dir)
    diagnosed = frame[frame.split == "diagnostics"]
    assert set(diagnosed[diagnosed.client_id == "server"].metric) >= {
        "overlap_mean_off_diagonal", "overlap_random_reference", "cosine_to_aggregate_mean"}
    assert len(list((result.run_dir / "diagnostics").glob("round-*.npz"))) == 2
    assert (result.run_dir / "diagnostics.png").stat().st_size > 0


def test_client_state_persists_across_rounds_where_the_client_lives(request, tiny_config, tiny_data):
    request.getfixturevalue("ray_session")
    final = {}
    for backend in ("local", "ray"):
        handle = open_backend(tiny_config(backend=backend, algorithm="feddyn"), tiny_data)
        try:
            seen = []
            for round_index in range(2):
                handle.run_round(round_index)
                seen.append(handle.client_state(1, "feddyn_grad").clone())
        finally:
            handle.close()
        assert seen[0].abs().sum() > 0, "FedDyn's correction must be non-zero after a round"
        assert not torch.equal(seen[0], seen[1]), "round 1's state must build on round 0's"
        final[backend] = seen[1]
    torch.testing.assert_close(final["local"], final["ray"])


@pytest.mark.parametrize("backend", ["local", "ray"])
def test_after_a_split_every_client_holds_its_own_clusters_shared_weights(request, tiny_graph_config,
                                                                         tiny_graph_data, backend):
    _backend_fixture(request, backend)
    options = {"warmup_rounds": 0, "eps1": 1e9, "eps2": 1e-12}                 # split as soon as allowed
    handle = open_backend(tiny_graph_config(algorithm="gcfl", backend=backend, algorithm_options=options),
                          tiny_graph_data)
    try:
        for round_index in range(2):
            assert not handle.run_round(round_index).failures
        assignment, models = handle.server_models()
        held = handle.client_weights()                                          # read inside the client actors
    finally:
        handle.close()
    clusters = {key: sorted(c for c, k in assignment.items() if k == key) for key in set(assignment.values())}
    assert len(clusters) == 2 and sorted(c for members in clusters.values() for c in members) == [0, 1, 2]
    for client, weights in held.items():
        torch.testing.assert_close(weights, models[assignment[client]], rtol=0, atol=0)
    first, second = (held[members[0]] for members in clusters.values())
    assert not torch.equal(first, second)


def test_unshared_layers_stay_with_their_client(tiny_graph_config, tiny_graph_data):
    from fgl_ray.params import ParamLayout

    handle = open_backend(tiny_graph_config(backend="local"), tiny_graph_data)
    client = handle.host.clients[0]
    shared = ParamLayout.of(client.ctx.model)
    assert all(name.startswith("convs.") for name in shared.names)
    update = client.train(handle.server.broadcast(0))
    assert update.update.numel() == shared.size < sum(p.numel() for p in client.ctx.model.parameters())
    assert handle.global_weights().numel() == shared.size
    handle.run_round(0)
    embeddings = [c.ctx.model.embedding.weight.detach() for c in handle.host.clients.values()]
    assert not torch.equal(embeddings[0], embeddings[1])                    # each client trains its own


def test_a_run_folder_is_never_appended_to_by_another_run(tiny_config, tiny_data):
    from fgl_ray.config import ConfigError

    config = tiny_config(backend="local", run_name="once")
    run_experiment(config, tiny_data, progress=False)
    with pytest.raises(ConfigError, match="already holds a run's results"):
        run_experiment(config, tiny_data, progress=False)
    again = run_experiment(config.with_overrides(overwrite=True, rounds=1), tiny_data, progress=False)
    assert sorted(read_metrics(again.run_dir)["round"].unique()) == [0]     # the old rows are gone


def _pooled_test_accuracy(run):
    return run.summary["all"]["accuracy"]["mean"]


def test_robust_aggregators_resist_a_client_that_scales_its_updates(tiny_config, tiny_data):
    base = dict(backend="local", rounds=15, synthetic={"num_domains": 3, "nodes_per_domain": 90, "num_features": 8,
                                                        "num_classes": 3}, clients_per_domain=2, last_k=3,
                split=(0.6, 0.2, 0.2), local_epochs=5)
    attack = [{"kind": "scale", "clients": [0], "factor": 100.0}]
    from fgl_ray.data import build_federated_data

    data = build_federated_data(tiny_config(**base))
    runs = {name: run_experiment(tiny_config(**base, run_name=name, aggregator=aggregator, faults=faults,
                                             aggregator_options=options), data, progress=False)
            for name, aggregator, faults, options in (("clean", "mean", [], {}), ("mean", "mean", attack, {}),
                                                       ("median", "median", attack, {}),
                                                       ("trimmed", "trimmed_mean", attack, {"trim": 0.2}))}
    clean = _pooled_test_accuracy(runs["clean"])
    assert _pooled_test_accuracy(runs["mean"]) < clean - 0.1                   # the mean drifts away
    for name in ("median", "trimmed"):                                         # the robust rules hold near it
        assert _pooled_test_accuracy(runs[name]) > max(clean - 0.06, _pooled_test_accuracy(runs["mean"]) + 0.1), name


def test_a_nan_update_is_rejected_and_recorded_and_a_delay_only_slows(tiny_config, tiny_data):
    faults = [{"kind": "nan", "clients": [1], "rounds": [0]}, {"kind": "delay", "clients": [2], "seconds": 0.2}]
    result = run_experiment(tiny_config(backend="local", faults=faults), tiny_data, progress=False)
    log = (result.run_dir / "failures.jsonl").read_text()
    assert '"phase": "payload"' in log and "NaN" in log and '"client_id": 1' in log
    frame = read_metrics(result.run_dir)
    seconds = frame[(frame.split == "train") & (frame.metric == "seconds") & (frame.client_id == "2")]
    assert seconds.value.min() >= 0.2


def test_a_fault_naming_a_missing_client_is_refused(tiny_config, tiny_data):
    from fgl_ray.config import ConfigError

    with pytest.raises(ConfigError, match=r"faults name clients \[7\]"):
        run_experiment(tiny_config(backend="local", faults=[{"kind": "raise", "clients": [7]}]), tiny_data,
                       progress=False)


def _trained_clients(run_dir):
    frame = read_metrics(run_dir)
    train = frame[(frame.split == "train") & (frame.metric == "seconds")]
    return {int(r): sorted(int(c) for c in clients) for r, clients in train.groupby("round").client_id}


@pytest.mark.parametrize("restarts", [3, 0])
def test_a_killed_client_actor_is_restarted_and_its_clients_return(request, tiny_config, tiny_data, restarts):
    request.getfixturevalue("ray_session")
    kill = [{"kind": "kill", "clients": [0], "rounds": [1]}]
    result = run_experiment(tiny_config(backend="ray", rounds=4, faults=kill, clients_per_actor=1,
                                        actor_restarts=restarts), tiny_data, progress=False)
    trained = _trained_clients(result.run_dir)
    assert trained[0] == [0, 1, 2] and trained[1] == [1, 2]
    log = [json.loads(line) for line in (result.run_dir / "failures.jsonl").read_text().splitlines()]
    assert {(f["round"], f["client_id"], f["phase"]) for f in log} >= {(1, 0, "train")}
    if restarts:
        assert trained[2] == trained[3] == [0, 1, 2]                         # rebuilt from its partition
        assert result.summary["coverage"]["complete"]
    else:
        assert trained[2] == trained[3] == [1, 2]                            # dead for good, and said so
        assert not result.summary["coverage"]["complete"]


def test_a_kill_fault_needs_the_ray_backend(tiny_config):
    from fgl_ray.config import ConfigError

    with pytest.raises(ConfigError, match="kill fault ends a client actor's process, so it needs backend 'ray'"):
        tiny_config(backend="local", faults=[{"kind": "kill", "clients": [0]}])


def test_a_client_failing_evaluation_is_recorded_and_the_coverage_says_so(tiny_config, tiny_data, monkeypatch):
    from fgl_ray.runtime.client import ClientRuntime

    evaluate = ClientRuntime.evaluate

    def flaky(self, broadcast):
        if self.client_id == 1:
            raise RuntimeError("no evaluation today")
        return evaluate(self, broadcast)

    monkeypatch.setattr(ClientRuntime, "evaluate", flaky)
    result = run_experiment(tiny_config(backend="local", rounds=1), tiny_data, progress=False)
    frame = read_metrics(result.run_dir)
    failed = frame[frame.metric == "failed"]
    assert list(zip(failed["round"], failed.client_id, failed.split)) == [(0, "1", "evaluate")]
    tested = frame[(frame.split == "test") & (frame.metric == "accuracy") & (frame.client_id != "server")]
    assert sorted(tested.client_id) == ["0", "2"]
    log = [json.loads(line) for line in (result.run_dir / "failures.jsonl").read_text().splitlines()]
    assert [(f["client_id"], f["phase"]) for f in log] == [(1, "evaluate")]
    assert "no evaluation today" in log[0]["reason"]
    coverage = result.summary["coverage"]
    assert coverage["clients_evaluated_last"] == 2 and not coverage["complete"]


def test_sampled_clients_train_and_every_client_is_scored_every_eval_every_rounds(tiny_config, tiny_data):
    # 3 clients, fraction 2/3: two train per round; 5 rounds, every 2nd: scored after rounds 1, 3 and the last, 4
    result = run_experiment(tiny_config(backend="local", rounds=5, fraction_fit=0.67, eval_every=2), tiny_data,
                            progress=False)
    trained = _trained_clients(result.run_dir)
    assert sorted(trained) == [0, 1, 2, 3, 4] and all(len(clients) == 2 for clients in trained.values())
    assert len({tuple(clients) for clients in trained.values()}) > 1
    frame = read_metrics(result.run_dir)
    tested = frame[(frame.split == "test") & (frame.metric == "accuracy") & (frame.client_id != "server")]
    assert {int(r): sorted(c) for r, c in tested.groupby("round").client_id} == {1: ["0", "1", "2"],
                                                                                3: ["0", "1", "2"],
                                                                                4: ["0", "1", "2"]}
    assert result.summary["coverage"]["complete"]
