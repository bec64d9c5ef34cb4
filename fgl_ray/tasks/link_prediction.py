"""Link prediction: score held-out edges of the client's own graph against sampled non-edges.

Each client's undirected edges are split once, seeded by ``(data_seed, client_id)``, into
train/val/test parts by the config's ``split`` fractions; message passing and the positive
training pairs use the training edges only. Every epoch draws one uniformly random non-edge per
training edge (from the client's own nodes, never an edge of its whole graph nor a self pair) and
trains binary cross-entropy on the pair logits. Evaluation scores the held-out edges against as
many fixed non-edges (drawn once, seeded); the statistics are histograms of the sigmoid scores of
positives and negatives, which add over clients, and the metric is their ROC-AUC. Pair logits come
from the model's ``score_links`` when it has one (``mm_gnn``), else from the dot product of the two
nodes' ``encode`` rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data

from fgl_ray.data.splits import client_generator
from fgl_ray.data.types import ClientGraph
from fgl_ray.metrics import auc_from_histograms, score_histogram
from fgl_ray.tasks.base import EVAL_SPLITS, TASKS, Stats, Task


@dataclass
class LinkBatch:
    """The client's graph with the node pairs of one step: ``pairs [2, m]`` and their ``labels [m]``."""

    data: Data
    pairs: Tensor
    labels: Tensor


def sample_non_edges(edge_index: Tensor, num_nodes: int, count: int, generator: torch.Generator | None) -> Tensor:
    """``count`` uniformly drawn node pairs ``[2, count]`` that are neither edges nor self pairs."""
    existing = set((edge_index[0] * num_nodes + edge_index[1]).tolist())
    found: list[int] = []
    while len(found) < count and num_nodes > 1:
        draws = torch.randint(num_nodes * num_nodes, (2 * (count - len(found)) + 8,), generator=generator).tolist()
        found += [p for p in draws if p // num_nodes != p % num_nodes and p not in existing][:count - len(found)]
    pairs = torch.tensor(found, dtype=torch.long)
    return torch.stack([pairs // num_nodes, pairs % num_nodes])


def split_edges(edge_index: Tensor, fractions: tuple[float, float, float],
                generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    """The undirected edges (each once, ``src < dst``) cut into train/val/test at ``fractions``."""
    once = edge_index[:, edge_index[0] < edge_index[1]]
    order = once[:, torch.randperm(once.shape[1], generator=generator)]
    train = round(fractions[0] * order.shape[1])
    val = round(fractions[1] * order.shape[1])
    return order[:, :train], order[:, train:train + val], order[:, train + val:]


@TASKS.register("link-prediction")
class LinkPrediction(Task):
    """Binary cross-entropy on training edges vs fresh non-edges; AUC on held-out edges."""

    name = "link-prediction"
    dataset_kind = "node"
    headline = "auc"

    def prepare(self, graph: ClientGraph, model: nn.Module, device) -> Data:
        data = graph.data.clone()
        generator = client_generator(self.config.data_seed, graph.client_id)
        train, val, test = split_edges(data.edge_index, tuple(self.config.resolved_split()), generator)
        data.full_edge_index = data.edge_index
        data.edge_index = torch.cat([train, train.flip(0)], dim=1)
        data.train_pos, data.val_pos, data.test_pos = train, val, test
        for name, positives in (("val", val), ("test", test)):
            data[f"{name}_neg"] = sample_non_edges(data.full_edge_index, data.num_nodes, positives.shape[1], generator)
        return data.to(device)

    def train_labels(self, data: Data) -> Tensor:
        """One label (1) per training edge: the edges are the training samples."""
        return torch.ones(data.train_pos.shape[1], dtype=torch.long)

    def train_batches(self, data: Data) -> Iterable[LinkBatch]:
        negatives = sample_non_edges(data.full_edge_index.cpu(), data.num_nodes, data.train_pos.shape[1], None)
        return (self._batch(data, data.train_pos, negatives.to(data.train_pos.device)),)

    def representation_batches(self, data: Data) -> Iterable[LinkBatch]:
        empty = data.train_pos[:, :0]
        return (self._batch(data, data.train_pos, empty),)

    @staticmethod
    def _batch(data: Data, positives: Tensor, negatives: Tensor) -> LinkBatch:
        labels = torch.cat([torch.ones(positives.shape[1]), torch.zeros(negatives.shape[1])]).to(positives.device)
        return LinkBatch(data, torch.cat([positives, negatives], dim=1), labels)

    def node_inputs(self, batch: LinkBatch) -> tuple[Tensor, Tensor]:
        """The node features and the message-passing (training) edges."""
        return batch.data.x, batch.data.edge_index

    def encode(self, model: nn.Module, batch: LinkBatch) -> Tensor:
        return model.encode(*self.node_inputs(batch))

    def classify(self, model: nn.Module, z: Tensor, batch: LinkBatch) -> Tensor:
        """Pair logits of ``batch.pairs``."""
        if hasattr(model, "score_links"):
            return model.score_links(z, batch.pairs)
        return (z[batch.pairs[0]] * z[batch.pairs[1]]).sum(-1)

    def labelled(self, batch: LinkBatch) -> tuple[Tensor, Tensor]:
        """The rows of ``z`` are nodes: the training nodes and their classes (for prototype methods)."""
        return batch.data.train_mask, batch.data.y

    def loss(self, logits: Tensor, batch: LinkBatch) -> Tensor:
        return F.binary_cross_entropy_with_logits(logits, batch.labels)

    @torch.no_grad()
    def evaluate(self, predict: Callable[[LinkBatch], Tensor], data: Data, num_classes: int) -> dict[str, Stats]:
        stats = {}
        for split in EVAL_SPLITS:
            positives, negatives = data[f"{split}_pos"], data[f"{split}_neg"]
            scores = torch.sigmoid(predict(self._batch(data, positives, negatives))).cpu().numpy()
            count = positives.shape[1]
            stats[split] = {"positive": score_histogram(scores[:count]), "negative": score_histogram(scores[count:])}
        return stats

    def scores(self, stats) -> dict[str, float]:
        return {"auc": auc_from_histograms(stats["positive"], stats["negative"])}
