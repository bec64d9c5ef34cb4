"""Link prediction: score held-out edges of the client's own graph against sampled non-edges.

Each client's undirected edges are split once, seeded by ``(data_seed, client_id)``, into
train/val/test parts by the config's ``split`` fractions; message passing and the positive
training pairs use the training edges only. Every epoch draws one uniformly random non-edge per
training edge (from the client's own nodes, never an edge of its whole graph nor a self pair) and
trains binary cross-entropy on the pair logits; the training negatives avoid the training edges
only (the held-out edges stay unknown to training, as in PyG's ``RandomLinkSplit``). Evaluation
scores the held-out edges against as many fixed non-edges of the whole client graph (drawn once,
seeded); the statistics are histograms of the logits over [-40, 40] in 0.01 bins (the sigmoid
would crowd confident scores into one bin), which add over clients, and the metric is their
ROC-AUC. A client with too few non-edges gets as many as exist. Pair logits come
from the model's ``score_links`` when it has one (``mm_gnn``), else from the dot product of the two
nodes' ``encode`` rows. On a two-view graph whose first view embeds the graph's edges
(``cora-mm``, ``citeseer-mm``) the data layer embeds the whole graph without any client's held-out
edges (the same split, :func:`~fgl_ray.data.splits.split_edges`), so they never shape the features
that score them and every client's view shares one basis.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data

from fgl_ray.data.splits import client_generator, split_edges
from fgl_ray.data.types import ClientGraph
from fgl_ray.metrics import auc_from_histograms, score_histogram
from fgl_ray.tasks.base import EVAL_SPLITS, TASKS, Stats, Task


@dataclass
class LinkBatch:
    """The client's graph with the node pairs of one step: ``pairs [2, m]`` and their ``labels [m]``."""

    data: Data
    pairs: Tensor
    labels: Tensor


LOGIT_RANGE = (-40.0, 40.0)
LOGIT_BINS = 8000


def sample_non_edges(edge_index: Tensor, num_nodes: int, count: int, generator: torch.Generator | None) -> Tensor:
    """Up to ``count`` distinct uniformly drawn node pairs ``[2, m]`` that are neither edges nor self
    pairs (all of them, shuffled, when fewer exist)."""
    existing = set((edge_index[0] * num_nodes + edge_index[1]).tolist())
    available = num_nodes * (num_nodes - 1) - len(existing - {i * num_nodes + i for i in range(num_nodes)})
    if available <= 4 * count:                                 # small or dense: enumerate the complement
        pairs = torch.tensor([p for p in range(num_nodes * num_nodes)
                              if p // num_nodes != p % num_nodes and p not in existing], dtype=torch.long)
        pairs = pairs[torch.randperm(pairs.numel(), generator=generator)][:count]
    else:
        found: dict[int, None] = {}
        while len(found) < count:
            draws = torch.randint(num_nodes * num_nodes, (2 * (count - len(found)) + 8,), generator=generator)
            for p in draws.tolist():
                if p // num_nodes != p % num_nodes and p not in existing and len(found) < count:
                    found[p] = None
        pairs = torch.tensor(list(found), dtype=torch.long)
    return torch.stack([pairs // num_nodes, pairs % num_nodes])


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
        negatives = sample_non_edges(data.edge_index.cpu(), data.num_nodes, data.train_pos.shape[1], None)
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
            logits = predict(self._batch(data, positives, negatives)).cpu().numpy()
            count = positives.shape[1]
            stats[split] = {name: score_histogram(part, *LOGIT_RANGE, bins=LOGIT_BINS)
                            for name, part in (("positive", logits[:count]), ("negative", logits[count:]))}
        return stats

    def scores(self, stats) -> dict[str, float]:
        return {"auc": auc_from_histograms(stats["positive"], stats["negative"])}
