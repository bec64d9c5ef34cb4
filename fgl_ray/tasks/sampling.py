"""Neighbour-sampled mini-batches of one client graph, through PyG's loader classes.

PyG's ``NeighborLoader`` samples with ``pyg-lib`` or ``torch-sparse``, compiled packages this
project does not require. :func:`neighbor_sampler` gives PyG's sampler when either is installed,
else a :class:`TorchNeighborSampler`, the same uniform sampling without replacement written in
plain torch; :func:`neighbor_loader` hands it to PyG's ``NodeLoader``. Both yield PyG ``Data``
batches whose first ``batch_size`` rows are the seed nodes and whose edges point from sampled
neighbours to the nodes that drew them. :class:`InEdgeChunks` serves layer-wise inference, indexed
by the same :func:`in_edges_by_target`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch_geometric.typing
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.loader import NodeLoader
from torch_geometric.sampler import BaseSampler, NeighborSampler, NodeSamplerInput, SamplerOutput

from fgl_ray.models.base import in_edges_by_target

ALL_NEIGHBORS = -1


class InEdgeChunks:
    """A graph's in-edges grouped by target node, served in chunks of ``chunk`` consecutive
    targets: what layer-wise inference needs to compute a layer for every node from all its
    neighbours while holding one chunk's messages at a time."""

    def __init__(self, edge_index: Tensor, num_nodes: int, chunk: int) -> None:
        self.ptr, order = in_edges_by_target(edge_index.cpu(), num_nodes)   # read on the host, chunk by chunk
        self.sources = edge_index[0][order.to(edge_index.device)]
        self.num_nodes, self.chunk = num_nodes, chunk

    def __iter__(self):
        """``(start, stop, edges)``: targets ``start..stop-1`` and their in-edges as (source id, target - start)."""
        for start in range(0, self.num_nodes, self.chunk):
            stop = min(start + self.chunk, self.num_nodes)
            low, high = int(self.ptr[start]), int(self.ptr[stop])
            degrees = self.ptr[start + 1:stop + 1] - self.ptr[start:stop]
            targets = torch.repeat_interleave(torch.arange(stop - start), degrees)
            yield start, stop, torch.stack([self.sources[low:high], targets.to(self.sources.device)])


class TorchNeighborSampler(BaseSampler):
    """Uniform ``num_neighbors[hop]`` in-neighbours per node and hop, without replacement
    (``-1``: all), over a CSC index built once; a node's neighbours are drawn once, at the hop
    where it first enters the batch (PyG's ``NeighborSampler`` semantics, directed subgraph)."""

    def __init__(self, edge_index: Tensor, num_nodes: int, num_neighbors: Sequence[int]) -> None:
        self.colptr, order = in_edges_by_target(edge_index.cpu(), num_nodes)
        self.sources = edge_index[0].cpu()[order]
        self.edge_ids = order
        self.num_neighbors = list(num_neighbors)
        self._local = torch.full((num_nodes,), -1, dtype=torch.long)   # global -> batch id, reset after each batch

    def sample_from_nodes(self, index: NodeSamplerInput, **kwargs) -> SamplerOutput:
        seeds = index.node.cpu()
        nodes, rows, cols, edges = [seeds], [], [], []
        self._local[seeds] = torch.arange(seeds.numel())
        frontier, count = seeds, seeds.numel()
        try:
            for fanout in self.num_neighbors:
                positions, targets = self._draw(frontier, fanout)
                source = self.sources[positions]
                fresh = torch.unique(source[self._local[source] < 0])
                self._local[fresh] = torch.arange(count, count + fresh.numel())
                count += fresh.numel()
                nodes.append(fresh)
                rows.append(self._local[source])
                cols.append(self._local[targets])
                edges.append(self.edge_ids[positions])
                frontier = fresh
            node = torch.cat(nodes)
        finally:
            self._local[torch.cat(nodes)] = -1
        return SamplerOutput(node=node, row=torch.cat(rows), col=torch.cat(cols), edge=torch.cat(edges),
                             batch=None, num_sampled_nodes=[n.numel() for n in nodes],
                             num_sampled_edges=[r.numel() for r in rows], metadata=(index.input_id, index.time))

    def _draw(self, frontier: Tensor, fanout: int) -> tuple[Tensor, Tensor]:
        """CSC positions of the in-edges drawn for each ``frontier`` node, and their target nodes."""
        starts = self.colptr[frontier]
        degree = self.colptr[frontier + 1] - starts
        total = int(degree.sum())
        segment = torch.repeat_interleave(torch.arange(frontier.numel()), degree, output_size=total)
        offset = torch.arange(total) - torch.repeat_interleave(torch.cumsum(degree, 0) - degree, degree,
                                                               output_size=total)
        if fanout != ALL_NEIGHBORS and total:
            # a random key per edge shuffles each node's edges in place (segments stay where they
            # are, so ``offset`` is the rank within the node after the shuffle): the first
            # ``fanout`` of each node are a uniform draw without replacement
            shuffled = torch.sort(segment.double() + torch.rand(total, dtype=torch.float64)).indices
            chosen = shuffled[offset < fanout]
            segment, offset = segment[chosen], offset[chosen]
        return starts[segment] + offset, frontier[segment]

    def sample_from_edges(self, index, neg_sampling=None) -> SamplerOutput:
        raise NotImplementedError("neighbour sampling serves node-level mini-batches only; link prediction "
                                  "trains full-batch (node_batching: full)")


def neighbor_sampler(data: Data, num_neighbors: Sequence[int]) -> BaseSampler:
    """The sampler of ``data`` (its in-edge index is built here, once): PyG's ``NeighborSampler``
    where ``pyg-lib`` or ``torch-sparse`` is installed, else :class:`TorchNeighborSampler`."""
    if torch_geometric.typing.WITH_PYG_LIB or torch_geometric.typing.WITH_TORCH_SPARSE:
        return NeighborSampler(data, num_neighbors=list(num_neighbors))
    return TorchNeighborSampler(data.edge_index, data.num_nodes, num_neighbors)


def neighbor_loader(data: Data, sampler: BaseSampler, seeds: Tensor, batch_size: int, shuffle: bool,
                    transform: Callable[[Data], Data] | None = None) -> NodeLoader:
    """Mini-batches of ``seeds`` (node ids of ``data``) with their neighbourhoods drawn by ``sampler``
    (one sampler serves every loader of a graph)."""
    return NodeLoader(data, node_sampler=sampler, input_nodes=seeds.cpu(), batch_size=batch_size, shuffle=shuffle,
                      transform=transform)
