"""Byzantine-robust aggregators: coordinate-wise median, trimmed mean, and Krum.

Each replaces the weighted mean of the client updates by a rule that a few corrupted updates
(scaled, flipped, noise) cannot drag far; sample counts are ignored, as in their papers.

* ``median``: the coordinate-wise median of the updates (Yin et al., ICML 2018); with an even
  number of updates, the mean of the two middle values.
* ``trimmed_mean``: per coordinate, the mean after dropping the ``trim`` fraction of largest and
  of smallest values (``floor(trim * K)`` each side; Yin et al.).
* ``krum``: the single update whose summed squared distance to its ``K - f - 2`` nearest other
  updates is smallest, ``f`` the assumed number of Byzantine clients (Blanchard et al., NeurIPS
  2017); ``multi: m`` averages the ``m`` best-scoring updates (Multi-Krum).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from pydantic import Field
from torch import Tensor

from fgl_ray.aggregators.base import AGGREGATORS, Aggregator


@AGGREGATORS.register("median")
class MedianAggregator(Aggregator):
    """``W <- W - lr * median_k(u_k)`` coordinate-wise."""

    def aggregate(self, weights: Tensor, updates: Tensor, num_samples: Tensor, client_ids: Sequence[int],
                  lr: float) -> Tensor:
        sorted_updates = updates.sort(dim=0).values
        k = updates.shape[0]
        middle = (sorted_updates[(k - 1) // 2] + sorted_updates[k // 2]) / 2
        self.last_weights = torch.full((k,), 1.0 / k, dtype=torch.float64)
        return weights - lr * middle


@AGGREGATORS.register("trimmed_mean")
class TrimmedMeanAggregator(Aggregator):
    """``W <- W - lr * mean`` of each coordinate's values without the ``trim`` extremes on either side."""

    class Options(Aggregator.Options):
        trim: float = Field(0.1, ge=0.0, lt=0.5, description="fraction of updates dropped at each end, per coordinate")

    def aggregate(self, weights: Tensor, updates: Tensor, num_samples: Tensor, client_ids: Sequence[int],
                  lr: float) -> Tensor:
        k = updates.shape[0]
        cut = math.floor(self.options.trim * k)
        kept = updates.sort(dim=0).values[cut:k - cut]
        self.last_weights = torch.full((k,), 1.0 / k, dtype=torch.float64)
        return weights - lr * kept.mean(dim=0)


def krum_scores(updates: Tensor, byzantine: int) -> Tensor:
    """Each update's summed squared distance to its ``K - f - 2`` nearest other updates."""
    k = updates.shape[0]
    neighbours = max(1, k - byzantine - 2)
    distances = torch.cdist(updates.double(), updates.double()).pow(2)
    distances.fill_diagonal_(float("inf"))
    return distances.sort(dim=1).values[:, :min(neighbours, k - 1)].sum(dim=1)


@AGGREGATORS.register("krum")
class KrumAggregator(Aggregator):
    """``W <- W - lr * u_best`` (or the mean of the ``multi`` best) by Krum's score."""

    class Options(Aggregator.Options):
        byzantine: int = Field(1, ge=0, description="assumed number f of Byzantine clients")
        multi: int = Field(1, ge=1, description="average the updates with the m best scores (Multi-Krum)")

    def aggregate(self, weights: Tensor, updates: Tensor, num_samples: Tensor, client_ids: Sequence[int],
                  lr: float) -> Tensor:
        k = updates.shape[0]
        if k == 1:
            chosen = torch.tensor([0])
        else:
            chosen = krum_scores(updates, self.options.byzantine).argsort()[:min(self.options.multi, k)]
        self.last_weights = torch.zeros(k, dtype=torch.float64).index_fill_(0, chosen, 1.0 / len(chosen))
        return weights - lr * updates[chosen].mean(dim=0)
