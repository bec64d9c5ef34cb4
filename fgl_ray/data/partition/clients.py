"""Turns node assignments into clients: induced subgraphs with their own split masks."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch_geometric.data import Data

from fgl_ray.data.partition.base import SPLIT_MASKS, PartitionError
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
        split_mode: ``random`` or ``stratified`` (by class, :func:`~fgl_ray.data.splits.split_masks`),
            or ``dataset``: each client keeps its nodes' entries of the graph's own masks.

    Raises:
        PartitionError: a client has no nodes, or ``split_mode`` is ``dataset`` and the graph
            has no masks of its own.
        ValueError: a node is assigned twice.
    """
    counts = torch.bincount(torch.cat(list(assignments)), minlength=graph.num_nodes)
    if counts.numel() > graph.num_nodes or int(counts.max()) > 1:
        raise ValueError(
            "a partition assigned a node to several clients or outside the graph; each node needs exactly one client"
        )
    if any(nodes.numel() == 0 for nodes in assignments):
        raise PartitionError("a partition produced an empty client; lower the number of clients")
    if split_mode == "dataset" and not all(name in graph for name in SPLIT_MASKS):
        raise PartitionError("split_mode 'dataset' keeps the dataset's own train/val/test masks, but this graph has "
                             "none; use split_mode random or stratified")
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
    code = torch.full((graph.num_nodes,), -1, dtype=torch.long)   # client << 32 | local id; -1: no client
    code[members] = ((torch.repeat_interleave(torch.arange(len(clients)), sizes) << 32) + torch.arange(members.numel())
                     - torch.repeat_interleave(torch.cumsum(sizes, 0) - sizes, sizes))
    source, target = code[graph.edge_index[0]], code[graph.edge_index[1]]   # one lookup per endpoint
    inside = (source >> 32 == target >> 32) & (source >= 0)
    source, target = source[inside], target[inside]
    del inside
    client_of = (source >> 32).int()
    order = torch.sort(client_of, stable=True).indices
    counts = torch.bincount(client_of, minlength=len(clients)).tolist()
    del client_of
    source.bitwise_and_(0xFFFFFFFF)
    target.bitwise_and_(0xFFFFFFFF)
    return [torch.stack([source[part], target[part]]) for part in torch.split(order, counts)]   # each its own storage


def _client(graph: Data, nodes: Tensor, edge_index: Tensor, client_id: int, domain: str,
            split: tuple[float, float, float], seed: int, split_mode: str) -> ClientGraph:
    if split_mode == "dataset":
        train, val, test = (graph[name][nodes] for name in SPLIT_MASKS)
    else:
        train, val, test = split_masks(graph.y[nodes], split, split_mode, client_generator(seed, client_id))
    data = Data(x=graph.x[nodes], edge_index=edge_index, y=graph.y[nodes],
                train_mask=train, val_mask=val, test_mask=test)
    return ClientGraph(client_id=client_id, domain=domain, data=data)
