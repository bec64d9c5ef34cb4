"""The model contract and its registry."""

from __future__ import annotations

import contextlib
import inspect
import typing
import warnings
from typing import Callable, ClassVar, Hashable, Iterable, Sequence

import pydantic
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fgl_ray.registry import Registry

MODELS: Registry[type["GraphModel"]] = Registry("model")

#: How a convolution sums its neighbours: ``csr``, a product with the graph's sparse CSR in-edge
#: matrix (:func:`in_edge_matrix`); ``scatter``, PyG's default, one message per edge then a scatter.
Aggregation = typing.Literal["csr", "scatter"]


def uses_csr(model: str, aggregation: str) -> bool:
    """Whether ``aggregation`` asks for the CSR product (else PyG's scatter); any other value raises."""
    if aggregation not in typing.get_args(Aggregation):
        raise ValueError(f"{model} aggregation must be 'csr' or 'scatter', got {aggregation!r}")
    return aggregation == "csr"


class GraphModel(nn.Module):
    """A model split into an encoder and a classifier head.

    Tasks call ``encode`` and ``classify`` (node models: ``encode(x, edge_index)``; graph models:
    ``encode(x, edge_index, batch)``, one row per graph); algorithms that share representations
    (prototypes) use what ``encode`` returns.
    """

    #: The tasks (``fgl_ray.tasks``) this backbone serves (link prediction scores node pairs by the
    #: dot product of their ``encode`` rows unless the model has ``score_links``).
    tasks: ClassVar[tuple[str, ...]] = ("node-classification", "link-prediction")
    #: The first layer multiplies ``x`` by a weight, so ``x`` may be a sparse CSR matrix.
    accepts_sparse_features: ClassVar[bool] = True
    #: The width of what ``encode`` returns (set by each backbone).
    representation_dim: int
    #: ``encode``/``classify`` take ``hops`` (a neighbour-sampled batch's nodes and edges per hop) and
    #: compute each layer only where a later layer reads it (PyG's ``trim_to_layer``), and ``chunks``
    #: (:data:`LayerChunks`) to compute each layer a chunk of nodes at a time (layer-wise inference).
    trims_hops: ClassVar[bool] = False

    def shares(self, name: str) -> bool:
        """Whether trainable parameter ``name`` travels to the server (default: all do)."""
        return True

    def encode(self, x: Tensor, edge_index: Tensor) -> Tensor:
        raise NotImplementedError

    def classify(self, h: Tensor, edge_index: Tensor) -> Tensor:
        raise NotImplementedError

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        return self.classify(self.encode(x, edge_index), edge_index)


class GraphCache:
    """A value derived from a graph, kept for that ``edge_index`` tensor and ``key`` (sizes, dtype):
    the tensor is held, so that its identity cannot pass to another graph (PyG's ``cached=True``
    keeps the first graph's normalisation for every later one).

    Two entries: the largest graph seen (by edges), which only a graph at least as large replaces,
    and the latest smaller one. So a client that trains on sampled batches (a new, smaller graph
    each step) keeps its whole graph's value from one evaluation to the next instead of rebuilding
    it (measured over rounds of two sampled steps and one evaluation of a 200k-node, 6M-edge graph,
    one thread: sage's evaluation 1.6 -> 1.2 s, gcn's 1.3 -> 0.8 s), and a graph asked for twice
    in a row is built once, as with one entry. Copies and pickles of a model start empty: a sparse CSR tensor cannot
    be deep-copied, and a model sent through Ray or into a checkpoint need not carry its graphs."""

    def __init__(self) -> None:
        self.clear()

    def get(self, edge_index: Tensor, key: Hashable, build: Callable[[], object]):
        for entry in (self._largest, self._latest):
            if entry is not None and entry[0] is edge_index and entry[1] == key:
                return entry[2]
        entry = (edge_index, key, build())
        if self._largest is None or edge_index.shape[1] >= self._largest[0].shape[1]:
            self._largest, self._latest = entry, self._largest
        else:
            self._latest = entry
        return entry[2]

    def clear(self) -> None:
        self._largest: tuple[Tensor, Hashable, object] | None = None
        self._latest: tuple[Tensor, Hashable, object] | None = None

    def __getstate__(self) -> dict:
        return {"empty": True}

    def __setstate__(self, state: dict) -> None:   # also for pickles of the one-entry cache
        self.clear()


class GCNNormalisation:
    """``D^-1/2 (A + I) D^-1/2`` of an ``edge_index`` for ``GCNConv(normalize=False)``, as (edges,
    weights), or with ``sparse`` as (its :func:`in_edge_matrix`, None), cached for that tensor
    (:class:`GraphCache`): another tensor (a sampled batch, an augmented view, another client's
    graph) is normalised anew."""

    def __init__(self, sparse: bool = False) -> None:
        self.sparse = sparse
        self._cache = GraphCache()

    def __call__(self, edge_index: Tensor, num_nodes: int, dtype: torch.dtype) -> tuple[Tensor, Tensor | None]:
        return self._cache.get(edge_index, (num_nodes, dtype), lambda: self._normalise(edge_index, num_nodes, dtype))

    def _normalise(self, edge_index: Tensor, num_nodes: int, dtype: torch.dtype) -> tuple[Tensor, Tensor | None]:
        from torch_geometric.nn.conv.gcn_conv import gcn_norm

        index, weight = gcn_norm(edge_index, None, num_nodes, add_self_loops=True, dtype=dtype)
        return (in_edge_matrix(index, weight, (num_nodes, num_nodes)), None) if self.sparse else (index, weight)


def in_edges_by_target(edge_index: Tensor, num_nodes: int) -> tuple[Tensor, Tensor]:
    """The CSC index of a graph, on ``edge_index``'s device: ``(colptr, order)``, where ``order``
    sorts the edges by target (stably) and node ``v``'s in-edges are ``order[colptr[v]:colptr[v + 1]]``.
    On a GPU the pointers come from a search in the sorted targets, which reads nothing back to the
    host (``bincount`` would, for its length); on the CPU counting is faster (1.3 against 2.9 ms
    for 200k edges)."""
    targets, order = torch.sort(edge_index[1], stable=True)
    if targets.device.type != "cpu":
        return torch.searchsorted(targets, torch.arange(num_nodes + 1, device=targets.device)), order
    colptr = torch.zeros(num_nodes + 1, dtype=torch.long)
    colptr[1:] = torch.cumsum(torch.bincount(targets, minlength=num_nodes), 0)
    return colptr, order


def in_edge_matrix(edge_index: Tensor, values: Tensor, size: tuple[int, int]) -> Tensor:
    """The ``size[1] x size[0]`` sparse CSR matrix whose row ``v`` holds the ``values`` of ``v``'s
    in-edges, in their order in ``edge_index`` (repeated edges kept apart): a product with it sums a
    node's messages in the order PyG's scatter does, without one message per edge. A row's columns
    are sorted where ``edge_index`` is sorted by source (a coalesced graph); repeated edges break
    torch's "distinct columns" rule, which its CPU kernels do not need (not checked on CUDA)."""
    rows, order = in_edges_by_target(edge_index, size[1])
    with quiet_sparse_warnings():
        return torch.sparse_csr_tensor(rows, edge_index[0][order], values[order], (size[1], size[0]))


COMMON_ARGUMENTS = ("self", "in_dim", "num_classes", "hidden", "num_layers", "dropout")


def model_options(name: str) -> list[str]:
    """Keyword options that backbone ``name`` accepts beyond the common ones."""
    signature = inspect.signature(MODELS.get(name).__init__)
    return [p for p in signature.parameters if p not in COMMON_ARGUMENTS]


def check_model_options(name: str, options: dict) -> None:
    """Raises ``ValueError`` naming the valid options when ``options`` has an unknown key, and the
    accepted values when one does not fit the type its backbone annotates."""
    unknown = sorted(set(options) - set(model_options(name)))
    if unknown:
        valid = ", ".join(model_options(name)) or "none"
        raise ValueError(f"model {name!r} has no option(s) {', '.join(unknown)}; valid options: {valid}")
    hints = typing.get_type_hints(MODELS.get(name).__init__) if options else {}
    for key, value in options.items():
        if key in hints:
            try:   # strict: the model receives the value as given, so "false" must not pass for False
                pydantic.TypeAdapter(hints[key]).validate_python(tuple(value) if isinstance(value, list) else value,
                                                                 strict=True)
            except pydantic.ValidationError as error:
                choices = typing.get_args(hints[key]) if typing.get_origin(hints[key]) is typing.Literal else ()
                wanted = " or ".join(map(repr, choices)) if choices else error.errors()[0]["msg"].lower()
                raise ValueError(f"model {name!r} option {key}: {'must be ' if choices else ''}{wanted}, "
                                 f"got {value!r}") from None


Hops = tuple[Sequence[int], Sequence[int]]
"""A neighbour-sampled batch's node and edge counts per hop (seeds first)."""


LayerChunks = Iterable[tuple[int, int, Tensor]]
"""Layer-wise inference's chunks of a graph (see :class:`fgl_ray.tasks.sampling.InEdgeChunks`): each
``(start, stop, edges)`` holds targets ``start..stop-1`` and their in-edges as (source id, target - start)."""


class ConvStack(GraphModel):
    """Message-passing layers ``conv -> ReLU -> dropout``, the last layer being the classifier.

    Subclasses build ``self.convs`` (one conv per :func:`layer_dims` entry) and set ``dropout``.
    With ``hops`` (subclasses that set ``trims_hops``, whose convs take bipartite input), layer
    ``i`` of ``L`` reads the nodes within ``L - i`` hops of the seeds and computes only those within
    ``L - i - 1`` (exact for convolutions whose output at a node reads only its in-edges); the rows
    it does not compute are returned as zeros.
    """

    convs: nn.ModuleList
    dropout: float

    def encode(self, x: Tensor, edge_index: Tensor, hops: Hops | None = None,
               chunks: LayerChunks | None = None) -> Tensor:
        rows = x.shape[0]
        for layer, conv in enumerate(self.convs[:-1]):
            x = F.dropout(F.relu(self._layer(layer, conv, x, edge_index, hops, chunks)), self.dropout, self.training)
        return _padded(x, rows)

    def classify(self, h: Tensor, edge_index: Tensor, hops: Hops | None = None,
                 chunks: LayerChunks | None = None) -> Tensor:
        return _padded(self._layer(len(self.convs) - 1, self.convs[-1], h, edge_index, hops, chunks), h.shape[0])

    def _layer(self, layer: int, conv: nn.Module, x: Tensor, edge_index: Tensor, hops: Hops | None,
               chunks: LayerChunks | None = None) -> Tensor:
        if chunks is not None:        # layer-wise: every node from all its in-edges, a chunk of targets at a time
            out = None
            for start, stop, edges in chunks:
                part = self._conv(conv, (x, x[start:stop]), edges, (x.shape[0], stop - start))
                out = part.new_empty(x.shape[0], part.shape[1]) if out is None else out
                out[start:stop] = part
            return out
        if hops is None:
            return self._conv(conv, x, edge_index, (x.shape[0], x.shape[0]))
        nodes, edges = hops
        depth = len(self.convs) - layer               # hops this layer's inputs span
        sources, targets = sum(nodes[:depth + 1]), sum(nodes[:depth])
        x = x[:sources]
        return self._conv(conv, (x, x[:targets]), edge_index[:, :sum(edges[:depth])], (sources, targets))

    def _conv(self, conv: nn.Module, x: Tensor | tuple[Tensor, Tensor], edge_index: Tensor,
              size: tuple[int, int]) -> Tensor:
        """One conv from the ``size[0]`` source rows of ``x`` to its ``size[1]`` target rows."""
        return conv(x, edge_index, size=size)


def _padded(x: Tensor, rows: int) -> Tensor:
    """``x`` with zero rows appended up to ``rows`` (the nodes a trimmed layer did not compute)."""
    return x if x.shape[0] == rows else torch.cat([x, x.new_zeros(rows - x.shape[0], *x.shape[1:])])


def uniform_dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Inverted dropout with the mask drawn as ``uniform >= p``: the same operation as
    ``F.dropout``, about 3x faster on CPU (torch draws ``F.dropout``'s Bernoulli mask element by
    element: 2.2 ms against 0.7 ms for 3,500 x 64, one thread, measured), which is a third of a
    GIN client's step on PROTEINS."""
    if not training or p == 0.0:
        return x
    return x * (torch.rand_like(x) >= p) / (1.0 - p)


def build_model(name: str, in_dim: int, num_classes: int, hidden: int = 128, num_layers: int = 2,
                dropout: float = 0.5, **options) -> GraphModel:
    """Builds the registered backbone ``name`` with its extra ``options``."""
    check_model_options(name, options)
    return MODELS.get(name)(in_dim, num_classes, hidden=hidden, num_layers=num_layers, dropout=dropout, **options)


def layer_dims(in_dim: int, num_classes: int, hidden: int, num_layers: int) -> list[tuple[int, int]]:
    """(input, output) widths of each layer of a ``num_layers``-deep stack."""
    dims = [in_dim] + [hidden] * (num_layers - 1) + [num_classes]
    return list(zip(dims[:-1], dims[1:]))


def dropout_features(x: Tensor, p: float, training: bool) -> Tensor:
    """``F.dropout`` that keeps a sparse CSR ``x`` sparse: it drops stored entries only, which is
    dense dropout's distribution (a dropped zero stays zero), though not its random stream."""
    if x.layout != torch.sparse_csr:
        return F.dropout(x, p, training)
    with quiet_sparse_warnings():
        return torch.sparse_csr_tensor(x.crow_indices(), x.col_indices(), F.dropout(x.values(), p, training), x.shape)


@contextlib.contextmanager
def quiet_sparse_warnings():
    """Hides torch's notices that sparse CSR is in beta and that invariant checks are off."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta", category=UserWarning)
        warnings.filterwarnings("ignore", message="Sparse invariant checks", category=UserWarning)
        yield
