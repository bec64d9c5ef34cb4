"""Node classification: one full batch per local epoch, labels on the training nodes."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from torch import Tensor, nn
from torch_geometric.data import Data

from fgl_ray.data.types import ClientGraph
from fgl_ray.models.base import quiet_sparse_warnings
from fgl_ray.tasks.base import TASKS, FullGraphTask
from fgl_ray.tasks.classification import ClassificationTask

if TYPE_CHECKING:
    from fgl_ray.config import ExperimentConfig

SPARSE_DENSITY = 0.1


def client_features(config: "ExperimentConfig", model: nn.Module, x: Tensor) -> Tensor:
    """``x`` as a sparse CSR matrix when the config and model allow and it pays off.

    Multi-hot features (Twitch, WikiNet) are under 1% dense; a sparse first layer is several
    times faster and gives the same result.
    """
    if config.sparse_features == "off" or not model.accepts_sparse_features:
        return x
    if config.sparse_features == "auto" and float((x != 0).float().mean()) > SPARSE_DENSITY:
        return x
    with quiet_sparse_warnings():
        return x.to_sparse_csr()


@TASKS.register("node-classification")
class NodeClassification(ClassificationTask, FullGraphTask):
    """The client's graph is the batch: ``model.encode(x, edge_index)``, cross-entropy on ``train_mask``."""

    name = "node-classification"

    def prepare(self, graph: ClientGraph, model: nn.Module, device) -> Data:
        data = copy.copy(graph.data).to(device)  # shallow: never alter the caller's partition
        data.x = client_features(self.config, model, data.x)
        return data

    def split_batches(self, data: Data, split: str):
        return ((data, getattr(data, f"{split}_mask")),)

    def classify(self, model: nn.Module, z: Tensor, batch: Data) -> Tensor:
        return model.classify(z, batch.edge_index)


