"""DP-FedAvg style update clipping and Gaussian noise on the aggregate (McMahan et al., 2018).

Each accepted client update is scaled to an L2 norm of at most ``clip_norm``; after aggregation
the aggregate update gets Gaussian noise of std ``noise_multiplier * clip_norm * max_k w_k``, the
sensitivity of a weighted mean with weights ``w`` to one client's clipped update (``clip_norm /
n`` for equal weights). The same noise is added after a robust aggregator. No privacy
accounting is done here.
"""

from __future__ import annotations

import torch
from torch import Tensor


def clip_update(update: Tensor, max_norm: float) -> tuple[Tensor, bool]:
    """``update`` scaled to an L2 norm of at most ``max_norm``, and whether it was scaled."""
    norm = float(torch.linalg.vector_norm(update))
    if norm <= max_norm:
        return update, False
    return update * (max_norm / norm), True


def aggregate_noise(size: int, std: float, seed: int, dtype: torch.dtype) -> Tensor:
    """Gaussian noise of ``std`` for one aggregate, reproducible from ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(size, generator=generator, dtype=torch.float64).to(dtype) * std
