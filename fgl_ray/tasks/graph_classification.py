"""Graph classification: mini-batches of the client's own graphs, one label per graph."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch
from torch import Tensor, nn
from torch_geometric.data import Batch

from fgl_ray.data.types import ClientGraph, GraphSet
from fgl_ray.tasks.base import TASKS
from fgl_ray.tasks.classification import ClassificationTask


@TASKS.register("graph-classification")
class GraphClassification(ClassificationTask):
    """``model.encode(x, edge_index, batch)`` gives one row per graph; every graph of a training
    batch counts. Training batches of ``batch_size`` graphs are drawn in a fresh random order each
    epoch (torch's generator, seeded per client and round); evaluation batches are fixed."""

    name = "graph-classification"
    dataset_kind = "graph"

    def prepare(self, graph: ClientGraph, model: nn.Module, device) -> GraphSet:
        return graph.data.to(device)

    def model_dims(self, data: GraphSet, num_features: int, num_classes: int) -> tuple[int, int]:
        """The client's own feature width and label count (multi-dataset groups differ)."""
        return data.num_features, data.num_classes

    def train_labels(self, data: GraphSet) -> Tensor:
        return data.y[data.train_mask]

    def train_batches(self, data: GraphSet) -> Iterator[Batch]:
        """Shuffled batches; when every training graph fits in one batch its order cannot change
        the step, so the batch collated once is reused (collation is a tenth of a PROTEINS step)."""
        indices = data.train_mask.nonzero().flatten().cpu()
        if indices.numel() <= self.config.batch_size:
            yield from data.split_batches("train", self.config.batch_size)
            return
        order = indices[torch.randperm(indices.numel())]
        for chunk in torch.split(order, self.config.batch_size):
            yield data.collate(chunk)

    def representation_batches(self, data: GraphSet) -> Iterable[Batch]:
        return data.split_batches("train", self.config.batch_size)

    def split_batches(self, data: GraphSet, split: str):
        return ((batch, torch.ones(batch.num_graphs, dtype=torch.bool, device=batch.y.device))
                for batch in data.split_batches(split, self.config.batch_size))

    def encode(self, model: nn.Module, batch: Batch) -> Tensor:
        return model.encode(batch.x, batch.edge_index, batch.batch)

    def classify(self, model: nn.Module, z: Tensor, batch: Batch) -> Tensor:
        return model.classify(z, batch.edge_index)

    def labelled(self, batch: Batch) -> tuple[Tensor, Tensor]:
        return torch.ones(batch.num_graphs, dtype=torch.bool, device=batch.y.device), batch.y
