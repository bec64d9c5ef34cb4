"""ACM-GCN with FedSPA's label-decoupled propagation (Tan et al., "FedSPA: Generalizable Federated
Graph Learning under Homophily Heterogeneity", CVPR 2025; the authors' ``acm_spa`` model in
``OakleyTan/FedSPA``, ``Code/benchmark001/config.py``, built on Luan et al.'s ACM-GCN).

Each layer (``in -> out``) has a low-pass, a high-pass and an identity (MLP) channel, with
``A_hat = D~^-1 (A + I)`` (row-normalised, self-loops)::

    L = relu(A_hat X W_low),   H = relu((I - A_hat) X W_high),   M = relu(X W_mlp)

and splits the two filtered channels by edge type (Subgraph Feature Propagation Decoupling): an edge
is ``homo`` when both ends are labelled training nodes of the same class, ``hetero`` when of
different classes, ``unknown`` otherwise, and ``L_t[i]`` sums ``L[j]`` over the in-edges ``j -> i``
of type ``t`` (unnormalised, as the authors' DGL message passing does; ``H_t`` likewise;
``typed_aggregation: normalised`` divides by the self-looped in-degree, so that the three typed
sums add up to ``A_hat``'s neighbour part: on Twitch, where degrees reach the hundreds, the sums
make round 0's loss explode under the FedIA preset's SGD and FedSPA ends as a constant
predictor, while the normalised sums train). The seven
channels ``C = (L_het, H_het, L_hom, H_hom, L_unk, H_unk, M)`` are mixed per node by

    s = (L_het a_het_low, H_het a_het_high, L_hom a_hom_low, H_hom a_hom_high,
         g_L L_unk a_het_low + (1 - g_L) L_unk a_hom_low,
         g_H H_unk a_het_high + (1 - g_H) H_unk a_hom_high,  M a_mlp)
    alpha = softmax(sigmoid(s) Mix / 7),   out = 7 sum_c alpha_c C_c

with the gates ``g_L = sigmoid(gate(L_unk))``, ``g_H = sigmoid(gate(H_unk))`` (one linear map
``out -> 1``, shared) and a ``7 x 7`` mixing matrix. ``att_hetero_*`` and ``att_homo_*`` are the
authors' ``att_vec_*_fr`` and ``att_vec_*_be``, the tensors FedSPA's server weights by Fisher
information (:data:`ATTENTION_GROUPS`). The input is dropped out before the first layer (a sparse
CSR input, multi-hot features under ``sparse_features``, stays sparse: its stored entries are
dropped, dense dropout's distribution with another random stream, so ``sparse_features: off``
repeats a run recorded before 2026-12-07 exactly); hidden layers end in ReLU and dropout; the last
layer's output is the logits (the authors return their log-softmax, which the task's
cross-entropy applies).

Departures from the authors' code: their unknown high-pass score mixes ``H_unk a_het_high`` with
``H_het a_hom_high`` (the hetero channel, by all appearances a slip); here ``H_unk`` in both terms,
as in their low-pass score. Their separate unknown-edge vectors (``att_vec_*_unk``) are read only
by a client that has never trained (evaluation before its first round) and never trained
themselves; here the gates always mix, and those vectors and the other parameters the model never
reads (ACM's 3-channel attention, layer and batch norms) are left out. Initialisation is theirs
(Xavier-uniform weights and vectors, PyTorch's default for the gate).

The backbone never sees labels: an algorithm hands it the edge types of one ``edge_index`` tensor
(:meth:`ACMGCN.set_edge_types`, held by identity like GCN's normalisation cache); any other
tensor's edges are all ``unknown``. So ``--model acm_gcn`` under another algorithm has no homo or
hetero channel: FedSPA's backbone without the decoupling.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fgl_ray.models.base import MODELS, GraphCache, GraphModel, dropout_features, layer_dims

HOMO, HETERO, UNKNOWN = 0, 1, 2
#: The attention vectors FedSPA aggregates by Fisher information (authors' ``fr`` and ``be`` names).
ATTENTION_GROUPS = {"hetero": ("att_hetero_low", "att_hetero_high"), "homo": ("att_homo_low", "att_homo_high")}
CHANNELS = 7


def label_edge_types(edge_index: Tensor, y: Tensor, known: Tensor) -> Tensor:
    """Each edge's type from the labels of the ``known`` nodes: homo, hetero or unknown."""
    label = torch.where(known, y, torch.full_like(y, -1))
    source, target = label[edge_index[0]], label[edge_index[1]]
    both = (source >= 0) & (target >= 0)
    types = torch.full_like(source, UNKNOWN)
    types[both & (source == target)] = HOMO
    types[both & (source != target)] = HETERO
    return types


def attention_group(name: str) -> str | None:
    """The attention group (``hetero``/``homo``) of parameter ``name``, ``None`` for the others."""
    leaf = name.rsplit(".", 1)[-1]
    return next((group for group, leaves in ATTENTION_GROUPS.items() if leaf in leaves), None)


def attention_size(num_classes: int, hidden: int, num_layers: int) -> int:
    """Entries of one attention group: two ``[out, 1]`` vectors per layer."""
    return 2 * sum(out for _, out in layer_dims(1, num_classes, hidden, num_layers))


class TypedGraph:
    """One graph's propagation: the self-looped in-degree and the in-edges of each type; with
    ``normalised``, typed sums are divided by that degree."""

    def __init__(self, edge_index: Tensor, types: Tensor, num_nodes: int, normalised: bool = False) -> None:
        self.source, self.target = edge_index
        self.normalised = normalised
        degree = torch.ones(num_nodes, device=edge_index.device).index_add_(
            0, self.target, torch.ones(self.target.numel(), device=edge_index.device))
        self.inverse_degree = degree.reciprocal().unsqueeze(1)
        self.typed = [(self.source[types == t], self.target[types == t]) for t in (HOMO, HETERO, UNKNOWN)]

    def low_pass(self, h: Tensor) -> Tensor:
        """``D~^-1 (A + I) h``."""
        return (h + torch.zeros_like(h).index_add_(0, self.target, h[self.source])) * self.inverse_degree.to(h.dtype)

    def typed_sums(self, h: Tensor) -> list[Tensor]:
        """Per edge type (homo, hetero, unknown), the sum of ``h`` over each node's in-neighbours
        (divided by the self-looped in-degree when ``normalised``)."""
        sums = [torch.zeros_like(h).index_add_(0, target, h[source]) for source, target in self.typed]
        return [total * self.inverse_degree.to(h.dtype) for total in sums] if self.normalised else sums


def _xavier(*shape: int) -> nn.Parameter:
    return nn.Parameter(nn.init.xavier_uniform_(torch.empty(*shape)))


class ACMLayer(nn.Module):
    """Three filters, six edge-typed channels plus the identity one, mixed by per-node attention."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.weight_low, self.weight_high, self.weight_mlp = (_xavier(in_dim, out_dim) for _ in range(3))
        self.att_hetero_low, self.att_hetero_high = _xavier(out_dim, 1), _xavier(out_dim, 1)
        self.att_homo_low, self.att_homo_high = _xavier(out_dim, 1), _xavier(out_dim, 1)
        self.att_mlp = _xavier(out_dim, 1)
        self.mixer = _xavier(CHANNELS, CHANNELS)
        self.gate = nn.Linear(out_dim, 1)

    def forward(self, x: Tensor, graph: TypedGraph) -> Tensor:
        width = self.weight_low.shape[1]
        low = F.relu(graph.low_pass(x @ self.weight_low))
        projected = x @ self.weight_high
        high = F.relu(projected - graph.low_pass(projected))
        mlp = F.relu(x @ self.weight_mlp)
        (low_homo, high_homo), (low_hetero, high_hetero), (low_unknown, high_unknown) = (
            s.split(width, dim=1) for s in graph.typed_sums(torch.cat([low, high], dim=1)))
        gate_low, gate_high = torch.sigmoid(self.gate(low_unknown)), torch.sigmoid(self.gate(high_unknown))
        scores = torch.cat([
            low_hetero @ self.att_hetero_low, high_hetero @ self.att_hetero_high,
            low_homo @ self.att_homo_low, high_homo @ self.att_homo_high,
            gate_low * (low_unknown @ self.att_hetero_low) + (1 - gate_low) * (low_unknown @ self.att_homo_low),
            gate_high * (high_unknown @ self.att_hetero_high) + (1 - gate_high) * (high_unknown @ self.att_homo_high),
            mlp @ self.att_mlp], dim=1)
        attention = torch.softmax(torch.sigmoid(scores) @ self.mixer / CHANNELS, dim=1)
        channels = torch.stack([low_hetero, high_hetero, low_homo, high_homo, low_unknown, high_unknown, mlp], dim=1)
        return CHANNELS * (attention.unsqueeze(2) * channels).sum(dim=1)


@MODELS.register("acm_gcn")
class ACMGCN(GraphModel):
    """ACM layers with edge-typed channels; ReLU and dropout between layers, the last one classifies."""

    tasks = ("node-classification",)

    def __init__(self, in_dim: int, num_classes: int, hidden: int = 128, num_layers: int = 2,
                 dropout: float = 0.5, typed_aggregation: Literal["sum", "normalised"] = "sum") -> None:
        super().__init__()
        self.normalised = typed_aggregation == "normalised"
        dims = layer_dims(in_dim, num_classes, hidden, num_layers)
        self.representation_dim = dims[-1][0]
        self.layers = nn.ModuleList(ACMLayer(a, b) for a, b in dims)
        self.dropout = dropout
        self._types: tuple[Tensor, Tensor] | None = None
        self._graph = GraphCache()

    def set_edge_types(self, edge_index: Tensor, types: Tensor) -> None:
        """Gives the edges of this ``edge_index`` tensor their types (``label_edge_types``)."""
        self._types = (edge_index, types)
        self._graph.clear()

    def typed_graph(self, edge_index: Tensor, num_nodes: int) -> TypedGraph:
        """The propagation of ``edge_index``, cached for that tensor (:class:`GraphCache`); its edges
        are typed only if :meth:`set_edge_types` named it."""
        def build() -> TypedGraph:
            typed = self._types is not None and self._types[0] is edge_index
            return TypedGraph(edge_index, self._types[1] if typed else torch.full_like(edge_index[0], UNKNOWN),
                              num_nodes, self.normalised)
        return self._graph.get(edge_index, num_nodes, build)

    def encode(self, x: Tensor, edge_index: Tensor) -> Tensor:
        graph = self.typed_graph(edge_index, x.shape[0])
        x = dropout_features(x, self.dropout, self.training)     # a sparse x stays sparse (multi-hot features)
        for layer in self.layers[:-1]:
            x = F.dropout(F.relu(layer(x, graph)), self.dropout, self.training)
        return x

    def classify(self, h: Tensor, edge_index: Tensor) -> Tensor:
        return self.layers[-1](h, self.typed_graph(edge_index, h.shape[0]))
