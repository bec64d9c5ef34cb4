"""GIN for graph classification, as in GCFL's code (Xie et al., 2021).

Linear embedding to ``hidden``; ``num_layers`` GIN convolutions, each an MLP ``hidden -> hidden,
ReLU, hidden`` followed by ReLU and dropout; sum pooling; linear + ReLU (+ dropout); linear readout.
Only the convolutions are shared by default (``share: convs``): the embedding and the readout
depend on a client's feature width and label set and stay with the client; ``share: all`` shares
every parameter (clients must then agree on both). Dropout is
:func:`~fgl_ray.models.base.uniform_dropout` (the same operation, faster on CPU).
"""

from __future__ import annotations

from typing import Literal

import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GINConv, global_add_pool

from fgl_ray.models.base import MODELS, GraphModel, uniform_dropout


@MODELS.register("gin")
class GIN(GraphModel):
    """``encode(x, edge_index, batch)`` -> one representation per graph; ``classify`` -> logits."""

    tasks = ("graph-classification",)
    accepts_sparse_features = False

    def __init__(self, in_dim: int, num_classes: int, hidden: int = 64, num_layers: int = 3,
                 dropout: float = 0.5, share: Literal["convs", "all"] = "convs") -> None:
        super().__init__()
        if share not in ("convs", "all"):
            raise ValueError(f"gin share must be 'convs' or 'all', got {share!r}")
        self.embedding = nn.Linear(in_dim, hidden)
        self.convs = nn.ModuleList(
            GINConv(nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden)))
            for _ in range(num_layers))
        self.post = nn.Linear(hidden, hidden)
        self.readout = nn.Linear(hidden, num_classes)
        self.dropout = dropout
        self.share = share
        self.representation_dim = hidden

    def shares(self, name: str) -> bool:
        """Whether parameter ``name`` travels between client and server."""
        return self.share == "all" or name.startswith("convs.")

    def encode(self, x: Tensor, edge_index: Tensor, batch: Tensor) -> Tensor:
        x = self.embedding(x)
        for conv in self.convs:
            x = uniform_dropout(F.relu(conv(x, edge_index)), self.dropout, self.training)
        x = global_add_pool(x, batch)
        return uniform_dropout(F.relu(self.post(x)), self.dropout, self.training)

    def classify(self, h: Tensor, edge_index: Tensor | None = None) -> Tensor:
        return self.readout(h)
