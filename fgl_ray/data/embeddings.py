"""Structure-only node features for graphs that ship without any."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def netmf_embedding(edge_index: Tensor, num_nodes: int, dim: int = 128, window: int = 10,
                    negative: float = 1.0) -> Tensor:
    """NetMF (Qiu et al., WSDM 2018): the matrix DeepWalk factorises implicitly, made explicit.

    ``M = vol(G) / (b T) * (sum_{r=1..T} P^r) D^-1`` with ``P = D^-1 A``; the embedding is the
    rank-``dim`` SVD of ``log(max(M, 1))`` scaled by the root singular values. Dense in the node
    count (meant for graphs of a few thousand nodes); deterministic up to singular-vector signs,
    which are fixed so that each column's largest-magnitude entry is positive.
    """
    adjacency = np.zeros((num_nodes, num_nodes))
    adjacency[edge_index[0].numpy(), edge_index[1].numpy()] = 1.0
    degree = adjacency.sum(axis=1)
    inv_degree = np.divide(1.0, degree, out=np.zeros_like(degree), where=degree > 0)
    transition = inv_degree[:, None] * adjacency
    power, walks = np.eye(num_nodes), np.zeros((num_nodes, num_nodes))
    for _ in range(window):
        power = power @ transition
        walks += power
    matrix = degree.sum() / (negative * window) * walks * inv_degree[None, :]
    u, s, _ = np.linalg.svd(np.log(np.maximum(matrix, 1.0)), hermitian=True)
    u, s = u[:, :dim], s[:dim]
    signs = np.sign(u[np.abs(u).argmax(axis=0), np.arange(u.shape[1])])
    return torch.from_numpy(u * signs * np.sqrt(s)).float()


def structural_features(edge_index: Tensor, num_nodes: int, dim: int = 128) -> Tensor:
    """Standardised ``dim``-wide NetMF embeddings of a graph (the second view of two-view graphs)."""
    structure = netmf_embedding(edge_index, num_nodes, dim=dim)
    return (structure - structure.mean(dim=0)) / structure.std(dim=0).clamp_min(1e-6)
