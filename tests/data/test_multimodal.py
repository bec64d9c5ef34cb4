"""Multimodal graphs: the generator's properties, packing, the on-disk format, two-view Cora, masks."""

import numpy as np
import pandas as pd
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import subgraph
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.model_selection import train_test_split

from fgl_ray.config import ConfigError, load_config
from fgl_ray.data import build_federated_data
from fgl_ray.data.missing import apply_missing, client_level, node_level, parse_missing
from fgl_ray.data.embeddings import structural_features
from fgl_ray.data.multimodal import MultimodalOptions, generate_multimodal, link_prediction_view, pack, unpack
from fgl_ray.data.types import ClientGraph
from fgl_ray.tasks import build_task

DIMS = (MultimodalOptions().visual_dim, MultimodalOptions().text_dim)


def _views(seed=0):
    (graph,) = generate_multimodal(MultimodalOptions(), seed)
    visual, text, available = unpack(graph.data.x, DIMS)
    return visual.numpy(), text.numpy(), available, graph.data.y.numpy()


def _accuracy(x, y):
    a, b, ya, yb = train_test_split(x, y, test_size=0.4, random_state=0)
    return LogisticRegression(max_iter=2000).fit(a, ya).score(b, yb)


def test_each_modality_is_informative_but_imperfect_and_both_know_more():
    visual, text, available, y = _views()
    chance = 1 / MultimodalOptions().num_classes
    alone = [_accuracy(visual, y), _accuracy(text, y)]
    both = _accuracy(np.hstack([visual, text]), y)
    assert all(chance + 0.2 < a < 0.8 for a in alone)
    assert both > max(alone) + 0.03
    assert bool(available.all())


def test_one_modality_is_partly_predictable_from_the_other():
    visual, text, _, _ = _views()
    a, b, ta, tb = train_test_split(visual, text, test_size=0.4, random_state=0)
    assert Ridge(1.0).fit(a, ta).score(b, tb) > 0.1


def test_the_generator_is_deterministic_and_homophilous():
    (a,), (b,), (c,) = (generate_multimodal(MultimodalOptions(), s) for s in (3, 3, 4))
    assert torch.equal(a.data.x, b.data.x) and torch.equal(a.data.edge_index, b.data.edge_index)
    assert not torch.equal(a.data.x, c.data.x)
    src, dst = a.data.edge_index
    same = float((a.data.y[src] == a.data.y[dst]).float().mean())
    assert same == pytest.approx(MultimodalOptions().homophily, abs=0.05)


def test_pack_and_unpack_are_inverse_and_the_layout_is_checked():
    visual, text = torch.randn(5, 3), torch.randn(5, 4)
    available = torch.tensor([[1, 1], [0, 1], [1, 0], [1, 1], [1, 1]], dtype=torch.bool)
    v, t, a = unpack(pack(visual, text, available), (3, 4))
    assert torch.equal(v, visual) and torch.equal(t, text) and torch.equal(a, available)
    with pytest.raises(ValueError, match="expected 3 \\+ 5 \\+ 2"):
        unpack(pack(visual, text), (3, 5))


# ------------------------------------------------------------------ missingness
def test_missing_spec_is_parsed_or_refused_with_the_form():
    assert parse_missing("node:0.5") == ("node", 0.5)
    for bad in ("node", "edge:0.5", "client:1.5", "client:x"):
        with pytest.raises(ValueError, match="client:<rate>' or 'node:<rate>"):
            parse_missing(bad)


@pytest.mark.parametrize("rate", [0.3, 0.5, 0.7])
def test_client_level_masks_remove_one_modality_from_exactly_that_share_of_clients(rate):
    data = build_federated_data(load_config({"dataset": "synthetic-mm", "num_clients": 10,
                                             "missing": f"client:{rate}"}))
    lost = 0
    for client in data.clients:
        available = unpack(client.data.x, DIMS)[2]
        assert bool(available.any(dim=1).all())                            # never both
        per_modality = available.all(dim=0)
        assert bool((available == available[0]).all())                     # constant per client
        lost += int(not bool(per_modality.all()))
    assert lost == int(np.floor(rate * 10 + 0.5))


@pytest.mark.parametrize("rate", [0.3, 0.5, 0.7])
def test_node_level_masks_hit_the_exact_rate_in_every_client_and_zero_the_placeholders(rate):
    data = build_federated_data(load_config({"dataset": "synthetic-mm", "num_clients": 5, "missing": f"node:{rate}"}))
    for client in data.clients:
        visual, text, available = unpack(client.data.x, DIMS)
        incomplete = int((~available).any(dim=1).sum())
        assert incomplete == int(np.floor(rate * client.data.num_nodes + 0.5))
        assert bool(available.any(dim=1).all())
        assert float(visual[~available[:, 0]].abs().sum()) == 0 and float(text[~available[:, 1]].abs().sum()) == 0


def test_masks_are_deterministic_from_the_seed():
    assert client_level(10, 0.5, 1) == client_level(10, 0.5, 1) != client_level(10, 0.5, 2)
    assert torch.equal(node_level(50, 0.5, 1, 3), node_level(50, 0.5, 1, 3))
    assert not torch.equal(node_level(50, 0.5, 1, 3), node_level(50, 0.5, 1, 4))


def test_applying_masks_never_alters_the_partition():
    data = build_federated_data(load_config({"dataset": "synthetic-mm", "num_clients": 5}))
    before = data.clients[0].data.x.clone()
    apply_missing(data.clients, "node:0.5", DIMS, seed=0)
    assert torch.equal(data.clients[0].data.x, before)


def test_missing_on_a_plain_graph_is_refused():
    with pytest.raises(ConfigError, match="not multimodal"):
        load_config({"dataset": "cora", "partition": "louvain", "missing": "node:0.5"})


# ------------------------------------------------------------------ on-disk format and two-view graphs
def _write_folder(root, n=40, labels=None):
    folder = root / "MultimodalGraph" / "toy"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    pd.DataFrame({"node": np.arange(n)[::-1], "label": (labels if labels is not None else np.arange(n) % 3)[::-1]}) \
        .to_csv(folder / "nodes.csv", index=False)
    ring = np.stack([np.arange(n), (np.arange(n) + 1) % n])
    pd.DataFrame({"src": ring[0], "dst": ring[1]}).to_csv(folder / "edges.csv", index=False)
    np.save(folder / "visual.npy", rng.standard_normal((n, 6)).astype(np.float32))
    np.save(folder / "text.npy", rng.standard_normal((n, 4)).astype(np.float32))
    return folder


def test_an_on_disk_multimodal_graph_loads_by_name(tmp_path):
    folder = _write_folder(tmp_path)
    config = load_config({"dataset": "mm:toy", "data_dir": str(tmp_path), "num_clients": 2})
    assert config.model == "mm_gnn" and config.resolved_task() == "node-classification"
    data = build_federated_data(config)
    assert data.meta["model_options"] == {"modality_dims": [6, 4]}
    assert sum(c.data.num_nodes for c in data.clients) == 40 and data.num_classes == 3
    visual = np.load(folder / "visual.npy")
    first = data.clients[0]
    # features follow the node ids of nodes.csv (written in reverse order)
    loaded = unpack(first.data.x, (6, 4))[0]
    assert any(np.allclose(loaded[0].numpy(), row) for row in visual)


def test_a_broken_on_disk_graph_names_the_file(tmp_path):
    folder = _write_folder(tmp_path)
    (folder / "text.npy").unlink()
    with pytest.raises(ValueError, match="lacks text.npy"):
        build_federated_data(load_config({"dataset": "mm:toy", "data_dir": str(tmp_path), "num_clients": 2}))


def test_partly_labelled_on_disk_graphs_are_refused(tmp_path):
    labels = np.arange(40) % 3
    labels[5] = -1
    _write_folder(tmp_path, labels=labels)
    with pytest.raises(ValueError, match="every node a label, or none"):
        build_federated_data(load_config({"dataset": "mm:toy", "data_dir": str(tmp_path), "num_clients": 2}))


def test_two_view_cora_pairs_bag_of_words_with_structure(shared_datasets):
    data = build_federated_data(load_config({"dataset": "cora-mm", "data_dir": str(shared_datasets),
                                             "num_clients": 5}))
    assert data.meta["model_options"] == {"modality_dims": [128, 1433]}
    assert sum(c.data.num_nodes for c in data.clients) == 2708 and data.num_classes == 7


def test_an_unlabelled_on_disk_graph_refuses_node_classification_but_serves_the_other_tasks(tmp_path):
    from fgl_ray.data.partition import PartitionError

    _write_folder(tmp_path, labels=np.full(40, -1))
    values = {"dataset": "mm:toy", "data_dir": str(tmp_path), "num_clients": 2}
    with pytest.raises(PartitionError, match="no node labels"):
        build_federated_data(load_config(values))
    data = build_federated_data(load_config(values | {"task": "modality-retrieval"}))
    assert data.num_classes == 1


def test_link_prediction_view_embeds_the_whole_graph_without_the_held_out_edges_the_task_uses():
    (graph,) = generate_multimodal(MultimodalOptions(num_nodes=120, communities=2), seed=3)
    x = torch.cat([torch.zeros(120, 8), graph.data.x], dim=1)          # an 8-wide "structure" block first
    nodes = [torch.arange(0, 120, 2), torch.arange(1, 120, 2)]        # two clients, interleaved ids
    clients = []
    for client_id, ids in enumerate(nodes):
        edges, _ = subgraph(ids, graph.data.edge_index, relabel_nodes=True, num_nodes=120)
        clients.append(ClientGraph(client_id, "d", Data(x=x[ids], edge_index=edges, y=graph.data.y[ids],
                                                        train_mask=torch.ones(60, dtype=torch.bool))))
    built = link_prediction_view(Data(x=x, edge_index=graph.data.edge_index, num_nodes=120), clients, nodes, 8,
                                 (0.6, 0.2, 0.2), data_seed=5)
    # the held-out edges as the task draws them on each client, mapped to global ids by hand
    task = build_task(load_config({"dataset": "synthetic-mm", "task": "link-prediction", "data_seed": 5}))
    held_out = set()
    for client, ids in zip(clients, nodes):
        prepared = task.prepare(client, None, "cpu")
        for pair in torch.cat([prepared.val_pos, prepared.test_pos], dim=1).T.tolist():
            held_out |= {(int(ids[pair[0]]), int(ids[pair[1]])), (int(ids[pair[1]]), int(ids[pair[0]]))}
    assert held_out
    kept = torch.tensor([e for e in graph.data.edge_index.T.tolist() if tuple(e) not in held_out]).T
    expected = structural_features(kept, 120, 8)
    for client, ids in zip(built, nodes):
        torch.testing.assert_close(client.data.x[:, :8], expected[ids])               # one basis for every client
        torch.testing.assert_close(client.data.x[:, 8:], x[ids, 8:])                  # the other view is kept
    assert all(c.data.x[:, :8].abs().sum() == 0 for c in clients)                     # the inputs are not altered
