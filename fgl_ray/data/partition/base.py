"""The partitioner registry, its inputs, and the disjoint union that partitioners split."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor
from torch_geometric.data import Data

from fgl_ray.data.types import DomainGraph
from fgl_ray.errors import PartitionError  # noqa: F401  (re-exported)
from fgl_ray.registry import Registry


@dataclass(frozen=True)
class PartitionParams:
    """The settings a partitioner may read.

    Attributes:
        num_clients: clients for ``louvain``, ``random`` and ``label-dirichlet``.
        clients_per_domain: base clients per domain for ``domain``.
        domain_ratios: per-domain multipliers of ``clients_per_domain`` (one per domain).
        dirichlet_alpha: concentration of ``label-dirichlet``.
        seed: the data seed.
    """

    num_clients: int
    clients_per_domain: int
    domain_ratios: tuple[int, ...]
    dirichlet_alpha: float
    seed: int


Partitioner = Callable[[Data, PartitionParams], list[Tensor]]
"""``(union graph with edge_index, y and domain, params) -> global node ids per client``."""

PARTITIONERS: Registry[Partitioner] = Registry("partitioner")


#: The dataset's own split (OGB's), carried by :func:`union_graph` when every domain has it.
SPLIT_MASKS = ("train_mask", "val_mask", "test_mask")


def union_graph(domains: Sequence[DomainGraph]) -> Data:
    """The disjoint union of the domains, with ``domain[i]`` = index of node ``i``'s domain, and
    the domains' own :data:`SPLIT_MASKS` when every domain has them.

    Raises:
        ValueError: the domains' feature dimensions differ (align them first).
    """
    dims = sorted({domain.data.num_features for domain in domains})
    if len(dims) > 1:
        raise ValueError(f"domains have feature dimensions {dims}; align them with align_features first")
    offsets = torch.tensor([0] + [domain.data.num_nodes for domain in domains]).cumsum(0)
    masks = {name: torch.cat([domain.data[name] for domain in domains]) for name in SPLIT_MASKS
             if all(name in domain.data for domain in domains)}
    return Data(
        x=torch.cat([domain.data.x for domain in domains]),
        edge_index=_union_edges([domain.data.edge_index for domain in domains], offsets.tolist()),
        y=torch.cat([domain.data.y for domain in domains]),
        domain=torch.repeat_interleave(torch.arange(len(domains)), offsets.diff()),
        **(masks if len(masks) == len(SPLIT_MASKS) else {}),
    )


def _union_edges(edge_indices: Sequence[Tensor], offsets: Sequence[int]) -> Tensor:
    """The edge indices shifted by their domains' node offsets, written into one preallocated
    tensor (no shifted copy per domain: a gigabyte at tens of millions of edges)."""
    edges = torch.empty(2, sum(edge_index.size(1) for edge_index in edge_indices), dtype=torch.long)
    start = 0
    for edge_index, offset in zip(edge_indices, offsets):
        edges[:, start:start + edge_index.size(1)].copy_(edge_index).add_(offset)
        start += edge_index.size(1)
    return edges


def seeded_generator(seed: int) -> torch.Generator:
    """A torch generator seeded with ``seed``."""
    return torch.Generator().manual_seed(seed)
