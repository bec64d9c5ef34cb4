"""Random or class-stratified train/validation/test node masks and edge splits, seeded per client."""

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
    _check_fractions(fractions)
    return _masks(num_nodes, _cut(torch.randperm(num_nodes, generator=generator), fractions))


def stratified_split_masks(
    y: Tensor, fractions: tuple[float, float, float], generator: torch.Generator
) -> tuple[Tensor, Tensor, Tensor]:
    """Like :func:`random_split_masks`, but every class is cut at the fractions on its own.

    Each class's nodes (classes in ascending order) are permuted and split as
    :func:`random_split_masks` splits all nodes, so a class with at least one node has at least
    one training node, and every class keeps its share in each split up to rounding.

    Args:
        y: integer labels ``[n]``.
        fractions: train, validation and test fractions summing to 1.
        generator: source of the random permutations.
    """
    _check_fractions(fractions)
    parts: list[list[Tensor]] = [[], [], []]
    for label in torch.unique(y).tolist():
        nodes = (y == label).nonzero().flatten()
        for bucket, part in zip(parts, _cut(nodes[torch.randperm(nodes.numel(), generator=generator)], fractions)):
            bucket.append(part)
    return _masks(y.numel(), tuple(torch.cat(bucket) for bucket in parts))


def split_masks(y: Tensor, fractions: tuple[float, float, float], mode: str,
                generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    """``random`` or ``stratified`` train/val/test masks for the nodes labelled ``y``."""
    if mode == "stratified":
        return stratified_split_masks(y, fractions, generator)
    if mode == "random":
        return random_split_masks(y.numel(), fractions, generator)
    raise ValueError(f"unknown split mode {mode!r}; valid modes: random, stratified")


def split_edges(edge_index: Tensor, fractions: tuple[float, float, float],
                generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    """The undirected edges (each once, ``src < dst``) cut into train/val/test at ``fractions``."""
    once = edge_index[:, edge_index[0] < edge_index[1]]
    order = once[:, torch.randperm(once.shape[1], generator=generator)]
    train = round(fractions[0] * order.shape[1])
    val = round(fractions[1] * order.shape[1])
    return order[:, :train], order[:, train:train + val], order[:, train + val:]


def _check_fractions(fractions: tuple[float, float, float]) -> None:
    if any(part < 0 for part in fractions) or abs(sum(fractions) - 1.0) > 1e-6:
        raise ValueError(f"split fractions must be non-negative and sum to 1, got {fractions}")


def _cut(order: Tensor, fractions: tuple[float, float, float]) -> tuple[Tensor, Tensor, Tensor]:
    """The train/val/test parts of the permuted node ids ``order``."""
    count = order.numel()
    num_train = min(count, max(round(fractions[0] * count), int(fractions[0] > 0)))
    num_val = min(round(fractions[1] * count), count - num_train)
    return tuple(torch.tensor_split(order, [num_train, num_train + num_val]))


def _masks(num_nodes: int, parts: tuple[Tensor, Tensor, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    masks = []
    for part in parts:
        mask = torch.zeros(num_nodes, dtype=torch.bool)
        mask[part] = True
        masks.append(mask)
    return masks[0], masks[1], masks[2]
