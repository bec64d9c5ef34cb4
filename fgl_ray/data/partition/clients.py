"""Turns node assignments into clients: induced subgraphs with their own split masks."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch_geometric.data import Data

from fgl_ray.data.partition.base import PartitionError
from fgl_ray.data.splits import client_generator, split_masks
from fgl_ray.data.types import ClientGraph


def build_clients(
    graph: Data,
    assignments: Sequence[Tensor],
    domain_names: Sequence[str],
    split: tuple[float, float, float],
    seed: int,
    split_mode: str = "random",
) -> list[ClientGraph]:
    """Builds one client per assignment; edges between clients are dropped.

    A client's domain is the majority domain of its nodes (ties: the earlier domain). Clients
    are numbered ``0..K-1`` in domain order (stable within a domain), and client ``k``'s split
    is seeded from ``(seed, k)``.

    Args:
        graph: the union graph (``x``, ``edge_index``, ``y``, ``domain``).
        assignments: global node ids per client.
        domain_names: name of each domain index.
        split: train/val/test fractions.
        seed: the data seed.
        split_mode: ``random`` or ``stratified`` (by class, :func:`~fgl_ray.data.splits.split_masks`).

    Raises:
        PartitionError: a client has no nodes.
        ValueError: a node is assigned twice.
    """
    counts = torch.bincount(torch.cat(list(assignments)), minlength=graph.num_nodes)
    if counts.numel() > graph.num_nodes or int(counts.max()) > 1:
        raise ValueError(
            "a partition assigned a node to several clients or outside the graph; each node needs exactly one client"
        )
    if any(nodes.numel() == 0 for nodes in assignments):
        raise PartitionError("a partition produced an empty client; lower the number of clients")
    ordered = _ordered(graph, assignments)
    edges = _own_edges(graph, [nodes for nodes, _ in ordered])
    return [_client(graph, nodes, edge_index, client_id, domain_names[domain], split, seed, split_mode)
            for client_id, ((nodes, domain), edge_index) in enumerate(zip(ordered, edges))]


def client_nodes(graph: Data, assignments: Sequence[Tensor]) -> list[Tensor]:
    """The sorted global node ids of client ``0..K-1``, as :func:`build_clients` numbers them
    (a client's local node ``i`` is global node ``client_nodes(...)[k][i]``)."""
    return [nodes for nodes, _ in _ordered(graph, assignments)]


def _ordered(graph: Data, assignments: Sequence[Tensor]) -> list[tuple[Tensor, int]]:
    """Each assignment's sorted nodes and majority domain, in client-id order (domain order,
    stable within a domain)."""
    majority = [int(torch.bincount(graph.domain[nodes]).argmax()) for nodes in assignments]
    order = sorted(range(len(assignments)), key=lambda index: majority[index])
    return [(assignments[index].sort().values, majority[index]) for index in order]


def _own_edges(graph: Data, clients: Sequence[Tensor]) -> list[Tensor]:
    """Each client's edges between its own (sorted) nodes, in local ids and in the graph's edge
    order: PyG's ``subgraph(nodes, relabel_nodes=True)`` per client, in one pass over the edges
    (per-client calls read every edge once per client: minutes and gigabytes at 1,000 clients)."""
    sizes = torch.tensor([nodes.numel() for nodes in clients])
    members = torch.cat(list(clients))
    owner = torch.full((graph.num_nodes,), -1, dtype=torch.long)
    owner[members] = torch.repeat_interleave(torch.arange(len(clients)), sizes)
    local = torch.empty(graph.num_nodes, dtype=torch.long)
    local[members] = torch.arange(members.numel()) - torch.repeat_interleave(torch.cumsum(sizes, 0) - sizes, sizes)
    source, target = graph.edge_index
    inside = (owner[source] == owner[target]) & (owner[source] >= 0)
    client_of = owner[source[inside]]
    order = torch.sort(client_of, stable=True).indices
    edges = torch.stack([local[source[inside]], local[target[inside]]])[:, order]
    counts = torch.bincount(client_of, minlength=len(clients)).tolist()
    return [part.clone() for part in torch.split(edges, counts, dim=1)]   # own storage: a view pickles all edges


def _client(graph: Data, nodes: Tensor, edge_index: Tensor, client_id: int, domain: str,
            split: tuple[float, float, float], seed: int, split_mode: str) -> ClientGraph:
    train, val, test = split_masks(graph.y[nodes], split, split_mode, client_generator(seed, client_id))
    data = Data(x=graph.x[nodes], edge_index=edge_index, y=graph.y[nodes],
                train_mask=train, val_mask=val, test_mask=test)
    return ClientGraph(client_id=client_id, domain=domain, data=data)
