"""GraphSAGE with mean aggregation (Hamilton et al., 2017) on PyG's SAGEConv."""

from __future__ import annotations

from torch import nn
from torch_geometric.nn import SAGEConv

from fgl_ray.models.base import MODELS, ConvStack, layer_dims


@MODELS.register("sage")
class GraphSAGE(ConvStack):
    """SAGEConv(mean) -> ReLU -> dropout per hidden layer, then a SAGEConv classifier."""

    accepts_sparse_features = False  # SAGEConv gathers raw neighbour features first
    trims_hops = True                # a node's mean reads only its in-edges

    def __init__(self, in_dim: int, num_classes: int, hidden: int = 128, num_layers: int = 2,
                 dropout: float = 0.5) -> None:
        super().__init__()
        dims = layer_dims(in_dim, num_classes, hidden, num_layers)
        self.representation_dim = dims[-1][0]
        self.convs = nn.ModuleList(SAGEConv(a, b, aggr="mean") for a, b in dims)
        self.dropout = dropout
