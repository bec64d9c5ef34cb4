"""FedGTA (Li et al., "FedGTA: Topology-aware Averaging for Federated Graph Learning", VLDB 2024).

After local training, client ``k`` smooths its model's predictions over its subgraph by
non-parametric label propagation (the authors' ``NonParaLP``): ``Y0`` holds the one-hot labels of
the training nodes and the model's softmax on every other node, and ``prop_steps`` times

    Y <- lp_alpha * A_hat Y + (1 - lp_alpha) * Y0,   then  Y[train] += Y0[train]

with ``A_hat = D^-1/2 (A + I) D^-1/2``. From ``Y`` it uploads two statistics of fixed size:

* ``moments [M, C]``: the moments over nodes of ``P = softmax(Y)`` (training rows one-hot), per
  class and order ``q = 1..num_moments``: raw ``E[p^q]``, central ``E[(p - E p)^q]``, or both
  stacked (``hybrid``, the paper's mixed moments and the default);
* ``confidence [1]``: the local smoothing confidence ``sum_v d_v (C/e - H(Q_v))`` with
  ``Q = softmax(Y / temperature)`` (training rows one-hot), ``d_v`` the node's degree and ``H`` the
  entropy (``C/e`` bounds it, so the confidence is never negative).

The server gives every client ``i`` of the round its own model (key ``client-i``): the models of the
clients ``j`` whose moments are similar to ``i``'s, ``cos(m_i, m_j) > accept_alpha`` (``i`` itself
always), averaged with weights proportional to their confidence. A client that sits a round out
keeps its last model; before its first round it takes the global one.

With another aggregator (``--aggregator fedia``) each client's average goes through it: the
accepted models enter as updates from the client's own model, ``(W_i - W_j) / lr``, with the
confidences as their weights (the ``mean`` aggregator then gives the average above exactly; FedIA
replaces the confidences by its own weights and masks the step; its per-client weight record is
that of the last personalised group the client joined).

Taken from the authors' code (``xkLi-Allen/FedGTA``) where the paper leaves it open: the recurrence
above (the training rows get ``Y0`` added after each step), 5 steps, ``lp_alpha`` 0.5 and temperature
20. The moment defaults (10 hybrid moments, ``accept_alpha`` 0.5) are OpenFGL's: the authors' code
defaults to 13 raw moments and 0.65 and tunes them per dataset (Cora hybrid/6/0.5, CiteSeer
hybrid/20/0.6, PubMed raw/13/0.65). The authors' nodes outside every split keep their true
one-hot label in ``Y0``, here they get the model's prediction like any unlabelled node. OpenFGL's port propagates only the training nodes'
predictions, without self-loops. The authors pair FedGTA with a GAMLP backbone; here it runs on
any node-classification backbone. ``weights: samples`` (training-node counts instead of
confidences) is an ablation: with ``accept_alpha < 0`` every client accepts every other and the
round is FedAvg.
"""

from __future__ import annotations

import math
from typing import Literal, Sequence

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import degree

from fgl_ray.algorithms.base import ALGORITHMS, Algorithm, ClientContext
from fgl_ray.messages import ClientUpdate, personal_key


def propagate_labels(edge_index: Tensor, seeds: Tensor, train_mask: Tensor, steps: int, alpha: float) -> Tensor:
    """The authors' label propagation of ``seeds`` (``Y0``, ``[N, C]``) over the graph."""
    (source, target), weight = gcn_norm(edge_index, None, seeds.shape[0], add_self_loops=True)
    weight = weight.to(seeds.dtype).unsqueeze(1)
    y = seeds
    for _ in range(steps):
        spread = torch.zeros_like(y).index_add_(0, target, weight * y[source])
        y = alpha * spread + (1 - alpha) * seeds
        y = torch.where(train_mask.unsqueeze(1), y + seeds, y)
    return y


def moments(p: Tensor, count: int, kind: str) -> Tensor:
    """Per-column moments of ``p`` over its rows, orders ``1..count``: raw, central or both (hybrid)."""
    orders = torch.arange(1, count + 1, dtype=p.dtype, device=p.device).view(-1, 1, 1)
    raw = p.unsqueeze(0).pow(orders).mean(dim=1)
    central = (p - p.mean(dim=0)).unsqueeze(0).pow(orders).mean(dim=1)
    return {"raw": raw, "central": central, "hybrid": torch.cat([raw, central])}[kind]


def smoothing_confidence(q: Tensor, node_degree: Tensor) -> Tensor:
    """``sum_v d_v (C/e - H(q_v))``: high where the smoothed predictions are sharp on busy nodes."""
    entropy = -(q * torch.log(q + 1e-8)).sum(dim=1)
    return (node_degree * (q.shape[1] / math.e - entropy)).sum().reshape(1)


def accepted(similarity: Tensor, threshold: float) -> list[list[int]]:
    """Row ``i``: the positions ``j`` with ``similarity[i, j] > threshold``, ``i`` always included."""
    return [sorted(set((row > threshold).nonzero().flatten().tolist()) | {i}) for i, row in enumerate(similarity)]


@ALGORITHMS.register("fedgta")
class FedGTA(Algorithm):
    """Personalised, topology-aware averaging from label-propagation statistics."""

    tasks = ("node-classification",)
    whole_graph = "computes its topology-aware soft labels and moments over the client's whole graph"

    class Options(Algorithm.Options):
        prop_steps: int = Field(5, ge=1, description="label-propagation steps")
        lp_alpha: float = Field(0.5, ge=0.0, le=1.0, description="weight of the propagated labels in each step")
        temperature: float = Field(20.0, gt=0.0, description="softmax temperature of the confidence's predictions")
        num_moments: int = Field(10, ge=1, description="moment orders per class")
        moment_type: Literal["hybrid", "raw", "central"] = Field(
            "hybrid", description="hybrid: raw and central moments (the paper's mixed moments)")
        accept_alpha: float = Field(0.5, ge=-1.0, le=1.0,
                                    description="aggregate the clients whose moments have cosine similarity above this")
        weights: Literal["confidence", "samples"] = Field(
            "confidence", description="weight of an accepted model: smoothing confidence (the paper), or training "
                                      "nodes (ablation)")

    # ------------------------------------------------------------------ client side
    def moment_rows(self) -> int:
        return self.options.num_moments * (2 if self.options.moment_type == "hybrid" else 1)

    def declared_stats(self, num_classes: int, hidden: int, num_features: int) -> dict[str, tuple[int, ...]]:
        return {"moments": (self.moment_rows(), num_classes), "confidence": (1,)}

    @torch.no_grad()
    def upload(self, ctx: ClientContext) -> dict[str, Tensor]:
        """The moments and the smoothing confidence of the client's propagated predictions."""
        data, options = ctx.data, self.options
        edge_index = ctx.task.node_inputs(data)[1]
        train, y = ctx.task.labelled(data)
        labels = F.one_hot(y[train], ctx.num_classes).to(torch.float32)
        seeds = torch.softmax(self.predict(ctx, data).float(), dim=1)
        seeds[train] = labels
        smoothed = propagate_labels(edge_index, seeds, train, options.prop_steps, options.lp_alpha)
        p, q = torch.softmax(smoothed, dim=1), torch.softmax(smoothed / options.temperature, dim=1)
        p[train], q[train] = labels, labels
        node_degree = degree(edge_index[0], seeds.shape[0], dtype=q.dtype)
        return {"moments": moments(p, options.num_moments, options.moment_type),
                "confidence": smoothing_confidence(q, node_degree)}

    # ------------------------------------------------------------------ server side
    def aggregate(self, server, updates: Sequence[ClientUpdate]) -> None:
        """Each participant's model: the weighted average of the models its moments accept."""
        if not updates:
            return
        lr = self.config.lr
        trained = torch.stack([server.models[u.model_key].params - lr * u.update for u in updates])
        vectors = torch.stack([u.stats["moments"].flatten().double() for u in updates])
        similarity = F.cosine_similarity(vectors.unsqueeze(1), vectors.unsqueeze(0), dim=2)
        weights = torch.tensor([float(u.stats["confidence"]) if self.options.weights == "confidence"
                                else float(u.num_samples) for u in updates], dtype=torch.float64)
        for i, members in enumerate(accepted(similarity, self.options.accept_alpha)):
            client = updates[i].client_id
            key = personal_key(client)
            current = server.models[updates[i].model_key]
            server.models.setdefault(key, current)
            group = [ClientUpdate(updates[j].client_id, key, updates[j].num_samples,
                                  ((current.params - trained[j]) / lr).to(current.params.dtype), updates[j].buffers)
                     for j in members]
            server.models[key] = server.combine(key, current, group, weights[members])
            server.assignment[client] = key
