"""``random``: nodes spread uniformly at random over the clients."""

from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.data import Data

from fgl_ray.data.partition.base import PARTITIONERS, PartitionError, PartitionParams, seeded_generator


def random_partition(num_nodes: int, num_clients: int, seed: int) -> list[Tensor]:
    """Splits nodes ``0..num_nodes-1`` at random into ``num_clients`` parts whose sizes differ by at most 1."""
    if not 1 <= num_clients <= num_nodes:
        raise PartitionError(f"random partition needs 1 <= num_clients <= {num_nodes} nodes, got {num_clients}")
    return list(torch.tensor_split(torch.randperm(num_nodes, generator=seeded_generator(seed)), num_clients))


@PARTITIONERS.register("random")
def _random(graph: Data, params: PartitionParams) -> list[Tensor]:
    return random_partition(graph.num_nodes, params.num_clients, params.seed)
