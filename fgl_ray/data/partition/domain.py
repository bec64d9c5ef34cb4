"""``domain``: each domain's nodes split at random among that domain's own clients."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch_geometric.data import Data

from fgl_ray.data.partition.base import PARTITIONERS, PartitionError, PartitionParams, seeded_generator


def domain_partition(domain: Tensor, ratios: Sequence[int], clients_per_domain: int, seed: int) -> list[Tensor]:
    """Gives domain ``d`` ``ratios[d] * clients_per_domain`` clients of near-equal size.

    Args:
        domain: domain index of every node, ``[N]``.
        ratios: client multiplier per domain, one per domain.
        clients_per_domain: base number of clients per domain.
        seed: seed of the random node order.

    Returns:
        Global node ids per client, in domain order; sizes within a domain differ by at most 1.
    """
    num_domains = int(domain.max()) + 1 if domain.numel() else 0
    if len(ratios) != num_domains:
        raise PartitionError(f"domain_ratios has {len(ratios)} entries for {num_domains} domains; give one per domain")
    generator = seeded_generator(seed)
    clients: list[Tensor] = []
    for index, ratio in enumerate(ratios):
        nodes = torch.nonzero(domain == index).flatten()
        count = ratio * clients_per_domain
        if count > nodes.numel():
            raise PartitionError(
                f"domain {index} has {nodes.numel()} nodes but would get {count} clients; "
                "lower clients_per_domain or its domain ratio"
            )
        clients.extend(torch.tensor_split(nodes[torch.randperm(nodes.numel(), generator=generator)], count))
    return clients


@PARTITIONERS.register("domain")
def _domain(graph: Data, params: PartitionParams) -> list[Tensor]:
    return domain_partition(graph.domain, params.domain_ratios, params.clients_per_domain, params.seed)
