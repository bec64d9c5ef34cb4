"""Graph-classification federations: TU datasets and groups of them, split into client graph sets.

* ``chunks`` (one dataset): the graphs are shuffled with the data seed and cut into
  ``num_clients`` contiguous chunks, one per client (GCFL's single-dataset setting).
* ``datasets`` (a group such as ``tu-molecules``): one client per member dataset.

Inside each client the graphs are split into train/val/test by class (stratified, default
80/10/10), seeded by ``(data_seed, client_id)``. ``max_graphs`` keeps the first that many graphs
of each dataset after the shuffle (the GCFL paper's tiny variants use 150). Every graph is a
compact copy (``Data.clone()``): a TU graph taken from the dataset is a *view* of the whole
dataset's storage, and pickling a view pickles that storage, so a client would otherwise carry
every graph of the dataset.

Datasets without node features (IMDB-BINARY, IMDB-MULTI, COLLAB) get one-hot degree features,
the degree capped at :data:`DEGREE_CAP` (degrees above share the last slot; 135 is
IMDB-BINARY's largest degree, which GCFL's code uses for it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import degree

from fgl_ray.data.partition.base import PartitionError
from fgl_ray.data.splits import client_generator, split_masks
from fgl_ray.data.types import ClientGraph, FederatedGraphData, GraphSet

DEGREE_CAP = 135
GRAPH_PARTITIONS = ("chunks", "chunks_ordered", "datasets")
#: ``chunks_ordered``: the size of each client's file-order block (GCFL's ``_randChunk``).
ORDERED_CHUNK = 50


def one_hot_degree(edge_index: Tensor, num_nodes: int, cap: int = DEGREE_CAP) -> Tensor:
    """``[num_nodes, cap + 1]`` one-hot of each node's degree, degrees above ``cap`` in the last slot."""
    counts = degree(edge_index[0], num_nodes, dtype=torch.long).clamp(max=cap)
    return torch.nn.functional.one_hot(counts, cap + 1).float()


def compact_graphs(graphs: Sequence[Data]) -> list[Data]:
    """Compact copies holding ``x`` (float; one-hot degrees when absent), ``edge_index`` and ``y [1]``."""
    compact = []
    for graph in graphs:
        x = graph.x if graph.get("x") is not None else one_hot_degree(graph.edge_index, graph.num_nodes)
        compact.append(Data(x=x.float().clone(), edge_index=graph.edge_index.clone(),
                            y=graph.y.reshape(1).long().clone()))
    return compact


def shuffled(graphs: Sequence[Data], seed: int, limit: int | None) -> list[Data]:
    """The graphs in a seeded random order, the first ``limit`` of them when given."""
    order = np.random.default_rng(seed).permutation(len(graphs))
    return [graphs[int(i)] for i in order[:limit]]


def graph_set(graphs: Sequence[Data], client_id: int, split: tuple[float, float, float], split_mode: str,
              seed: int, num_classes: int | None = None) -> GraphSet:
    """One client's :class:`GraphSet` with per-graph masks seeded by ``(seed, client_id)``."""
    y = torch.cat([graph.y for graph in graphs])
    train, val, test = split_masks(y, split, split_mode, client_generator(seed, client_id))
    classes = num_classes if num_classes is not None else int(y.max()) + 1
    return GraphSet(list(graphs), y, train, val, test, num_features=graphs[0].num_features, num_classes=classes)


def ordered_chunks(num_graphs: int, num_clients: int, seed: int) -> list[list[int]]:
    """GCFL's chunking (its ``_randChunk`` without overlap): client ``i`` takes graphs
    ``[m i, m (i + 1))`` in file order, ``m = min(50, n // K)``, and every remaining graph goes to
    a client drawn uniformly at random (seeded). TU files are often sorted by class, so the blocks
    are label-skewed: this is the authors' protocol, not a shuffle."""
    size = min(ORDERED_CHUNK, num_graphs // num_clients)
    chunks = [list(range(i * size, (i + 1) * size)) for i in range(num_clients)]
    owners = np.random.default_rng(seed).integers(0, num_clients, size=num_graphs - num_clients * size)
    for index, owner in zip(range(num_clients * size, num_graphs), owners):
        chunks[int(owner)].append(index)
    return chunks


def chunk_clients(name: str, graphs: Sequence[Data], num_clients: int, split: tuple[float, float, float],
                  split_mode: str, seed: int, limit: int | None = None, in_file_order: bool = False
                  ) -> list[ClientGraph]:
    """One dataset cut into ``num_clients`` chunks: shuffled, sizes differing by at most one
    (``chunks``), or with ``in_file_order`` by :func:`ordered_chunks` (``chunks_ordered``; the
    first ``limit`` graphs in file order when given)."""
    ordered = list(graphs)[:limit] if in_file_order else shuffled(graphs, seed, limit)
    if num_clients > len(ordered):
        raise PartitionError(f"{name} has {len(ordered)} graphs, fewer than num_clients={num_clients}; "
                                  "lower --num-clients")
    num_classes = int(torch.cat([g.y for g in ordered]).max()) + 1
    chunks = (ordered_chunks(len(ordered), num_clients, seed) if in_file_order
              else np.array_split(np.arange(len(ordered)), num_clients))
    return [ClientGraph(client_id, name, graph_set([ordered[int(i)] for i in chunk], client_id, split, split_mode,
                                                   seed, num_classes))
            for client_id, chunk in enumerate(chunks)]


def dataset_clients(named: Mapping[str, Sequence[Data]], split: tuple[float, float, float], split_mode: str,
                    seed: int, limit: int | None = None) -> list[ClientGraph]:
    """One client per dataset of a group, in the group's order; each keeps its own width and labels."""
    return [ClientGraph(client_id, name, graph_set(shuffled(graphs, seed, limit), client_id, split, split_mode, seed))
            for client_id, (name, graphs) in enumerate(named.items())]


def graph_federation(named: Mapping[str, Sequence[Data]], partition: str, num_clients: int,
                     split: tuple[float, float, float], split_mode: str, seed: int,
                     limit: int | None = None) -> FederatedGraphData:
    """The clients of a graph-classification federation and the facts models need.

    ``num_features`` / ``num_classes`` are the largest over clients (the server's model only
    holds the shared layers, whose shapes do not depend on them; statistics use the label width).
    """
    if partition in ("chunks", "chunks_ordered"):
        if len(named) != 1:
            raise PartitionError(f"partition {partition!r} cuts one dataset, got a group of {len(named)}; "
                                      "use partition 'datasets'")
        (name, graphs), = named.items()
        clients = chunk_clients(name, compact_graphs(graphs), num_clients, split, split_mode, seed, limit,
                                in_file_order=partition == "chunks_ordered")
    elif partition == "datasets":
        clients = dataset_clients({n: compact_graphs(g) for n, g in named.items()}, split, split_mode, seed, limit)
    else:
        raise PartitionError(f"unknown graph partition {partition!r}; valid: {', '.join(GRAPH_PARTITIONS)}")
    empty = [c.client_id for c in clients if int(c.data.train_mask.sum()) == 0]
    if empty:
        raise PartitionError(f"clients {empty} have no training graph; lower --num-clients")
    return FederatedGraphData(
        clients=clients,
        domains=list(dict.fromkeys(c.domain for c in clients)),
        num_features=max(c.data.num_features for c in clients),
        num_classes=max(c.data.num_classes for c in clients),
        meta={"partitioner": partition, "split": split, "datasets": {n: len(g) for n, g in named.items()},
              "client_graphs": {c.client_id: c.data.num_graphs for c in clients}},
    )
