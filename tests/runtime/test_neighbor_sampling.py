"""Neighbour-sampled mini-batches: the sampler's draws, the equality with full-batch training when
nothing is left out, placement-independent runs, steps in the summary, and the refusals."""

from __future__ import annotations

import copy
import math

import numpy as np
import pandas as pd
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from fgl_ray.algorithms import ALGORITHMS
from fgl_ray.config import ConfigError, load_config
from fgl_ray.models import MODELS
from fgl_ray.results import read_metrics
from fgl_ray.runtime import run_experiment
from fgl_ray.tasks.sampling import neighbor_loader, neighbor_sampler

SAMPLED = {"node_batching": "neighbor", "num_neighbors": [3, 2], "batch_size": 8}
#: The node-classification algorithms that train on the task's batches (the rest need whole graphs).
BATCHED = [name for name in ALGORITHMS.names() if "node-classification" in ALGORITHMS.get(name).tasks
           and ALGORITHMS.get(name).whole_graph is None and ALGORITHMS.get(name).models in (None, ("sage",))]


def _graph(num_nodes=300, num_edges=1500, seed=0) -> Data:
    generator = torch.Generator().manual_seed(seed)
    edge_index = to_undirected(torch.randint(0, num_nodes, (2, num_edges), generator=generator), num_nodes=num_nodes)
    return Data(x=torch.randn(num_nodes, 4, generator=generator), edge_index=edge_index,
                y=torch.zeros(num_nodes, dtype=torch.long))


def _loader(graph: Data, seeds, fanouts, batch_size: int):
    return neighbor_loader(graph, neighbor_sampler(graph, fanouts), seeds, batch_size, shuffle=False)


def _in_neighbours(graph: Data, node: int) -> set[int]:
    source, target = graph.edge_index
    return set(source[target == node].tolist())


def test_a_batch_holds_its_seeds_first_and_only_real_edges_at_most_the_fanout_per_node():
    graph = _graph()
    seeds = torch.arange(0, 300, 7)
    batch = next(iter(_loader(graph, seeds, [4, 2], batch_size=20)))
    assert torch.equal(batch.n_id[:20], seeds[:20]) and batch.batch_size == 20
    assert batch.n_id.unique().numel() == batch.n_id.numel()              # every node once
    source, target = batch.n_id[batch.edge_index[0]], batch.n_id[batch.edge_index[1]]
    assert torch.equal(graph.edge_index[:, batch.e_id], torch.stack([source, target]))   # edge ids are the graph's
    first_hop, second_hop = batch.num_sampled_edges
    drawn = torch.bincount(batch.edge_index[1], minlength=batch.num_nodes)
    assert int(drawn[:20].max()) <= 4 and int(drawn[20:].max()) <= 2
    for row, node in enumerate(batch.n_id[:20].tolist()):                 # all neighbours when the degree allows
        neighbours = _in_neighbours(graph, node)
        drawn_here = set(source[:first_hop][batch.edge_index[1][:first_hop] == row].tolist())
        assert drawn_here <= neighbours and len(drawn_here) == min(4, len(neighbours))


def test_draws_are_uniform_without_replacement():
    graph = _graph(num_nodes=50, num_edges=600)
    node = int(torch.bincount(graph.edge_index[1]).argmax())
    neighbours = sorted(_in_neighbours(graph, node))
    loader = _loader(graph, torch.tensor([node]), [3], batch_size=1)
    torch.manual_seed(0)
    counts = dict.fromkeys(neighbours, 0)
    draws = 3000
    for _ in range(draws):
        batch = next(iter(loader))
        drawn = batch.n_id[batch.edge_index[0]].tolist()
        assert len(set(drawn)) == 3                                       # without replacement
        for neighbour in drawn:
            counts[neighbour] += 1
    expected = draws * 3 / len(neighbours)
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2 < len(neighbours) - 1 + 5 * math.sqrt(2 * (len(neighbours) - 1))   # ~5 sigma


def _scores(run) -> pd.DataFrame:
    frame = read_metrics(run.run_dir).drop(columns="run_id")
    frame = frame[~frame.metric.str.contains("seconds|steps")]
    return frame.sort_values(["round", "client_id", "domain", "split", "metric"]).reset_index(drop=True)


def test_every_neighbour_and_one_batch_give_the_full_batch_result(tiny_config, tiny_data):
    """GraphSAGE's mean over all in-neighbours, with all training nodes in one batch: the same loss,
    gradients and scores as the whole graph (up to summation order)."""
    base = dict(backend="local", model="sage", dropout=0.0, rounds=3)
    full = run_experiment(tiny_config(run_name="full", **base), tiny_data, progress=False)
    largest = max(int(client.data.train_mask.sum()) for client in tiny_data.clients)
    sampled = run_experiment(tiny_config(run_name="sampled", node_batching="neighbor", num_neighbors=[-1, -1],
                                         batch_size=largest, eval_batching="sampled", **base), tiny_data,
                             progress=False)
    pd.testing.assert_frame_equal(_scores(sampled), _scores(full), check_exact=False, atol=1e-5, rtol=0)


def test_sampled_runs_do_not_depend_on_placement(request, tiny_config, tiny_data):
    request.getfixturevalue("ray_session")
    runs = [run_experiment(tiny_config(backend=b, run_name=b, eval_batching="sampled", clients_per_actor=2,
                                       **SAMPLED), tiny_data, progress=False) for b in ("local", "ray")]
    pd.testing.assert_frame_equal(*(_scores(r) for r in runs), check_exact=True)


def test_the_summary_states_the_local_steps(tiny_config, tiny_data):
    run = run_experiment(tiny_config(backend="local", run_name="steps", **SAMPLED), tiny_data, progress=False)
    batches = [math.ceil(int(client.data.train_mask.sum()) / SAMPLED["batch_size"]) for client in tiny_data.clients]
    work = run.summary["local_work"]
    assert work["node_batching"] == "neighbor"
    assert work["steps_per_client_round"] == pytest.approx(2 * np.mean(batches))          # local_epochs = 2
    assert work["steps_per_round"] == pytest.approx(2 * sum(batches))


def test_training_on_sampled_batches_learns(tiny_config, tiny_data):
    run = run_experiment(tiny_config(backend="local", run_name="learns", rounds=8, **SAMPLED), tiny_data,
                         progress=False)
    rows = read_metrics(run.run_dir)
    accuracy = rows[(rows.client_id == "server") & (rows.domain == "all") & (rows.split == "test")
                    & (rows.metric == "accuracy")].sort_values("round")["value"]
    assert accuracy.iloc[-1] > max(accuracy.iloc[0], 1 / tiny_data.num_classes + 0.1)


@pytest.mark.parametrize("changes, message", [
    ({"algorithm": "fedepd", **SAMPLED}, "fedepd.*whole graph.*node_batching 'full'"),
    ({"algorithm": "fedsage_plus", "model": "sage", **SAMPLED}, "fedsage_plus.*whole graph"),
    ({"dataset": "synthetic-graphs", **SAMPLED}, "node classification.*node_batching 'full'"),
    ({**SAMPLED, "num_neighbors": [5]}, "one fanout per layer"),
    ({**SAMPLED, "num_neighbors": [5, 0]}, "each >= 1 or -1"),
    ({"eval_batching": "sampled"}, "need node_batching 'neighbor'"),
    ({"device": "cuda", "backend": "ray"}, "gpus_per_client"),
])
def test_settings_that_cannot_sample_are_refused_with_the_fix(changes, message):
    with pytest.raises(ConfigError, match=message):
        load_config(changes)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_refused_before_anything_runs():
    with pytest.raises(ConfigError, match="torch sees no CUDA device.*--device cpu"):
        load_config({"device": "cuda", "backend": "local"})


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: auto means cuda there")
def test_device_cpu_and_auto_give_identical_rows_on_a_machine_without_a_gpu(tiny_config, tiny_data):
    runs = [run_experiment(tiny_config(backend="local", run_name=d, device=d), tiny_data, progress=False)
            for d in ("cpu", "auto")]
    pd.testing.assert_frame_equal(*(_scores(r) for r in runs), check_exact=True)


def test_graphsage_computes_only_what_the_seeds_read_and_gets_the_same_seed_logits():
    from fgl_ray.models import build_model

    graph = _graph(num_nodes=400, num_edges=3000)
    batch = next(iter(_loader(graph, torch.arange(0, 400, 5), [4, 3, 2], batch_size=30)))
    model = build_model("sage", 4, 3, hidden=8, num_layers=3).eval()
    hops = (batch.num_sampled_nodes, batch.num_sampled_edges)
    with torch.no_grad():
        whole = model.classify(model.encode(batch.x, batch.edge_index), batch.edge_index)
        z = model.encode(batch.x, batch.edge_index, hops=hops)
        trimmed = model.classify(z, batch.edge_index, hops=hops)
    assert trimmed.shape == whole.shape
    torch.testing.assert_close(trimmed[:30], whole[:30], rtol=0, atol=1e-6)
    assert not trimmed[30:].any()                                   # rows no layer computed
    within_one_hop = sum(batch.num_sampled_nodes[:2])
    assert z[within_one_hop:].abs().sum() == 0 and z[:within_one_hop].abs().sum() > 0


@pytest.mark.parametrize("algorithm", BATCHED)
def test_every_algorithm_that_trains_on_task_batches_runs_sampled(tiny_config, tiny_data, algorithm):
    run = run_experiment(tiny_config(backend="local", run_name=algorithm, algorithm=algorithm, model="sage",
                                     **SAMPLED), tiny_data, progress=False)
    rows = read_metrics(run.run_dir)
    assert rows[rows.metric == "failed"].empty
    assert rows[(rows.split == "test") & (rows.metric == "accuracy")]["value"].between(0, 1).all()
    assert len(BATCHED) >= 6


@pytest.mark.parametrize("changes", [{}, {**SAMPLED, "eval_batching": "sampled"}])
def test_a_whole_graph_is_predicted_once_for_both_splits(tiny_config, tiny_data, changes):
    from fgl_ray.models import build_model
    from fgl_ray.tasks import build_task

    config = tiny_config(backend="local", **changes)
    task = build_task(config)
    graph = tiny_data.clients[0]
    model = build_model("gcn", tiny_data.num_features, tiny_data.num_classes, hidden=8).eval()
    data = task.prepare(graph, model, "cpu")
    calls = []

    def predict(batch):
        calls.append(batch)
        return model(batch.x, batch.edge_index)

    stats = task.evaluate(predict, data, tiny_data.num_classes)
    batches = {split: list(task.split_batches(data, split)) for split in ("val", "test")}
    expected = 1 if not changes else sum(len(b) for b in batches.values())
    assert len(calls) == expected
    for split in ("val", "test"):                                    # every split node counted once
        assert stats[split]["confusion"].sum() == int(getattr(graph.data, f"{split}_mask").sum())


def test_every_loader_of_a_client_shares_one_sampler(tiny_config, tiny_data):
    """The in-edge index is built once per client graph, not once per loader."""
    from fgl_ray.models import build_model
    from fgl_ray.tasks import build_task

    task = build_task(tiny_config(backend="local", eval_batching="sampled", **SAMPLED))
    model = build_model("sage", tiny_data.num_features, tiny_data.num_classes, hidden=8)
    data = task.prepare(tiny_data.clients[0], model, "cpu")
    loaders = [data.train, data.ordered, *data.splits.values()]
    assert len(loaders) == 4 and len({id(loader.node_sampler) for loader in loaders}) == 1


NODE_MODELS = [name for name in MODELS.names() if "node-classification" in MODELS.get(name).tasks
               and name != "mm_gnn"]
MULTIMODAL = {"dataset": "synthetic-mm", "synthetic": {"num_nodes": 240, "communities": 6}, "num_clients": 3,
              "partition": "louvain"}


@pytest.mark.parametrize("model", NODE_MODELS)
def test_every_node_backbone_trains_on_sampled_batches(tiny_config, tiny_data, model):
    run = run_experiment(tiny_config(backend="local", run_name=model, model=model, **SAMPLED), tiny_data,
                         progress=False)
    rows = read_metrics(run.run_dir)
    assert rows[rows.metric == "failed"].empty and run.summary["coverage"]["complete"]


@pytest.mark.parametrize("algorithm", ["fedavg", "fedavg_fill", "fedmgs"])
def test_the_multimodal_backbone_trains_on_sampled_batches(tiny_config, algorithm):
    """mm_gnn's convolutions once cached the first graph's normalisation (PyG's ``cached=True``),
    so every later sampled batch failed; each batch is now normalised as itself."""
    run = run_experiment(tiny_config(backend="local", run_name=algorithm, algorithm=algorithm, **MULTIMODAL,
                                     **SAMPLED), progress=False)
    rows = read_metrics(run.run_dir)
    assert rows[rows.metric == "failed"].empty and run.summary["coverage"]["complete"]
    assert run.summary["local_work"]["node_batching"] == "neighbor"


@pytest.mark.parametrize("model", ["gcn", "mm_gnn"])
def test_a_model_shown_a_second_graph_propagates_over_that_graph(model):
    from fgl_ray.models import build_model

    options = {"modality_dims": (4, 4)} if model == "mm_gnn" else {}
    first, second = _graph(40, 120, seed=1), _graph(60, 200, seed=2)
    width = 10 if model == "mm_gnn" else 8
    x_first, x_second = torch.rand(40, width), torch.rand(60, width)
    if model == "mm_gnn":
        x_first[:, -2:], x_second[:, -2:] = 1.0, 1.0                  # both modalities available
    torch.manual_seed(0)
    used = build_model(model, width, 3, hidden=8, dropout=0.0, **options).eval()
    fresh = copy.deepcopy(used)
    used.encode(x_first, first.edge_index)
    torch.testing.assert_close(used.encode(x_second, second.edge_index), fresh.encode(x_second, second.edge_index))


LAYERWISE = {"model": "sage", "eval_batching": "layerwise", "batch_size": 7}


def test_layer_chunks_hold_every_in_edge_once_grouped_by_target():
    from fgl_ray.tasks.sampling import InEdgeChunks

    graph = _graph(50, 300, seed=3)
    seen = []
    for start, stop, edges in InEdgeChunks(graph.edge_index, graph.num_nodes, chunk=8):
        assert edges[1].min() >= 0 and edges[1].max() < stop - start
        seen += list(zip(edges[0].tolist(), (edges[1] + start).tolist()))
    assert sorted(seen) == sorted(zip(*graph.edge_index.tolist()))


@pytest.mark.parametrize("training", [{}, SAMPLED])
def test_layerwise_evaluation_gives_the_full_evaluation(tiny_config, tiny_data, training):
    """Chunks of 7 target nodes, each from all its in-edges, layer by layer: the same rows as one
    full pass (to float tolerance), with full-batch or sampled training."""
    runs = [run_experiment(tiny_config(backend="local", run_name=name, **(LAYERWISE | training | changes)),
                           tiny_data, progress=False)
            for name, changes in (("full", {"eval_batching": "full"}), ("layerwise", {}))]
    rows = [read_metrics(run.run_dir) for run in runs]
    rows = [frame[~frame.metric.str.contains("seconds")].drop(columns="run_id")
            .sort_values(["round", "client_id", "domain", "split", "metric"]).reset_index(drop=True) for frame in rows]
    pd.testing.assert_frame_equal(rows[0], rows[1], atol=1e-5, rtol=0)
    assert runs[1].summary["coverage"]["complete"]


@pytest.mark.parametrize("changes, message", [
    ({"model": "gcn"}, "which model 'gcn' cannot; use --model sage.*holds no per-edge messages"),
    ({"model": "gcn", "model_options": {"aggregation": "scatter"}}, r"which model 'gcn' cannot; use --model sage.*'neighbor'\)(?! \()"),
    ({"model": "mlp"}, r"which model 'mlp' cannot; use --model sage.*'neighbor'\)(?! \()"),
    ({"algorithm": "fedepd"}, "evaluates through its own graph, not layer by layer"),
    ({"dataset": "synthetic-mm", "task": "link-prediction", "model": "sage"}, "evaluates node classification"),
])
def test_layerwise_evaluation_is_refused_where_it_cannot_be_exact(changes, message):
    with pytest.raises(ConfigError, match=message):
        load_config({"eval_batching": "layerwise", "model": "sage"} | changes)
