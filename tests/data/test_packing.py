"""Partitions travel to workers packed: sparse features as COO, restored exactly."""

import pickle

import torch
from torch_geometric.data import Data

from fgl_ray.data.types import PACK_DENSITY, ClientGraph


def _graph(density: float, nodes: int = 200, features: int = 500) -> ClientGraph:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(nodes, features, generator=generator)
    x[torch.rand(nodes, features, generator=generator) >= density] = 0.0
    data = Data(x=x, edge_index=torch.tensor([[0, 1], [1, 0]]), y=torch.zeros(nodes, dtype=torch.long))
    return ClientGraph(3, "d", data)


def test_sparse_features_pack_smaller_and_unpack_to_the_same_tensors():
    graph = _graph(density=0.01)
    packed = graph.packed()
    assert packed.data.x.is_sparse and not graph.data.x.is_sparse   # the caller's partition is untouched
    assert len(pickle.dumps(packed)) * 5 < len(pickle.dumps(graph))
    restored = pickle.loads(pickle.dumps(packed)).unpacked()
    assert restored.client_id == graph.client_id and restored.domain == graph.domain
    assert torch.equal(restored.data.x, graph.data.x) and restored.data.x.layout == torch.strided
    assert torch.equal(restored.data.edge_index, graph.data.edge_index)


def test_dense_features_travel_as_they_are():
    graph = _graph(density=min(1.0, 3 * PACK_DENSITY))
    assert graph.packed() is graph and graph.unpacked() is graph
