"""The dataset registry and loading the real offline datasets (skipped when they are absent)."""

import pytest
import torch
from torch_geometric.utils import is_undirected

from fgl_ray.config import load_config
from fgl_ray.data import build_federated_data, load_graph_dataset
from fgl_ray.data.datasets import DATASETS, available_offline

# Facts about the offline files, from shared/datasets/README.md.
TWITCH_NODES = {"DE": 9498, "EN": 7126, "ES": 4648, "FR": 6549, "PT": 1912, "RU": 4385}
TWITCH_PT_DIRECTED_EDGES_WITH_LOOPS = 64510  # "both directions plus one self-loop per node"
TWITCH_FEATURES = 3170
CORA = {"nodes": 2708, "directed_edges": 10556, "features": 1433, "classes": 7}
WIKI_NODES = {"chameleon": 2277, "squirrel": 5201, "crocodile": 11631}
MUTAG_GRAPHS = 188


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory):
    """The session's dataset cache (the same folder the root conftest points FGL_CACHE_DIR at)."""
    return tmp_path_factory.getbasetemp() / "fgl-cache"


def _build(values, cache):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FGL_CACHE_DIR", str(cache))
        return build_federated_data(load_config(values))


@pytest.fixture(scope="session")
def twitch_s1(shared_datasets, session_cache):
    return _build({"dataset": "twitch", "partition": "twitch-S1", "data_dir": str(shared_datasets)}, session_cache)


def _check_clients(data):
    for client in data.clients:
        graph = client.data
        assert graph.x.dtype == torch.float32 and graph.y.dtype == torch.int64
        assert graph.x.size(1) == data.num_features
        assert is_undirected(graph.edge_index, num_nodes=graph.num_nodes)
        assert not (graph.edge_index[0] == graph.edge_index[1]).any()
        assert graph.edge_index.numel() == 0 or int(graph.edge_index.max()) < graph.num_nodes


# ------------------------------------------------------------------ registry
def test_registry_names_domains_and_splits():
    required = {"synthetic", "twitch", "wikinet", "cora", "citeseer", "email-eu-core", "tolokers", "minesweeper"}
    required |= {f"twitch-{language.lower()}" for language in TWITCH_NODES}
    required |= {f"tu-{name}" for name in ("mutag", "proteins", "enzymes", "nci1", "ptc_mr", "imdb-binary",
                                           "imdb-multi", "cox2", "bzr", "dd", "dhfr", "aids")}
    assert required <= set(DATASETS.names())
    assert DATASETS.get("twitch").domains == tuple(TWITCH_NODES)
    assert DATASETS.get("twitch-de").domains == ("DE",)
    assert DATASETS.get("wikinet").domains == tuple(WIKI_NODES)
    assert DATASETS.get("twitch").default_split == (0.6, 0.1, 0.3)
    assert DATASETS.get("cora").default_split == (0.6, 0.2, 0.2)
    assert all(DATASETS.get(name).task == "graph" for name in DATASETS.names() if name.startswith("tu-"))
    for name in DATASETS.names():
        assert abs(sum(DATASETS.get(name).default_split) - 1.0) < 1e-9, name


def test_offline_availability(shared_datasets, tmp_path):
    for name in DATASETS.names():
        if name.startswith("ogbn-"):       # not in the shared folder: tests/data/test_ogb.py writes a fixture
            continue
        assert available_offline(DATASETS.get(name), shared_datasets), name   # COLLAB from its zip
    assert available_offline(DATASETS.get("synthetic"), tmp_path / "nothing")
    assert not available_offline(DATASETS.get("cora"), tmp_path / "nothing")


# ------------------------------------------------------------------ real node datasets
def test_twitch_s1_has_all_six_domains(twitch_s1, shared_datasets, session_cache):
    assert twitch_s1.domains == list(TWITCH_NODES)
    assert len(twitch_s1.clients) == 2 * len(TWITCH_NODES)
    assert [c.client_id for c in twitch_s1.clients] == list(range(len(twitch_s1.clients)))
    for language, nodes in TWITCH_NODES.items():
        sizes = [c.data.num_nodes for c in twitch_s1.clients if c.domain == language]
        assert len(sizes) == 2 and sum(sizes) == nodes and max(sizes) - min(sizes) <= 1
    assert twitch_s1.num_features == TWITCH_FEATURES and twitch_s1.num_classes == 2
    _check_clients(twitch_s1)
    train = sum(c.num_train for c in twitch_s1.clients)
    assert abs(train / sum(TWITCH_NODES.values()) - 0.6) < 0.01
    assert any(session_cache.rglob("Twitch/DE/processed/data.pt")), "PyG processed a cache copy"
    assert not any(shared_datasets.rglob("processed")), "the read-only root is never written"


def test_twitch_edges_are_cleaned(twitch_s1, shared_datasets, session_cache):
    (pt,) = DATASETS.get("twitch-pt").load(shared_datasets, session_cache)
    expected = TWITCH_PT_DIRECTED_EDGES_WITH_LOOPS - TWITCH_NODES["PT"]
    assert pt.data.edge_index.size(1) == expected


def test_cora(shared_datasets, session_cache):
    data = _build({"dataset": "cora", "data_dir": str(shared_datasets)}, session_cache)
    assert len(data.clients) == 2 and data.domains == ["cora"]
    assert sum(c.data.num_nodes for c in data.clients) == CORA["nodes"]
    assert sum(c.data.edge_index.size(1) for c in data.clients) <= CORA["directed_edges"]
    assert (data.num_features, data.num_classes) == (CORA["features"], CORA["classes"])
    _check_clients(data)


def test_wikinet_is_aligned_to_feature_dim(shared_datasets, session_cache):
    data = _build({"dataset": "wikinet", "partition": "wikinet", "feature_dim": 64,
                   "data_dir": str(shared_datasets)}, session_cache)
    assert data.domains == list(WIKI_NODES) and len(data.clients) == 6
    assert data.num_features == 64 and data.num_classes == 5
    assert data.meta["features_aligned"]
    for page, nodes in WIKI_NODES.items():
        assert sum(c.data.num_nodes for c in data.clients if c.domain == page) == nodes
    _check_clients(data)


def test_email_has_standardised_128_dim_structural_features(shared_datasets, session_cache):
    (email,) = DATASETS.get("email-eu-core").load(shared_datasets, session_cache)
    graph = email.data
    assert (graph.num_nodes, graph.x.size(1), int(graph.y.max()) + 1) == (1005, 128, 42)   # SNAP's counts
    assert is_undirected(graph.edge_index)
    assert torch.allclose(graph.x.mean(dim=0), torch.zeros(128), atol=1e-4)
    assert torch.isfinite(graph.x).all()


# ------------------------------------------------------------------ graph datasets
def test_graph_dataset_loads_and_is_not_a_node_task(shared_datasets, session_cache):
    mutag = load_graph_dataset("tu-mutag", shared_datasets, session_cache)
    assert list(mutag) == ["MUTAG"] and len(mutag["MUTAG"]) == MUTAG_GRAPHS
    with pytest.raises(ValueError, match="node-classification"):
        load_graph_dataset("cora", shared_datasets, session_cache)
