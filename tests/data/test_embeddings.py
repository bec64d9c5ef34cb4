"""NetMF structural embeddings (Email-Eu-core's node features)."""

import networkx as nx
import numpy as np
import pytest
import scipy.linalg
import torch
from torch_geometric.utils import from_networkx

from fgl_ray.data.embeddings import netmf_embedding


def _edge_index(graph: nx.Graph) -> torch.Tensor:
    return from_networkx(graph).edge_index


def _netmf_matrix(graph: nx.Graph, window: int) -> np.ndarray:
    """The NetMF matrix written out from the paper with networkx's adjacency, independently."""
    adjacency = nx.to_numpy_array(graph, nodelist=sorted(graph), weight=None)
    degree = adjacency.sum(axis=1)
    transition = np.diag(1 / degree) @ adjacency
    walks = sum(np.linalg.matrix_power(transition, r) for r in range(1, window + 1))
    return np.log(np.maximum(degree.sum() / window * walks @ np.diag(1 / degree), 1.0))


@pytest.mark.parametrize("window", [1, 3])
def test_full_rank_embedding_carries_the_singular_values_of_the_netmf_matrix(window):
    graph = nx.karate_club_graph()
    embedding = netmf_embedding(_edge_index(graph), graph.number_of_nodes(), dim=34, window=window).double()
    expected = scipy.linalg.svdvals(_netmf_matrix(graph, window))
    # columns are u_j * sqrt(s_j) with orthonormal u_j: their squared norms are the singular values
    assert np.allclose(embedding.pow(2).sum(dim=0).numpy(), expected, atol=1e-4)
    gram = (embedding / embedding.norm(dim=0)).T @ (embedding / embedding.norm(dim=0))
    assert torch.allclose(gram, torch.eye(34, dtype=torch.float64), atol=1e-4)


def test_symmetric_nodes_get_embeddings_of_equal_norm_and_output_is_deterministic():
    path = nx.path_graph(9)                                  # node i and node 8 - i are mirror images
    edge_index = _edge_index(path)
    embedding = netmf_embedding(edge_index, 9, dim=9, window=2)
    norms = embedding.norm(dim=1)
    assert torch.allclose(norms, norms.flip(0), atol=1e-5)
    assert torch.equal(embedding, netmf_embedding(edge_index, 9, dim=9, window=2))
    assert embedding.dtype == torch.float32 and embedding.shape == (9, 9)


def test_isolated_nodes_get_a_zero_row():
    graph = nx.path_graph(4)
    graph.add_node(4)
    embedding = netmf_embedding(_edge_index(graph), 5, dim=3, window=2)
    assert torch.count_nonzero(embedding[4]) == 0
    assert torch.count_nonzero(embedding[:4]) > 0
