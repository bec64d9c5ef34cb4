"""GraphSAGE with mean aggregation (Hamilton et al., 2017) on PyG's SAGEConv."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import SAGEConv

from fgl_ray.models.base import MODELS, GraphModel, layer_dims


@MODELS.register("sage")
class GraphSAGE(GraphModel):
    """SAGEConv(mean) -> ReLU -> dropout per hidden layer, then a SAGEConv classifier."""

    accepts_sparse_features = False  # SAGEConv gathers raw neighbour features first

    def __init__(self, in_dim: int, num_classes: int, hidden: int = 128, num_layers: int = 2,
                 dropout: float = 0.5) -> None:
        super().__init__()
        self.convs = nn.ModuleList(SAGEConv(a, b, aggr="mean") for a, b in layer_dims(in_dim, num_classes, hidden, num_layers))
        self.dropout = dropout

    def encode(self, x: Tensor, edge_index: Tensor) -> Tensor:
        for conv in self.convs[:-1]:
            x = F.dropout(F.relu(conv(x, edge_index)), self.dropout, self.training)
        return x

    def classify(self, h: Tensor, edge_index: Tensor) -> Tensor:
        return self.convs[-1](h, edge_index)
