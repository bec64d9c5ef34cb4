"""The FedMGS multimodal network (``mm_gnn``), also the "-MM" backbone of its baselines.

Input: packed node features ``[visual | text | a_visual | a_text]`` (:mod:`fgl_ray.data.multimodal`)
with the block widths ``modality_dims`` (the data sets them). Modules (width ``d = hidden``):
modality encoders ``e_m`` (Linear, ReLU, Linear), ``num_layers`` GCN layers each followed by
LayerNorm (ReLU and dropout between layers), synthesis networks ``psi_syn^m`` over ``4d`` inputs,
confidence networks ``psi_conf^m`` over ``2d``, learnable ``beta_m``, the fusion ``phi_fuse``
(``2d -> d``) and the modality heads ``phi_m``; task heads ``g_cls`` (classes) and ``g_link``
(an MLP on ``r_i * r_j``).

:meth:`forward_parts` is FedMGS's pipeline (Eqs. 2-9), with its switches; :meth:`encode`, the
path every other algorithm trains, is the plain backbone: missing blocks enter their encoder
as placeholders (``fill: zero``, or ``mean``: the mean of the batch's observed rows of that
modality; ``fill_values``, when an algorithm sets them, take precedence), ``s`` is the mean of
both modality latents, and every modality passes through to the readout. ``encode`` returns
``[r | e_visual | e_text]`` (``3d`` wide); ``classify`` reads ``r``, :meth:`score_links` scores
node pairs and :meth:`modality_views` splits off ``e_visual, e_text``.

Readout (``readout_context``): Eq. 8 keeps an observed modality's *pre-GNN* latent, so with
``none`` (the paper's equations, default) graph context reaches the readout only through the
synthesis of missing modalities; ``graph`` also feeds ``h^g`` to ``phi_fuse`` (``3d -> d``), for
every algorithm alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GCNConv

from fgl_ray.data.multimodal import unpack
from fgl_ray.models.base import MODELS, GCNNormalisation, GraphModel

MULTIMODAL_TASKS = ("node-classification", "link-prediction", "modality-matching", "modality-retrieval")


def mlp(inputs: int, hidden: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, outputs))


@dataclass
class Prototypes:
    """The server's class-modality banks as a client sees them (no gradient flows into them).

    Attributes:
        banks: ``[2, C, d]`` prototypes per modality (visual, text).
        valid: ``[2, C]`` which entries some client observed.
        spread: ``[2]`` the inter-class spread ``Delta_m`` (Eq. 6).
    """

    banks: Tensor
    valid: Tensor
    spread: Tensor

    def class_means(self) -> tuple[Tensor, Tensor]:
        """``p_c`` averaged over the modalities whose entry is valid (A8), and which classes have one."""
        weights = self.valid.float().unsqueeze(-1)
        total = weights.sum(0)
        return (weights * self.banks).sum(0) / total.clamp(min=1.0), total.squeeze(-1) > 0


@MODELS.register("mm_gnn")
class MultimodalGNN(GraphModel):
    """Availability-aware encoding, prototype-guided synthesis and reliability fusion (FedMGS)."""

    tasks = MULTIMODAL_TASKS
    accepts_sparse_features = False

    def __init__(self, in_dim: int, num_classes: int, hidden: int = 128, num_layers: int = 2, dropout: float = 0.0,
                 modality_dims: Optional[tuple[int, int]] = None, fill: Literal["zero", "mean"] = "zero",
                 readout_context: Literal["none", "graph"] = "none") -> None:
        super().__init__()
        if modality_dims is None:
            raise ValueError("mm_gnn needs modality_dims (the visual and text widths); a multimodal dataset sets them")
        visual, text = (int(d) for d in modality_dims)
        if visual + text + 2 != in_dim:
            raise ValueError(f"mm_gnn: modality_dims {modality_dims} + 2 availability bits != {in_dim} input columns")
        if fill not in ("zero", "mean") or readout_context not in ("none", "graph"):
            raise ValueError(f"mm_gnn: fill must be zero|mean and readout_context none|graph, got {fill!r}, "
                             f"{readout_context!r}")
        d = hidden
        self.modality_dims = (visual, text)
        self.encoders = nn.ModuleList([mlp(visual, d, d), mlp(text, d, d)])
        self.convs = nn.ModuleList(GCNConv(d, d, normalize=False) for _ in range(num_layers))
        self.normalised = GCNNormalisation()
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(num_layers))
        self.synthesizers = nn.ModuleList([mlp(4 * d, d, d), mlp(4 * d, d, d)])
        self.confidence = nn.ModuleList([mlp(2 * d, d, 1), mlp(2 * d, d, 1)])
        self.beta = nn.Parameter(torch.ones(2))
        self.fuse = mlp((3 if readout_context == "graph" else 2) * d, d, d)
        self.heads = nn.ModuleList([mlp(d, d, d), mlp(d, d, d)])
        self.classifier = nn.Linear(d, num_classes)
        self.link = mlp(d, d, 1)
        self.dropout, self.fill, self.readout_context = dropout, fill, readout_context
        self.hidden = d
        self.representation_dim = 3 * d
        #: ``[d_visual + d_text]`` values for missing blocks, set by an algorithm that shares them (``fedavg_fill``)
        self.fill_values: Tensor | None = None

    # ------------------------------------------------------------------ the pieces
    def split(self, x: Tensor) -> tuple[list[Tensor], Tensor]:
        """``([visual, text], available [n, 2])`` of packed features."""
        visual, text, available = unpack(x, self.modality_dims)
        return [visual, text], available

    def propagate(self, s: Tensor, edge_index: Tensor) -> Tensor:
        """``h^g``: the GCN stack with LayerNorm over ``s`` (Eq. 2)."""
        h = s
        index_weight = self.normalised(edge_index, s.shape[0], s.dtype)
        for index, (conv, norm) in enumerate(zip(self.convs, self.norms)):
            h = norm(conv(h, *index_weight))
            if index < len(self.convs) - 1:
                h = F.dropout(F.relu(h), self.dropout, self.training)
        return h

    def readout(self, f: list[Tensor], h: Tensor) -> Tensor:
        """``[r | e_visual | e_text]`` from the fused modality latents (Eq. 9)."""
        parts = [*f, h] if self.readout_context == "graph" else f
        r = self.fuse(torch.cat(parts, dim=-1))
        return torch.cat([r, self.heads[0](f[0]), self.heads[1](f[1])], dim=-1)

    # ------------------------------------------------------------------ the plain backbone
    def encode(self, x: Tensor, edge_index: Tensor) -> Tensor:
        """The "-MM" backbone: placeholders encoded as inputs, every modality passed through."""
        views, available = self.split(x)
        if self.fill_values is not None:
            blocks = self.fill_values.split(self.modality_dims)
            views = [torch.where(available[:, m:m + 1], view, blocks[m]) for m, view in enumerate(views)]
        elif self.fill == "mean":
            views = [mean_filled(view, available[:, m]) for m, view in enumerate(views)]
        latents = [encoder(view) for encoder, view in zip(self.encoders, views)]
        h = self.propagate((latents[0] + latents[1]) / 2, edge_index)
        return self.readout(latents, h)

    def classify(self, h: Tensor, edge_index: Tensor | None = None) -> Tensor:
        return self.classifier(h[:, :self.hidden])

    def score_links(self, z: Tensor, pairs: Tensor) -> Tensor:
        """Logits of the node pairs ``pairs [2, m]`` from the readouts ``r``."""
        r = z[:, :self.hidden]
        return self.link(r[pairs[0]] * r[pairs[1]]).squeeze(-1)

    def modality_views(self, z: Tensor) -> tuple[Tensor, Tensor]:
        """``(e_visual, e_text)`` of :meth:`encode`'s output."""
        d = self.hidden
        return z[:, d:2 * d], z[:, 2 * d:]

    # ------------------------------------------------------------------ FedMGS (Eqs. 2-9)
    def forward_parts(self, x: Tensor, edge_index: Tensor, prototypes: Prototypes | None = None,
                      query_labels: Tensor | None = None, gate: bool = True, synthesis: bool = True,
                      fusion: bool = True, temperature: float | None = None,
                      class_estimate: Tensor | None = None, positive_beta: bool = False) -> dict[str, Tensor]:
        """FedMGS's forward pass.

        Args:
            x, edge_index: packed features and the client's (message-passing) edges.
            prototypes: the broadcast banks; ``None`` (round 0, or synthesis ablated) gives ``pi = 0``.
            query_labels: ``[n]`` class of the nodes whose query is their one-hot label (-1: predict it).
            gate: availability-aware encoding (Eq. 2); off: placeholders are encoded as inputs.
            synthesis: prototype-guided synthesis (Eq. 4's ``pi`` and the spread of Eq. 7).
            fusion: reliability-calibrated fusion (Eqs. 5-7); off: a missing modality takes ``z_hat``.
            temperature: of the prototype similarity; default ``sqrt(d)`` (the paper).
            class_estimate: ``[n, C]`` class distributions, the query of the nodes without a label
                query; default: the softmax of prototype similarities.
            positive_beta: Eq. 7's ``beta_m`` through :meth:`reliability_scale`'s softplus, so that a
                larger spread can only lower the confidence; off: ``beta_m`` as learned (any sign).

        Returns:
            ``z [n, 2, d]`` (gated latents), ``s``, ``h``, ``pi``, ``z_hat [n, 2, d]``, ``eta [n, 2]``,
            ``available [n, 2]``, ``f [n, 2, d]`` and ``readout`` (``[r | e_v | e_t]``).
        """
        views, available = self.split(x)
        mask = available.float()
        raw = torch.stack([encoder(view) for encoder, view in zip(self.encoders, views)], dim=1)   # e_m(x^m)
        z = raw * mask.unsqueeze(-1) if gate else raw
        counts = mask.sum(1, keepdim=True) if gate else torch.full_like(mask[:, :1], 2.0)
        s = z.sum(1) / (counts + 1e-8)
        h = self.propagate(s, edge_index)
        use_prototypes = synthesis and prototypes is not None and bool(prototypes.valid.any())
        pi = (self.queries(s, prototypes, query_labels, temperature, class_estimate) if use_prototypes
              else torch.zeros_like(z))
        z_hat = self.synthesize(z, h, pi)
        eta = torch.stack([torch.sigmoid(self.confidence[m](torch.cat([z_hat[:, m], h], dim=-1))).squeeze(-1)
                           for m in range(2)], dim=1)
        if not fusion:
            calibrated = torch.ones_like(eta)
        elif synthesis:                   # Eq. 7; before any bank the spread is 0 and the factor 1/2
            spread = prototypes.spread.to(eta.dtype) if use_prototypes else torch.zeros_like(self.beta)
            calibrated = eta * torch.sigmoid(-self.reliability_scale(positive_beta) * spread)
        else:                             # w/o prototype-guided synthesis: no spread, eta alone
            calibrated = eta
        filled = calibrated.unsqueeze(-1) * z_hat + (1 - calibrated.unsqueeze(-1)) * h.unsqueeze(1)
        f = torch.where(available.unsqueeze(-1), z, filled)
        return {"z": z, "raw": raw, "s": s, "h": h, "pi": pi, "z_hat": z_hat, "eta": calibrated, "available": available,
                "f": f, "readout": self.readout([f[:, 0], f[:, 1]], h)}

    def reliability_scale(self, positive: bool = False) -> Tensor:
        """``beta_m`` of Eq. 7: the parameter itself, or with ``positive`` ``softplus(beta - 1 + log(e - 1))``,
        positive and equal to the parameter's initial 1 at initialisation."""
        if not positive:
            return self.beta
        return F.softplus(self.beta - 1.0 + math.log(math.e - 1.0))

    def synthesize(self, z: Tensor, h: Tensor, pi: Tensor) -> Tensor:
        """``z_hat^m = psi_syn^m([z^{m'} | h | pi^m | 0])`` for both modalities (Eq. 4), ``[n, 2, d]``."""
        zeros = torch.zeros_like(h)
        return torch.stack([self.synthesizers[m](torch.cat([z[:, 1 - m], h, pi[:, m], zeros], dim=-1))
                            for m in range(2)], dim=1)

    def queries(self, s: Tensor, prototypes: Prototypes, labels: Tensor | None,
                temperature: float | None, estimate: Tensor | None = None) -> Tensor:
        """``pi^m = q^T P^m`` per modality (Eq. 4), ``[n, 2, d]``: ``q`` one-hot for labelled nodes,
        else ``estimate`` or the softmax of prototype similarities (stop-gradient), renormalised over
        each modality's valid classes."""
        with torch.no_grad():
            if estimate is None:
                means, present = prototypes.class_means()
                q = torch.softmax(prototype_logits(s, means, present, temperature or math.sqrt(self.hidden)), dim=-1)
            else:
                q = estimate.detach().to(s.dtype).clone()
            if labels is not None:
                known = labels >= 0
                q[known] = F.one_hot(labels[known], q.shape[1]).to(q.dtype)
        banks = []
        for m in range(2):
            weights = q * prototypes.valid[m].to(q.dtype)
            weights = weights / weights.sum(1, keepdim=True).clamp(min=1e-12)
            banks.append(weights @ prototypes.banks[m].to(q.dtype))
        return torch.stack(banks, dim=1)


def prototype_logits(s: Tensor, means: Tensor, present: Tensor, temperature: float) -> Tensor:
    """``cos(s_i, p_c) / temperature`` with classes without a prototype at ``-inf`` (Eq. 10)."""
    logits = F.normalize(s, dim=-1) @ F.normalize(means.to(s.dtype), dim=-1).T / temperature
    return logits.masked_fill(~present, float("-inf"))


def mean_filled(view: Tensor, observed: Tensor) -> Tensor:
    """``view`` with unobserved rows replaced by the mean of the observed ones (zeros if none)."""
    if not bool(observed.any()) or bool(observed.all()):
        return view
    mean = view[observed].mean(dim=0, keepdim=True)
    return torch.where(observed.unsqueeze(-1), view, mean.expand_as(view))
