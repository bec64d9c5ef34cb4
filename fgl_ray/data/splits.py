"""Random train/validation/test node masks, seeded per client."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def client_generator(data_seed: int, client_id: int) -> torch.Generator:
    """A generator seeded from ``(data_seed, client_id)`` only, so one client's split does not
    depend on any other client."""
    state = np.random.SeedSequence([data_seed, client_id]).generate_state(1, dtype=np.uint64)[0]
    return torch.Generator().manual_seed(int(state))


def random_split_masks(
    num_nodes: int, fractions: tuple[float, float, float], generator: torch.Generator
) -> tuple[Tensor, Tensor, Tensor]:
    """Splits ``num_nodes`` nodes at random into disjoint train/val/test masks.

    Train and validation sizes are ``round(fraction * num_nodes)`` (train at least one node when
    its fraction is positive, so no client is left without training data); test takes the
    rest, so the three masks cover every node.

    Args:
        num_nodes: number of nodes.
        fractions: train, validation and test fractions summing to 1.
        generator: source of the random permutation.

    Returns:
        Three boolean masks of length ``num_nodes``.
    """
    if any(part < 0 for part in fractions) or abs(sum(fractions) - 1.0) > 1e-6:
        raise ValueError(f"split fractions must be non-negative and sum to 1, got {fractions}")
    num_train = min(num_nodes, max(round(fractions[0] * num_nodes), int(fractions[0] > 0)))
    num_val = min(round(fractions[1] * num_nodes), num_nodes - num_train)
    order = torch.randperm(num_nodes, generator=generator)
    masks = []
    for part in torch.tensor_split(order, [num_train, num_train + num_val]):
        mask = torch.zeros(num_nodes, dtype=torch.bool)
        mask[part] = True
        masks.append(mask)
    return masks[0], masks[1], masks[2]
