"""What every classification readout shares: confusion matrices and the scores derived from them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fgl_ray.metrics import confusion_matrix, head_medium_tail, scores_from_confusion
from fgl_ray.tasks.base import EVAL_SPLITS, Stats, Task


class ClassificationTask(Task):
    """Statistics ``{"confusion": C x C counts}`` per split; accuracy, balanced accuracy, macro-F1,
    and head/medium/tail accuracy when pooled over the federation."""

    def split_batches(self, data: Any, split: str) -> Iterable[tuple[Any, Tensor]]:
        """``(batch, mask)`` pairs covering the split: the rows of each batch that belong to it."""
        raise NotImplementedError

    @torch.no_grad()
    def evaluate(self, predict: Callable[[Any], Tensor], data: Any, num_classes: int) -> dict[str, Stats]:
        """Confusion matrices per split; a batch that serves consecutive splits (a whole client
        graph serves both) is predicted once."""
        stats = {}
        last: tuple[Any, Tensor] | None = None
        for split in EVAL_SPLITS:
            confusion = np.zeros((num_classes, num_classes), dtype=np.int64)
            for batch, mask in self.split_batches(data, split):
                if last is None or last[0] is not batch:
                    last = (batch, predict(batch).argmax(dim=-1))
                _, y = self.labelled(batch)
                confusion += confusion_matrix(y[mask].cpu(), last[1][mask].cpu(), num_classes)
            stats[split] = {"confusion": confusion}
        return stats

    def scores(self, stats: Mapping[str, np.ndarray]) -> dict[str, float]:
        return scores_from_confusion(stats["confusion"])

    def pooled_scores(self, stats: Mapping[str, np.ndarray], class_order: Sequence[int] | None = None,
                      cuts: tuple[float, float] = (1 / 3, 2 / 3)) -> dict[str, float]:
        """The scores, plus ``head/medium/tail_accuracy`` over classes in ``class_order`` (by decreasing
        global training frequency); a group without samples is left out."""
        scores = self.scores(stats)
        if class_order is not None:
            groups = head_medium_tail(stats["confusion"], class_order, cuts)
            scores |= {f"{name}_accuracy": value for name, value in groups.items() if value == value}  # no NaN
        return scores
