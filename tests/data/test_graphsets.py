"""Graph-classification federations: chunks, per-dataset groups, splits, degree features, COLLAB."""

import pickle
import zipfile

import pytest
import torch
from torch_geometric.data import Data

from fgl_ray.config import load_config
from fgl_ray.data import build_federated_data
from fgl_ray.data.datasets import read_dgcnn_zip
from fgl_ray.data.graphsets import chunk_clients, compact_graphs, dataset_clients, graph_federation, one_hot_degree
from fgl_ray.data.partition import PartitionError
from fgl_ray.data.synthetic import generate_graphs

SPLIT = (0.8, 0.1, 0.1)
# From shared/datasets/README.md (graphs / node features / classes).
PROTEINS_GRAPHS = 1113
MOLECULE_WIDTHS = {"MUTAG": 7, "BZR": 53, "COX2": 35, "DHFR": 53, "PTC_MR": 18, "AIDS": 38, "NCI1": 37}


def _labelled(count, num_classes=2, seed=0):
    graphs = generate_graphs(seed, num_graphs=count, num_classes=num_classes)
    for index, graph in enumerate(graphs):
        graph.index = torch.tensor([index])                              # to follow graphs through the split
    return graphs


def test_one_hot_degree_by_hand_and_capped():
    edge_index = torch.tensor([[0, 0, 0, 1, 2, 3], [1, 2, 3, 0, 0, 0]])  # a star: degrees 3, 1, 1, 1
    assert one_hot_degree(edge_index, 5, cap=10).argmax(1).tolist() == [3, 1, 1, 1, 0]
    capped = one_hot_degree(edge_index, 5, cap=2)
    assert capped.shape == (5, 3) and capped.argmax(1).tolist() == [2, 1, 1, 1, 0]


def test_compact_copies_do_not_share_storage_and_featureless_graphs_get_degrees():
    big = torch.arange(40.0).reshape(20, 2)
    view = Data(x=big[4:8], edge_index=torch.tensor([[0, 1], [1, 0]]), y=torch.tensor([1]))
    bare = Data(edge_index=torch.tensor([[0, 1], [1, 0]]), y=torch.tensor([0]), num_nodes=3)
    kept, featureless = compact_graphs([view, bare])
    assert kept.x.untyped_storage().nbytes() == 4 * 2 * 4 and torch.equal(kept.x, big[4:8])
    assert featureless.x.shape == (3, 136) and featureless.x.sum() == 3


def test_chunks_cover_every_graph_once_in_balanced_seeded_clients():
    graphs = _labelled(103)
    clients = chunk_clients("toy", graphs, 10, SPLIT, "stratified", seed=4)
    sizes = [c.data.num_graphs for c in clients]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 103
    seen = sorted(int(g.index) for c in clients for g in c.data.graphs)
    assert seen == list(range(103))
    again = chunk_clients("toy", graphs, 10, SPLIT, "stratified", seed=4)
    other = chunk_clients("toy", graphs, 10, SPLIT, "stratified", seed=5)
    assert [int(g.index) for g in again[3].data.graphs] == [int(g.index) for g in clients[3].data.graphs]
    assert [int(g.index) for g in other[3].data.graphs] != [int(g.index) for g in clients[3].data.graphs]
    assert {c.domain for c in clients} == {"toy"}


def test_client_splits_are_stratified_disjoint_and_cover_the_client():
    clients = chunk_clients("toy", _labelled(400), 4, SPLIT, "stratified", seed=0)
    for client in clients:
        data = client.data
        masks = torch.stack([data.train_mask, data.val_mask, data.test_mask]).int()
        assert torch.equal(masks.sum(0), torch.ones(data.num_graphs, dtype=torch.int))
        for label in (0, 1):
            members = data.y == label
            assert abs(int((data.train_mask & members).sum()) - 0.8 * int(members.sum())) <= 1


def test_max_graphs_keeps_that_many_per_dataset():
    clients = chunk_clients("toy", _labelled(100), 5, SPLIT, "stratified", seed=0, limit=30)
    assert sum(c.data.num_graphs for c in clients) == 30
    group = dataset_clients({"a": _labelled(50), "b": _labelled(20, seed=1)}, SPLIT, "stratified", 0, limit=25)
    assert [c.data.num_graphs for c in group] == [25, 20]


def test_a_group_gets_one_client_per_dataset_with_its_own_width_and_labels():
    wide = [Data(x=torch.ones(3, 7), edge_index=torch.empty(2, 0, dtype=torch.long), y=torch.tensor([i % 3]))
            for i in range(20)]
    data = graph_federation({"toy": compact_graphs(_labelled(30)), "wide": wide}, "datasets", 99, SPLIT,
                            "stratified", seed=0)
    assert [c.domain for c in data.clients] == ["toy", "wide"]
    assert [(c.data.num_features, c.data.num_classes) for c in data.clients] == [(16, 2), (7, 3)]
    assert (data.num_features, data.num_classes) == (16, 3)


def test_more_clients_than_graphs_is_a_partition_error():
    with pytest.raises(PartitionError, match="fewer than num_clients"):
        graph_federation({"toy": _labelled(5)}, "chunks", 6, SPLIT, "stratified", seed=0)


def _dgcnn_zip(path, graphs):
    lines = [str(len(graphs))]
    for label, adjacency in graphs:
        lines.append(f"{len(adjacency)} {label}")
        lines += [" ".join(["0", str(len(nbrs)), *map(str, nbrs)]) for nbrs in adjacency]
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("COLLAB/COLLAB.txt", "\n".join(lines) + "\n")


def test_dgcnn_zip_is_read_into_graphs_with_degree_features(tmp_path):
    triangle = [[1, 2], [0, 2], [0, 1]]
    path_graph = [[1], [0, 2], [1]]
    _dgcnn_zip(tmp_path / "c.zip", [(2, triangle), (0, path_graph)])
    first, second = read_dgcnn_zip(tmp_path / "c.zip", "COLLAB")
    assert first.y.tolist() == [2] and second.y.tolist() == [0]
    assert first.edge_index.shape == (2, 6) and first.x.argmax(1).tolist() == [2, 2, 2]
    assert second.x.argmax(1).tolist() == [1, 2, 1]


def test_collab_is_expanded_into_the_cache_once(tmp_path):
    from fgl_ray.data.datasets import _load_collab

    root = tmp_path / "root"
    (root / "TUDataset/_original").mkdir(parents=True)
    _dgcnn_zip(root / "TUDataset/_original/COLLAB.zip", [(1, [[1], [0]])] * 4)
    cache = tmp_path / "cache"
    graphs = _load_collab(root, cache)
    assert len(graphs) == 4 and (cache / "TUDataset/COLLAB/processed/fgl_graphs.pt").is_file()
    (root / "TUDataset/_original/COLLAB.zip").unlink()                      # the cached expansion is enough now
    assert len(_load_collab(root, cache)) == 4


def test_synthetic_graphs_are_deterministic_and_every_class_is_present():
    a, b, c = generate_graphs(1), generate_graphs(1), generate_graphs(2)
    assert all(torch.equal(x.edge_index, y.edge_index) for x, y in zip(a, b))
    assert any(not torch.equal(x.edge_index, y.edge_index) for x, y in zip(a, c))
    assert sorted({int(g.y) for g in a}) == [0, 1, 2]


# ------------------------------------------------------------------ the real TU files
def _config(values, shared_datasets):
    return load_config(values | {"data_dir": str(shared_datasets)})


def test_proteins_chunks_hold_every_graph_and_a_client_pickles_only_its_own(shared_datasets):
    data = build_federated_data(_config({"dataset": "tu-proteins", "num_clients": 10}, shared_datasets))
    assert sum(c.data.num_graphs for c in data.clients) == PROTEINS_GRAPHS
    sizes = [len(pickle.dumps(c)) for c in data.clients]
    nodes = [c.data.num_nodes for c in data.clients]
    whole = len(pickle.dumps(data.clients))
    for size, count in zip(sizes, nodes):
        share = count / sum(nodes)
        assert size < 2 * share * whole                                       # about its share, not the dataset
    assert sum(sizes) < 1.1 * whole


def test_molecules_group_keeps_each_datasets_width(shared_datasets):
    data = build_federated_data(_config({"dataset": "tu-molecules"}, shared_datasets))
    assert [c.domain for c in data.clients] == list(MOLECULE_WIDTHS)
    assert {c.domain: c.data.num_features for c in data.clients} == MOLECULE_WIDTHS


def test_imdb_gets_one_hot_degree_features(shared_datasets):
    data = build_federated_data(_config({"dataset": "tu-imdb-binary", "num_clients": 10}, shared_datasets))
    graph = data.clients[0].data.graphs[0]
    assert graph.x.shape[1] == 136 and torch.equal(graph.x.sum(1), torch.ones(graph.num_nodes))


def test_ordered_chunks_give_each_client_its_file_order_block_and_spread_the_rest():
    from fgl_ray.data.graphsets import ordered_chunks

    for num_graphs, num_clients in ((1113, 10), (230, 10), (188, 3)):
        chunks = ordered_chunks(num_graphs, num_clients, seed=0)
        size = min(50, num_graphs // num_clients)
        assert sorted(i for chunk in chunks for i in chunk) == list(range(num_graphs))   # each graph once
        for client, chunk in enumerate(chunks):
            assert chunk[:size] == list(range(client * size, (client + 1) * size))
        rest = [len(chunk) - size for chunk in chunks]
        assert sum(rest) == num_graphs - num_clients * size
    assert ordered_chunks(1113, 10, seed=0) == ordered_chunks(1113, 10, seed=0)
    assert ordered_chunks(1113, 10, seed=0) != ordered_chunks(1113, 10, seed=1)


def test_chunks_ordered_builds_a_federation_in_file_order():
    from fgl_ray.data.graphsets import graph_federation

    graphs = [Data(x=torch.ones(i % 7 + 2, 3), edge_index=torch.zeros(2, 0, dtype=torch.long),
                   y=torch.tensor([i * 2 // 120])) for i in range(120)]          # sorted by class, as TU files are
    data = graph_federation({"sorted": graphs}, "chunks_ordered", 4, (0.8, 0.1, 0.1), "random", seed=0)
    first = data.clients[0].data
    assert first.num_graphs >= 30 and int(first.y[:30].sum()) == 0                 # a block of class 0 only
    assert sum(c.data.num_graphs for c in data.clients) == 120
