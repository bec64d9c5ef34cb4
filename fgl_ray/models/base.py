"""The model contract and its registry."""

from __future__ import annotations

from torch import Tensor, nn

from fgl_ray.registry import Registry

MODELS: Registry[type["GraphModel"]] = Registry("model")


class GraphModel(nn.Module):
    """A node classifier split into an encoder and a classifier head.

    Algorithms that share representations (prototypes) use ``encode``; everything else calls
    the module as ``model(x, edge_index) -> logits``.
    """

    def encode(self, x: Tensor, edge_index: Tensor) -> Tensor:
        raise NotImplementedError

    def classify(self, h: Tensor, edge_index: Tensor) -> Tensor:
        raise NotImplementedError

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        return self.classify(self.encode(x, edge_index), edge_index)


def build_model(name: str, in_dim: int, num_classes: int, hidden: int = 128, num_layers: int = 2,
                dropout: float = 0.5) -> GraphModel:
    """Builds the registered backbone ``name``."""
    return MODELS.get(name)(in_dim, num_classes, hidden=hidden, num_layers=num_layers, dropout=dropout)


def layer_dims(in_dim: int, num_classes: int, hidden: int, num_layers: int) -> list[tuple[int, int]]:
    """(input, output) widths of each layer of a ``num_layers``-deep stack."""
    dims = [in_dim] + [hidden] * (num_layers - 1) + [num_classes]
    return list(zip(dims[:-1], dims[1:]))
