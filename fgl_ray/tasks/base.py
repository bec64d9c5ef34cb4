"""The task contract: what is specific to a readout, so that algorithms never branch on it.

A task owns how a client's data is iterated (one full batch of nodes, mini-batches of
graphs, ...), the forward pass an algorithm trains (``z = encode(model, batch)``, ``logits =
classify(model, z, batch)``), which rows count and their labels, the supervised loss, and the
evaluation statistics a client returns. Statistics are *additive*: a dict of arrays that pool
over clients, domains and the federation by summation (a confusion matrix; score histograms
or hit counts for the ranking readouts), and the task turns any pooled dict into metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Hashable, TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fgl_ray.registry import Registry

if TYPE_CHECKING:
    from fgl_ray.config import ExperimentConfig
    from fgl_ray.data.types import ClientGraph

TASKS: Registry[type["Task"]] = Registry("task")
#: Short names accepted wherever a task is named.
ALIASES = {"node": "node-classification", "graph": "graph-classification"}
#: The splits a client evaluates (training samples are never scored: nothing reads them, and for
#: graph classification they are 80% of the forward passes).
EVAL_SPLITS = ("val", "test")

Stats = dict[str, np.ndarray]
K = TypeVar("K", bound=Hashable)


def canonical_task(name: str) -> str:
    """The registered name of ``name`` or its alias (unknown names pass through unchanged)."""
    return ALIASES.get(name, name)


def pool_stats(stats: Iterable[Mapping[str, np.ndarray]]) -> Stats:
    """Sums additive statistics (one dict of arrays per client) key by key."""
    pooled: Stats = {}
    for entry in stats:
        for name, value in entry.items():
            pooled[name] = pooled[name] + value if name in pooled else np.array(value, copy=True)
    if not pooled:
        raise ValueError("pool_stats needs at least one client's statistics")
    return pooled


def group_stats(per_client: Mapping[K, Mapping[str, np.ndarray]], groups: Mapping[K, Any]) -> dict[Any, Stats]:
    """Pools the statistics of the clients that share a group (e.g. a domain), in order of first appearance."""
    members: dict[Any, list] = {}
    for key, stats in per_client.items():
        members.setdefault(groups[key], []).append(stats)
    return {group: pool_stats(entries) for group, entries in members.items()}


class Task:
    """Base class of every readout; a subclass is one registered file."""

    name: ClassVar[str]
    #: The kind of dataset the task reads (``DatasetSpec.task``): ``node`` or ``graph``.
    dataset_kind: ClassVar[str]
    #: The summary's headline metric.
    headline: ClassVar[str] = "accuracy"

    def __init__(self, config: "ExperimentConfig") -> None:
        self.config = config

    # ------------------------------------------------------------------ client data
    def prepare(self, graph: "ClientGraph", model: nn.Module, device: Any) -> Any:
        """The client's data as it lives inside its host (on ``device``), built once from its
        partition ``graph`` (never altered); task-specific splits are drawn here, seeded by
        ``(data_seed, client_id)``."""
        raise NotImplementedError

    def model_dims(self, data: Any, num_features: int, num_classes: int) -> tuple[int, int]:
        """The client model's input width and class count (default: the federation's)."""
        return num_features, num_classes

    def train_labels(self, data: Any) -> Tensor:
        """The labels of the client's training samples."""
        raise NotImplementedError

    def num_samples(self, data: Any) -> int:
        """Training samples: the default aggregation weight of the client's update."""
        return int(self.train_labels(data).numel())

    def train_batches(self, data: Any) -> Iterable[Any]:
        """One local epoch's batches, in training order."""
        raise NotImplementedError

    def representation_batches(self, data: Any) -> Iterable[Any]:
        """Batches covering every training sample once, in a fixed order (for prototypes)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ forward pass and loss
    def encode(self, model: nn.Module, batch: Any) -> Tensor:
        raise NotImplementedError

    def classify(self, model: nn.Module, z: Tensor, batch: Any) -> Tensor:
        raise NotImplementedError

    def labelled(self, batch: Any) -> tuple[Tensor, Tensor]:
        """``(mask, y)`` over the rows of ``z``: which rows are labelled training samples, and all
        rows' class labels (what prototype and contrastive methods compare). For the
        classification tasks the rows of ``z`` are those of the logits; for link prediction ``z``
        has a row per node and the logits one per node pair."""
        raise NotImplementedError

    def loss(self, logits: Tensor, batch: Any) -> Tensor:
        """The supervised loss; the default is cross-entropy over the labelled rows."""
        mask, y = self.labelled(batch)
        return F.cross_entropy(logits[mask], y[mask])

    def representations(self, model: nn.Module, data: Any) -> tuple[Tensor, Tensor]:
        """``encode`` of every training sample and its label (call under ``no_grad``)."""
        zs, ys = [], []
        for batch in self.representation_batches(data):
            mask, y = self.labelled(batch)
            zs.append(self.encode(model, batch)[mask])
            ys.append(y[mask])
        return torch.cat(zs), torch.cat(ys)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, predict: Callable[[Any], Tensor], data: Any, num_classes: int) -> dict[str, Stats]:
        """Additive statistics per split from ``predict(batch) -> logits``."""
        raise NotImplementedError

    def scores(self, stats: Mapping[str, np.ndarray]) -> dict[str, float]:
        """Metrics of one client's, one domain's or the federation's pooled statistics."""
        raise NotImplementedError

    def pooled_scores(self, stats: Mapping[str, np.ndarray], class_order: Sequence[int] | None = None,
                      cuts: tuple[float, float] = (1 / 3, 2 / 3)) -> dict[str, float]:
        """Metrics of the federation's pooled statistics (a task may add federation-only ones)."""
        return self.scores(stats)


class FullGraphTask(Task):
    """A node-level task whose batch is the client's whole graph: ``model.encode(x, edge_index)``,
    the training nodes labelled."""

    dataset_kind = "node"

    def train_labels(self, data: Any) -> Tensor:
        return data.y[data.train_mask]

    def train_batches(self, data: Any) -> Iterable[Any]:
        return (data,)

    def representation_batches(self, data: Any) -> Iterable[Any]:
        return (data,)

    def node_inputs(self, batch: Any) -> tuple[Tensor, Tensor]:
        """The node features and message-passing edges of a batch."""
        return batch.x, batch.edge_index

    def encode(self, model: nn.Module, batch: Any) -> Tensor:
        return model.encode(*self.node_inputs(batch))

    def labelled(self, batch: Any) -> tuple[Tensor, Tensor]:
        return batch.train_mask, batch.y


def build_task(config: "ExperimentConfig") -> Task:
    """The task the config resolves to (its own, or the dataset's)."""
    return TASKS.get(config.resolved_task())(config)
