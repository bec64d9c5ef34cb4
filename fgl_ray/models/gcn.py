"""Graph convolutional network (Kipf & Welling) on PyG's GCNConv."""

from __future__ import annotations

from torch import nn
from torch_geometric.nn import GCNConv

from fgl_ray.models.base import MODELS, ConvStack, layer_dims


@MODELS.register("gcn")
class GCN(ConvStack):
    """GCNConv -> ReLU -> dropout per hidden layer, then a GCNConv classifier.

    The normalised adjacency is cached: one instance serves one client's fixed graph.
    """

    def __init__(self, in_dim: int, num_classes: int, hidden: int = 128, num_layers: int = 2,
                 dropout: float = 0.5) -> None:
        super().__init__()
        dims = layer_dims(in_dim, num_classes, hidden, num_layers)
        self.representation_dim = dims[-1][0]
        self.convs = nn.ModuleList(GCNConv(a, b, cached=True) for a, b in dims)
        self.dropout = dropout
