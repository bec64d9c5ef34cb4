"""Sample-weighted mean (FedAvg's aggregation)."""

from __future__ import annotations

from typing import Sequence

from torch import Tensor

from fgl_ray.aggregators.base import AGGREGATORS, Aggregator, sample_weights


@AGGREGATORS.register("mean")
class MeanAggregator(Aggregator):
    """``W <- W - lr * sum_k (n_k / n) u_k``, which equals averaging the client models."""

    def aggregate(self, weights: Tensor, updates: Tensor, num_samples: Tensor, client_ids: Sequence[int],
                  lr: float) -> Tensor:
        q = sample_weights(num_samples).to(updates.dtype)
        self.last_weights = q
        return weights - lr * (q @ updates)
