"""AdaFGL (Li et al., "AdaFGL: A New Paradigm for Federated Node Classification with Topology
Heterogeneity", ICDE 2024).

Stage 1, rounds ``0 .. federated_rounds - 1``: FedAvg of the run's backbone (any aggregator). Its
final aggregate is the federated knowledge extractor. Stage 2, every later round: nothing is
exchanged; each client trains its own adaptive-propagation model for ``local_epochs`` steps a
round (Adam, ``stage2_lr``, ``stage2_weight_decay``) and predicts with it. From the extractor's
soft predictions ``P`` on the client's graph:

* the homophily confidence score (HCS): label propagation on the local graph (10 steps,
  ``alpha`` 0.5, labels re-added after each step) from half the training labels, scored on the
  other half;
* the knowledge graph ``B = 1[cos(softmax P_i, softmax P_j) > 0.999]`` and the smoothed features
  ``X_s = [X, A_m X, A_m^2 X, A_m^3 X]`` with ``A_m`` the normalised ``mix * A + (1 - mix) * B``;
* a homophilous module, a 2-layer MLP on ``X_s`` trained on ``CE + MSE(Z, P)``, predicting
  ``(softmax Z + softmax P) / 2``;
* a heterophilous module of three 3-layer MLPs (on ``X``, on ``X_s``, and one whose output ``Z``
  passes through learnable message passing over ``R = beta * B + (1 - beta) * cos(softmax Z)``,
  rescaled about its mean and split into PReLU positive and negative parts:
  ``(softmax(pos Z) - softmax(neg Z) + Z) / 2``), trained on the sum of their cross-entropies and
  predicting the mean of their softmaxes.

``combine: soft`` (default; the paper's HCS-guided fusion, as OpenFGL runs it) trains both modules on
the sum of their losses and predicts ``HCS * homophilous + (1 - HCS) * heterophilous``; ``switch``
(the authors' code) trains and uses only the homophilous module when HCS >= 0.9, else only the
heterophilous one. The formulas above follow the authors' code (``xkLi-Allen/AdaFGL``) where the
paper could not be read here, with its quirks kept: softmax applied to the probabilities ``P``
again, the MSE between logits and probabilities, the rescaling's negative branch ``-R / mean``,
the PReLU slope shared by an MLP and its message passing. Departures: the extractor is the final
aggregate (the paper's; the authors' code takes the best-validation round, which would need
validation scores at the server); stage 2 runs as rounds, so its epochs count in the run's time
and its model is evaluated like any other. The stage lengths are the run's: by default half its
rounds federated and ``local_epochs`` stage-2 steps in each later round (the authors run 100
rounds of 3 epochs, then 200 stage-2 epochs: ``rounds: 167, local_epochs: 3, federated_rounds:
100`` comes closest; OpenFGL federates 50 rounds of one step). So are the backbone and optimiser
(theirs: ChebNet, hidden 64, Adam at 0.01). FedAvg weights clients by training nodes (theirs by
all nodes). The stage-2 matrices are dense in a client's nodes.
"""

from __future__ import annotations

import math
from typing import Literal, Sequence

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from fgl_ray.algorithms.base import ALGORITHMS, NODE_BACKBONES, Algorithm, ClientContext
from fgl_ray.algorithms.fedgta import propagate_labels
from fgl_ray.algorithms.fggp import symmetric_normalised
from fgl_ray.messages import Broadcast, ClientUpdate

SIMILAR = 0.999          # the knowledge graph's threshold on prediction similarity (the authors')
HCS_SWITCH = 0.9         # ``combine: switch``: the homophilous module from this HCS on (the authors')
LP_STEPS, LP_ALPHA = 10, 0.5
PROP_STEPS = 3
HIDDEN = 64


def softmax_cosine(e: Tensor) -> Tensor:
    """Cosine similarity of the rows of ``softmax(e)``, zero diagonal (the authors' ``getre_scale``)."""
    s = torch.softmax(e, dim=1)
    gram = s @ s.T
    scale = gram.diagonal().clamp_min(1e-9).sqrt()
    return (gram / scale.unsqueeze(1) / scale.unsqueeze(0)).fill_diagonal_(0.0)


def homophily_confidence(edge_index: Tensor, y: Tensor, train: Tensor, num_classes: int) -> float:
    """HCS: accuracy on a random half of the training nodes of labels propagated from the other half."""
    nodes = train.nonzero().flatten()
    nodes = nodes[torch.randperm(nodes.numel(), device=nodes.device)]
    known, held = nodes[: nodes.numel() // 2], nodes[nodes.numel() // 2:]
    if held.numel() == 0:
        return 1.0
    mask = torch.zeros_like(train)
    mask[known] = True
    seeds = torch.full((y.shape[0], num_classes), 1.0 / num_classes, device=y.device)
    seeds[known] = F.one_hot(y[known], num_classes).float()
    spread = propagate_labels(edge_index, seeds, mask, LP_STEPS, LP_ALPHA)
    return float((spread[held].argmax(1) == y[held]).float().mean())


def mlp(sizes: Sequence[int], activation: nn.PReLU, dropout: float) -> nn.Module:
    """Linear layers of ``sizes`` with the shared ``activation`` and dropout between them."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        linear = nn.Linear(a, b)
        nn.init.xavier_uniform_(linear.weight, gain=math.sqrt(2))
        nn.init.zeros_(linear.bias)
        layers.append(linear)
        if i < len(sizes) - 2:
            layers += [activation, nn.Dropout(dropout)]
    return nn.Sequential(*layers)


def rescaled(r: Tensor) -> Tensor:
    """The authors' rescaling of ``R`` about its mean, plus the identity."""
    mean, top = r.mean(), r.max()
    above = (r - mean) / (top - mean).clamp_min(1e-12)
    return torch.where(r > mean, above, -r / mean.clamp_min(1e-12)) + torch.eye(r.shape[0], device=r.device)


class AdaptivePropagation(nn.Module):
    """Stage 2's homophilous and heterophilous modules; ``forward`` gives each one's (loss, probabilities)."""

    def __init__(self, features: int, num_classes: int, beta: float, dropout: float = 0.5) -> None:
        super().__init__()
        smooth = features * (PROP_STEPS + 1)
        self.homo_act, self.hete_act, self.passing_act = nn.PReLU(), nn.PReLU(), nn.PReLU()
        self.homo = mlp([smooth, HIDDEN, num_classes], self.homo_act, dropout)
        self.local = mlp([features, HIDDEN, HIDDEN, num_classes], self.hete_act, dropout)
        self.smooth = mlp([smooth, HIDDEN, HIDDEN, num_classes], self.hete_act, dropout)
        self.passing = mlp([smooth, HIDDEN, HIDDEN, num_classes], self.passing_act, dropout)
        self.beta = beta

    def homophilous(self, xs: Tensor, p: Tensor, train: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        z = self.homo(xs)
        loss = F.cross_entropy(z[train], y[train]) + F.mse_loss(z, p)
        return loss, (torch.softmax(z, 1) + torch.softmax(p, 1)) / 2

    def heterophilous(self, x: Tensor, xs: Tensor, b: Tensor, train: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        z_local, z_smooth, z = self.local(x), self.smooth(xs), self.passing(xs)
        r = rescaled(self.beta * b + (1 - self.beta) * softmax_cosine(z))
        positive, negative = self.passing_act(r), self.passing_act(-r)
        z_passed = (torch.softmax(positive @ z, 1) - torch.softmax(negative @ z, 1) + z) / 2
        heads = (z_local, z_smooth, z_passed)
        loss = sum(F.cross_entropy(h[train], y[train]) for h in heads)
        return loss, sum(torch.softmax(h, 1) for h in heads) / 3


@ALGORITHMS.register("adafgl")
class AdaFGL(Algorithm):
    """FedAvg, then each client's own knowledge-guided adaptive propagation."""

    tasks = ("node-classification",)
    whole_graph = "propagates over the client's whole graph in its personalised step"
    models = NODE_BACKBONES

    class Options(Algorithm.Options):
        federated_rounds: int | None = Field(None, ge=1, description="stage-1 rounds (default: half the run's)")
        mix: float = Field(0.05, ge=0.0, le=1.0, description="weight of the local graph against the knowledge graph")
        beta: float = Field(0.2, ge=0.0, le=1.0, description="weight of the knowledge graph in the message passing")
        combine: Literal["soft", "switch"] = Field("soft", description="soft: HCS-weighted fusion of both modules; "
                                                                       "switch: one module by HCS >= 0.9 (the code)")
        stage2_lr: float = Field(1e-2, gt=0.0, description="Adam learning rate of stage 2")
        stage2_weight_decay: float = Field(5e-4, ge=0.0, description="Adam weight decay of stage 2")

    def stage1_rounds(self) -> int:
        return self.options.federated_rounds or max(1, self.config.rounds // 2)

    # ------------------------------------------------------------------ client side
    def receive(self, ctx: ClientContext, broadcast: Broadcast) -> None:
        super().receive(ctx, broadcast)
        ctx.state["adafgl_round"] = broadcast.round

    def local_train(self, ctx: ClientContext) -> dict[str, float]:
        """Stage 1: the base loop; stage 2: this client's own module, ``local_epochs`` steps."""
        if ctx.state["adafgl_round"] < self.stage1_rounds():
            return super().local_train(ctx)
        stage = ctx.state.get("adafgl") or self.start_stage2(ctx)
        module, optimizer = stage["module"], stage["optimizer"]
        module.train()
        loss = torch.zeros(())
        for _ in range(self.config.local_epochs):
            optimizer.zero_grad(set_to_none=True)
            loss, _ = self.stage2_forward(ctx, stage)
            loss.backward()
            optimizer.step()
        return {"loss": float(loss.detach()), "hcs": stage["hcs"]}

    @torch.no_grad()
    def start_stage2(self, ctx: ClientContext) -> dict:
        """The extractor's knowledge on this client: ``P``, HCS, ``B``, ``X_s``; a fresh module."""
        data, task = ctx.data, ctx.task
        x, edge_index = task.node_inputs(data)
        x = x.to_dense() if x.layout != torch.strided else x
        train, y = task.labelled(data)
        p = torch.softmax(super().predict(ctx, data).float(), dim=1)
        n = x.shape[0]
        adjacency = torch.zeros(n, n, device=x.device)
        adjacency[edge_index[0], edge_index[1]] = 1.0
        b = (softmax_cosine(p) > SIMILAR).float()
        mixed = symmetric_normalised(self.options.mix * adjacency + (1 - self.options.mix) * b
                                     + torch.eye(n, device=x.device))
        hops = [x]
        for _ in range(PROP_STEPS):
            hops.append(mixed @ hops[-1])
        module = AdaptivePropagation(x.shape[1], ctx.num_classes, self.options.beta).to(x.device)
        optimizer = torch.optim.Adam(module.parameters(), lr=self.options.stage2_lr,
                                     weight_decay=self.options.stage2_weight_decay)
        stage = {"module": module, "optimizer": optimizer, "p": p, "b": b, "x": x, "xs": torch.cat(hops, dim=1),
                 "hcs": homophily_confidence(edge_index, y, train, ctx.num_classes)}
        ctx.state["adafgl"] = stage
        return stage

    def stage2_forward(self, ctx: ClientContext, stage: dict) -> tuple[Tensor, Tensor]:
        """``(loss, probabilities)`` of the client's module under ``combine``."""
        module, hcs = stage["module"], stage["hcs"]
        train, y = ctx.task.labelled(ctx.data)
        use_homo = self.options.combine == "soft" or hcs >= HCS_SWITCH
        use_hete = self.options.combine == "soft" or hcs < HCS_SWITCH
        parts = []
        if use_homo:
            parts.append((hcs if use_hete else 1.0, *module.homophilous(stage["xs"], stage["p"], train, y)))
        if use_hete:
            parts.append((1 - hcs if use_homo else 1.0,
                          *module.heterophilous(stage["x"], stage["xs"], stage["b"], train, y)))
        return sum(loss for _, loss, _ in parts), sum(weight * probs for weight, _, probs in parts)

    @torch.no_grad()
    def predict(self, ctx: ClientContext, batch) -> Tensor:
        """Stage 1: the backbone; stage 2: the log of the client's module's probabilities."""
        stage = ctx.state.get("adafgl")
        if stage is None:
            return super().predict(ctx, batch)
        stage["module"].eval()
        return self.stage2_forward(ctx, stage)[1].clamp_min(1e-12).log()

    # ------------------------------------------------------------------ server side
    def aggregate(self, server, updates: Sequence[ClientUpdate]) -> None:
        """FedAvg in stage 1; the extractor stays as it is in stage 2."""
        if server.round_index < self.stage1_rounds():
            server.aggregate_with_aggregator(updates)
