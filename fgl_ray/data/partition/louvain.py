"""``louvain``: Louvain communities merged greedily into the requested number of clients."""

from __future__ import annotations

import networkx as nx
import torch
from torch import Tensor
from torch_geometric.data import Data

from fgl_ray.data.partition.base import PARTITIONERS, PartitionError, PartitionParams


def louvain_partition(
    edge_index: Tensor, num_nodes: int, num_clients: int, seed: int, domain: Tensor | None = None
) -> list[Tensor]:
    """Louvain communities (resolution 1) merged into ``num_clients`` clients.

    With ``domain`` given, Louvain runs on each domain's graph separately: on a disjoint union
    modularity's null model spans all domains, which (the resolution limit) tends to merge each
    domain into one community. Communities are then taken largest first (ties: smallest node
    id) and each goes to the client that holds the fewest nodes so far (ties: lowest id).

    Args:
        edge_index: edges with global node ids.
        num_nodes: number of nodes.
        num_clients: clients to produce.
        seed: Louvain's seed.
        domain: optional domain index of every node.

    Raises:
        ValueError: Louvain finds fewer communities than ``num_clients``.
    """
    graph = nx.Graph()
    graph.add_nodes_from(range(num_nodes))
    graph.add_edges_from(edge_index.t().tolist())
    groups = [range(num_nodes)] if domain is None else [torch.nonzero(domain == d).flatten().tolist()
                                                        for d in torch.unique(domain).tolist()]
    found = [
        sorted(community)
        for nodes in groups
        for community in nx.community.louvain_communities(graph.subgraph(nodes), resolution=1, seed=seed)
    ]
    if len(found) < num_clients:
        raise PartitionError(
            f"louvain found {len(found)} communities, fewer than num_clients={num_clients}; "
            "lower num_clients or use the random partition"
        )
    members: list[list[int]] = [[] for _ in range(num_clients)]
    for community in sorted(found, key=lambda nodes: (-len(nodes), nodes[0])):
        smallest = min(range(num_clients), key=lambda client: len(members[client]))
        members[smallest].extend(community)
    return [torch.tensor(sorted(nodes), dtype=torch.long) for nodes in members]


@PARTITIONERS.register("louvain")
def _louvain(graph: Data, params: PartitionParams) -> list[Tensor]:
    return louvain_partition(graph.edge_index, graph.num_nodes, params.num_clients, params.seed, graph.domain)
