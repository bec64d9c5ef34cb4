"""Multi-layer perceptron: ignores the graph."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from fgl_ray.models.base import MODELS, GraphModel, layer_dims


@MODELS.register("mlp")
class MLP(GraphModel):
    """Linear -> ReLU -> dropout per hidden layer, then a linear classifier."""

    def __init__(self, in_dim: int, num_classes: int, hidden: int = 128, num_layers: int = 2,
                 dropout: float = 0.5) -> None:
        super().__init__()
        dims = layer_dims(in_dim, num_classes, hidden, num_layers)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in dims)
        self.representation_dim = dims[-1][0]
        self.dropout = dropout

    def encode(self, x: Tensor, edge_index: Tensor) -> Tensor:
        for layer in self.layers[:-1]:
            x = F.dropout(F.relu(layer(x)), self.dropout, self.training)
        return x

    def classify(self, h: Tensor, edge_index: Tensor) -> Tensor:
        return self.layers[-1](h)
