"""Node classification: one full batch per local epoch, or neighbour-sampled mini-batches of
seed nodes (``node_batching: neighbor``); labels on the training nodes."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

import torch
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.loader import NodeLoader

from fgl_ray.data.types import ClientGraph
from fgl_ray.models.base import quiet_sparse_warnings
from fgl_ray.tasks.base import EVAL_SPLITS, TASKS, FullGraphTask
from fgl_ray.tasks.classification import ClassificationTask
from fgl_ray.tasks.sampling import InEdgeChunks, neighbor_loader, neighbor_sampler

if TYPE_CHECKING:
    from fgl_ray.config import ExperimentConfig

SPARSE_DENSITY = 0.1


def client_features(config: "ExperimentConfig", model: nn.Module, x: Tensor) -> Tensor:
    """``x`` as a sparse CSR matrix when the config and model allow and it pays off.

    Multi-hot features (Twitch, WikiNet) are under 1% dense; a sparse first layer is several
    times faster and gives the same result. Sampled batches gather rows of ``x``, so it stays dense.
    """
    if config.sparse_features == "off" or not model.accepts_sparse_features or config.node_batching == "neighbor":
        return x
    if config.sparse_features == "auto" and float((x != 0).float().mean()) > SPARSE_DENSITY:
        return x
    with quiet_sparse_warnings():
        return x.to_sparse_csr()


@dataclass
class SampledGraph:
    """A client graph with its training batches and, where evaluation is not one full pass, how it
    is evaluated. Sampled batches' first ``batch_size`` rows are their seeds, and a training
    batch's ``train_mask`` marks exactly those."""

    graph: Data
    train: Iterable[Data]                         # the training batches, reshuffled every epoch
    ordered: Iterable[Data]                       # the training batches in a fixed order (representations)
    splits: dict[str, NodeLoader] = field(default_factory=dict)   # val/test seeds (``eval_batching: sampled``)
    evaluated: Data | None = None                 # the graph with its layer chunks (``eval_batching: layerwise``)


def seed_mask(batch: Data) -> Tensor:
    """The rows of a sampled batch that are its seed nodes."""
    return torch.arange(batch.num_nodes, device=batch.y.device) < batch.batch_size


@TASKS.register("node-classification")
class NodeClassification(ClassificationTask, FullGraphTask):
    """The client's graph is the batch: ``model.encode(x, edge_index)``, cross-entropy on ``train_mask``;
    with ``node_batching: neighbor`` each batch is ``batch_size`` training nodes and their sampled
    ``num_neighbors`` neighbourhoods, the loss on the seeds."""

    name = "node-classification"

    def prepare(self, graph: ClientGraph, model: nn.Module, device) -> Data | SampledGraph:
        data = copy.copy(graph.data).to(device)  # shallow: never alter the caller's partition
        data.x = client_features(self.config, model, data.x)
        config = self.config
        evaluated = None
        if config.eval_batching == "layerwise":
            evaluated = copy.copy(data)
            evaluated.layer_chunks = InEdgeChunks(data.edge_index, data.num_nodes, config.batch_size)
        if config.node_batching == "full":
            return data if evaluated is None else SampledGraph(data, (data,), (data,), evaluated=evaluated)

        def on_device(batch: Data) -> Data:         # the sampler's edges are built on the CPU
            return batch.to(device)

        def seeds_labelled(batch: Data) -> Data:
            batch = on_device(batch)
            batch.train_mask = seed_mask(batch)
            return batch

        sampler = neighbor_sampler(data, config.num_neighbors)     # one in-edge index for every loader

        def loader(mask: Tensor, shuffle: bool, transform) -> NodeLoader:
            return neighbor_loader(data, sampler, mask.nonzero().flatten(), config.batch_size, shuffle, transform)

        splits = ({split: loader(getattr(data, f"{split}_mask"), False, on_device) for split in EVAL_SPLITS}
                  if config.eval_batching == "sampled" else {})
        return SampledGraph(data, loader(data.train_mask, True, seeds_labelled),
                            loader(data.train_mask, False, seeds_labelled), splits, evaluated)

    def train_labels(self, data: Data | SampledGraph) -> Tensor:
        return super().train_labels(_graph(data))

    def train_batches(self, data: Data | SampledGraph) -> Iterable[Data]:
        return data.train if isinstance(data, SampledGraph) else (data,)

    def representation_batches(self, data: Data | SampledGraph) -> Iterable[Data]:
        return data.ordered if isinstance(data, SampledGraph) else (data,)

    def split_batches(self, data: Data | SampledGraph, split: str):
        if isinstance(data, SampledGraph) and data.splits:
            return ((batch, seed_mask(batch)) for batch in data.splits[split])
        graph = data if not isinstance(data, SampledGraph) else (
            data.graph if data.evaluated is None else data.evaluated)
        return ((graph, getattr(graph, f"{split}_mask")),)

    def encode(self, model: nn.Module, batch: Data) -> Tensor:
        return model.encode(batch.x, batch.edge_index, **_hops(model, batch))

    def classify(self, model: nn.Module, z: Tensor, batch: Data) -> Tensor:
        return model.classify(z, batch.edge_index, **_hops(model, batch))


def _hops(model: nn.Module, batch: Data) -> dict:
    """``hops=`` for a sampled batch and a model that trims its layers to them, ``chunks=`` for a
    graph evaluated layer-wise, else nothing."""
    if "layer_chunks" in batch:
        return {"chunks": batch.layer_chunks}
    if model.trims_hops and "num_sampled_nodes" in batch:
        return {"hops": (batch.num_sampled_nodes, batch.num_sampled_edges)}
    return {}


def _graph(data: Data | SampledGraph) -> Data:
    return data.graph if isinstance(data, SampledGraph) else data
