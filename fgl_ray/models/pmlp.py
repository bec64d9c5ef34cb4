"""PMLP-GCN (Yang et al., "Graph Neural Networks are Inherently Good Generalizers", 2023).

Each layer is linear -> GCN propagation (only in the phases where it is enabled) -> bias ->
BatchNorm without affine parameters or running statistics -> ReLU -> dropout; the last layer
stops after the bias. The paper's setting trains as an MLP and propagates only at
evaluation; ``propagate_in_training=True`` gives the variant that propagates always.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from fgl_ray.models.base import MODELS, GraphCache, GraphModel, layer_dims, quiet_sparse_warnings


class NormalisedAdjacency:
    """The self-looped, symmetric-normalised adjacency of a graph as a coalesced sparse matrix,
    cached for that ``edge_index`` tensor (:class:`~fgl_ray.models.base.GraphCache`): another tensor
    (an augmented view) is normalised anew."""

    def __init__(self) -> None:
        self._cache = GraphCache()

    def __call__(self, edge_index: Tensor, num_nodes: int) -> Tensor:
        return self._cache.get(edge_index, num_nodes, lambda: self._normalise(edge_index, num_nodes))

    @staticmethod
    def _normalise(edge_index: Tensor, num_nodes: int) -> Tensor:
        index, weight = gcn_norm(edge_index, None, num_nodes, add_self_loops=True)
        with quiet_sparse_warnings():
            return torch.sparse_coo_tensor(index.flip(0), weight, (num_nodes, num_nodes)).coalesce().to_sparse_csr()


@MODELS.register("pmlp_gcn")
class PMLPGCN(GraphModel):
    """Shared weights trained without message passing; GCN propagation when enabled."""

    def __init__(self, in_dim: int, num_classes: int, hidden: int = 128, num_layers: int = 2,
                 dropout: float = 0.5, propagate_in_training: bool = False) -> None:
        super().__init__()
        dims = layer_dims(in_dim, num_classes, hidden, num_layers)
        self.representation_dim = dims[-1][0]
        self.linears = nn.ModuleList(nn.Linear(a, b, bias=False) for a, b in dims)
        self.biases = nn.ParameterList(nn.Parameter(torch.zeros(b)) for _, b in dims)
        self.norms = nn.ModuleList(nn.BatchNorm1d(b, affine=False, track_running_stats=False) for _, b in dims[:-1])
        self.dropout = dropout
        self.propagate_in_training = propagate_in_training
        self.adjacency = NormalisedAdjacency()
        for linear in self.linears:
            nn.init.xavier_uniform_(linear.weight)

    def _propagates(self) -> bool:
        return self.propagate_in_training or not self.training

    def _layer(self, index: int, x: Tensor, edge_index: Tensor) -> Tensor:
        x = self.linears[index](x)
        if self._propagates():
            x = self.adjacency(edge_index, x.shape[0]) @ x
        return x + self.biases[index]

    def encode(self, x: Tensor, edge_index: Tensor) -> Tensor:
        for index, norm in enumerate(self.norms):
            h = self._layer(index, x, edge_index)
            h = norm(h) if h.shape[0] > 1 else torch.zeros_like(h)   # one row (a lone sampled seed): x - mean(x)
            x = F.dropout(F.relu(h), self.dropout, self.training)
        return x

    def classify(self, h: Tensor, edge_index: Tensor) -> Tensor:
        return self._layer(len(self.linears) - 1, h, edge_index)
