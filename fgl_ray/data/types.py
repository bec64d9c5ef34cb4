"""Typed containers that the data layer hands to the runtime."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Callable, Literal

import torch
from torch import Tensor
from torch_geometric.data import Batch, Data

from fgl_ray.errors import DatasetUnavailable, default_data_dir  # noqa: F401  (re-exported)

Task = Literal["node", "graph"]
#: The readouts (``fgl_ray.tasks``) a dataset kind offers, its own first.
KIND_TASKS: dict[str, tuple[str, ...]] = {"node": ("node-classification",), "graph": ("graph-classification",)}
#: Multimodal node graphs offer the cross-modal readouts too.
MULTIMODAL_TASKS = ("node-classification", "link-prediction", "modality-matching", "modality-retrieval")
#: Node features at most this dense are shipped to workers sparse (COO: 20 bytes per non-zero
#: against 4 per entry dense, so it pays below a fifth; this leaves a margin).
PACK_DENSITY = 0.1


@dataclass(frozen=True)
class DatasetSpec:
    """What the registry knows about a dataset without loading it.

    Attributes:
        name: registry name (``twitch``, ``cora``, ``tu-mutag``, ...).
        task: ``node`` (node classification) or ``graph`` (graph classification).
        domains: domain names in a fixed order; a single-graph dataset has one.
        default_split: train/val/test fractions used when the config gives none.
        load: ``load(root, cache_dir) -> list[DomainGraph]`` (node task) or a list of
            graphs (graph task); ``root`` is the PyG-layout folder, may be read-only.
        files: paths relative to ``root`` that must exist for an offline load.
        description: one line for ``fgl-ray datasets``.
        needs_files: whether loading reads ``files`` (the synthetic generator does not).
        shared_features: the domains' raw features share coordinates (one vocabulary), so a
            single SVD can be fitted on their union (``features: svd``).
        multimodal: nodes carry a visual and a text modality (:mod:`fgl_ray.data.multimodal`).
        structure_view: the width of a first modality block that is an embedding of the graph's
            own edges (two-view graphs); for link prediction the data layer re-embeds the graph
            without any client's held-out edges, so that they never shape the inputs that score them.
        own_split: the loader gives every domain the dataset's published ``train_mask``/``val_mask``/
            ``test_mask`` (OGB's), which ``split_mode: dataset`` keeps; such datasets default to it.
        load_subset: ``load_subset(root, cache_dir, max_nodes, seed)``: the dataset cut to a seeded
            subset of ``max_nodes`` labelled nodes and the edges among them (config ``max_nodes``);
            ``None`` where the dataset offers no such cut.
    """

    name: str
    task: Task
    domains: tuple[str, ...]
    default_split: tuple[float, float, float]
    load: Callable[..., object]
    files: tuple[str, ...] = ()
    description: str = ""
    needs_files: bool = True
    shared_features: bool = True
    multimodal: bool = False
    structure_view: int = 0
    own_split: bool = False
    load_subset: Callable[..., object] | None = None

    @property
    def tasks(self) -> tuple[str, ...]:
        """The tasks this dataset offers, its own first."""
        return MULTIMODAL_TASKS if self.multimodal else KIND_TASKS[self.task]


@dataclass
class DomainGraph:
    """One domain's whole graph before partitioning (x float, edge_index, y long).

    ``modality_dims`` is set for multimodal graphs, whose ``x`` packs ``[visual | text |
    availability]`` (:mod:`fgl_ray.data.multimodal`): the widths of the two modality blocks.
    ``labelled`` is false for a graph without labels (its ``y`` is then 0 everywhere: one class).
    """

    name: str
    data: Data
    modality_dims: tuple[int, int] | None = None
    labelled: bool = True


@dataclass
class ClientGraph:
    """One client's private partition.

    For node tasks ``data`` holds ``x [n, d]`` float32, ``edge_index [2, m]`` (both directions
    of each undirected edge, local node ids), ``y [n]`` int64, and boolean ``train_mask``,
    ``val_mask``, ``test_mask`` of length ``n``; for graph classification it is a
    :class:`GraphSet`.
    """

    client_id: int
    domain: str
    data: "Data | GraphSet"

    @property
    def num_train(self) -> int:
        return int(self.data.train_mask.sum())

    def packed(self) -> "ClientGraph":
        """This partition for the object store: node features under :data:`PACK_DENSITY` dense
        travel as a sparse COO tensor (multi-hot Twitch features: 430 MB dense, 8 MB packed);
        :meth:`unpacked` gives back the dense features exactly."""
        x = getattr(self.data, "x", None) if isinstance(self.data, Data) else None
        if x is None or x.layout != torch.strided or x.dim() != 2 or not x.numel():
            return self
        if int(torch.count_nonzero(x)) > PACK_DENSITY * x.numel():
            return self
        data = copy.copy(self.data)   # shallow: the caller's partition keeps its dense features
        data.x = x.to_sparse_coo()
        return ClientGraph(self.client_id, self.domain, data)

    def unpacked(self) -> "ClientGraph":
        """The partition with dense node features again (the inverse of :meth:`packed`)."""
        x = getattr(self.data, "x", None) if isinstance(self.data, Data) else None
        if x is None or not x.is_sparse:
            return self
        data = copy.copy(self.data)
        data.x = x.to_dense()
        return ClientGraph(self.client_id, self.domain, data)


@dataclass
class GraphSet:
    """One client's graphs for graph classification.

    ``graphs`` are small ``Data`` objects (``x``, ``edge_index``, ``y [1]``) whose tensors are
    the client's own compact copies, so pickling a client carries only its graphs; ``y`` and
    the masks are per graph. ``num_features``/``num_classes`` are the client's own input width
    and label count (clients of a multi-dataset group differ).
    """

    graphs: list[Data]
    y: Tensor
    train_mask: Tensor
    val_mask: Tensor
    test_mask: Tensor
    num_features: int
    num_classes: int
    _collated: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def num_graphs(self) -> int:
        return len(self.graphs)

    @property
    def num_nodes(self) -> int:
        return sum(graph.num_nodes for graph in self.graphs)

    def to(self, device) -> "GraphSet":
        """A copy on ``device`` (the graphs are moved, this set is left as it is)."""
        return GraphSet([graph.to(device) for graph in self.graphs], self.y.to(device), self.train_mask.to(device),
                        self.val_mask.to(device), self.test_mask.to(device), self.num_features, self.num_classes)

    def collate(self, indices: Tensor) -> Batch:
        """The graphs at ``indices`` as one PyG ``Batch``."""
        return Batch.from_data_list([self.graphs[int(i)] for i in indices])

    def split_batches(self, split: str, batch_size: int) -> list[Batch]:
        """The split's graphs in their stored order, collated into batches once and cached."""
        key = (split, batch_size)
        if key not in self._collated:
            indices = getattr(self, f"{split}_mask").nonzero().flatten().cpu()
            self._collated[key] = [self.collate(chunk) for chunk in torch.split(indices, batch_size)]
        return self._collated[key]

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_collated": {}}   # batches are rebuilt where the set lives


@dataclass
class FederatedGraphData:
    """All clients' partitions plus the facts every client model needs."""

    clients: list[ClientGraph]
    domains: list[str]
    num_features: int
    num_classes: int
    meta: dict = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """Bytes of every client's tensors together (what a federation ships to its workers)."""
        return sum(tensor_bytes(client.data) for client in self.clients)


def tensor_bytes(value: "Tensor | Data | GraphSet") -> int:
    """Bytes of the tensors a tensor, a PyG ``Data`` or a :class:`GraphSet` holds."""
    if isinstance(value, Tensor):
        return value.element_size() * value.numel()
    if isinstance(value, GraphSet):
        return sum(map(tensor_bytes, [*value.graphs, value.y, value.train_mask, value.val_mask, value.test_mask]))
    if isinstance(value, Data):
        return sum(tensor_bytes(v) for store in value.stores for v in store.values() if isinstance(v, Tensor))
    return 0

