"""FedEPD (Yuan et al., "Towards Federated Long-Tailed Graph Learning: An Energy-Guided Dual
Decoupling Approach"): long-tailed federated node classification.

Client ``k`` (Algorithm 2), with the pure tensor pieces in :mod:`fgl_ray.algorithms.fedepd_graph`:

* **Once** (``setup_client``, i.e. before the first round, cached): the purified graph ``A'``
  (Eqs. 1–5) from the raw features; the elite training nodes of every class by fixed-step PPR
  on the ORIGINAL graph (Eq. 6, ``alpha = ppr_alpha``, ``L = ppr_steps``, ``m = max(1, floor(rho
  N_c))``); the class homophily gate ``q`` on ``A'`` (Eqs. 13–14) and the margins ``Delta``
  (Eq. 15) from the local training counts.
* **Every round**, for each of the ``local_epochs`` (``schedule="alternate"``, Algorithm 2's
  lines 9–16 repeated): stage 1, one step of cross-entropy on the whole model over ``A'``
  (Eq. 9); stage 2 once prototypes exist, one step on the classifier only with the encoder
  frozen (its output is computed without gradient): ``h' = (1 - gamma) Â'h + gamma p_y + (h -
  Â'h)`` on training nodes whose class has a global prototype (Eqs. 10–12), then the
  cross-entropy of the adjusted logits (Eqs. 15–16). ``schedule="sequential"`` runs all stage-1
  steps, then as many stage-2 steps.
* **Upload**: per-class sums of the encoder output (over ``A'``, dropout off) over the cached
  elites and the elite counts (Eq. 7): ``elite_sums [C, d]``, ``elite_counts [C]``, nothing
  node-level.

Server (Algorithm 1): model average weighted by each client's node count ``|V_k|`` (the
configured aggregator; ``client_weight="train_nodes"`` weights by training nodes as the authors'
code does, which differs on the long-tailed variants, whose training nodes are down-sampled), and
``p^c = sum_k u_k^c / sum_k m_k^c`` over the clients that have class ``c`` (Eq. 8,
:func:`~fgl_ray.algorithms.prototypes.merge_prototypes`); a class no participant holds this
round keeps its previous prototype. Broadcast: ``prototypes [C, d]`` and ``present [C]``.

Prediction uses the purified graph, never the injection (no label is used at inference);
with ``logit_adjust="posthoc"`` it adds ``Delta`` to the logits.

Readings of the paper, and options for the other readings:

* **The sign of the logit adjustment** (``logit_adjust``). Eq. 15 adds ``Delta`` (largest for
  tail classes) to every logit inside the training loss (``"train"``, the paper's form). A
  classifier trained that way learns logits that are LOWER by ``Delta`` for the tail, so at
  inference it under-predicts tail classes. The logit-adjustment practice (Menon et al. 2021)
  either subtracts the prior margin in training (``"prior"``: ``z - Delta`` in the loss) or
  adds it post hoc at inference (``"posthoc"``: stage 2 trains on plain CE, ``predict`` adds
  ``Delta``). ``"none"`` runs stage 2 without any adjustment. The default, ``"train"``, is the
  mode that measured best on balanced accuracy (see ``DEFAULT_LOGIT_ADJUST`` below): with
  client-local counts and client-local test nodes, the "wrong-way" form keeps the local prior
  that the test nodes share, and the post-hoc form spends it.
* **Classes a client lacks** get ``Delta = 0``: the literal formula with ``eps = 1e-12`` gives
  ``mu q (27.6 + log N_max)``, which in ``train`` mode drives the shared classifier's logits of
  every locally absent class (i.e. most tail classes) down, and in ``posthoc`` mode predicts
  absent classes everywhere.
* **Homophily labels** (``homophily_labels``). Eq. 13 compares ``y_u`` with the labels of all
  purified neighbours; labels of validation/test nodes are not the client's to use, so by
  default only training-labelled neighbours count (``"train"``); ``"all"`` is the literal form.
  A training node with no usable neighbour has no valid statistic and is left out of Eq. 14's
  mean; a class without any valid node gets ``q = 0.5``.
* **Elite candidates** are the class's local training nodes (the restart set; the only nodes
  of known class), ``N_k^c`` is the class's local training count (as Eq. 14 defines it).
* **The classifier in stage 2** is the backbone's own ``classify`` on the purified graph
  (for GCN the last ``GCNConv``): Eq. 12 defines only its input ``h'``, and the same
  ``classify(·, A')`` runs at inference, so calibration and prediction see one function.
* **Ablation switches**: ``consensus=False`` uploads nothing, injects nothing, and runs stage
  2 (frozen encoder + logit adjustment on ``h``) from the first round, since there are no
  prototypes to wait for; ``purification=False`` uses the original graph everywhere;
  ``recalibration=False`` drops stage 2 and every logit adjustment (the paper's "standard
  federated optimisation"); prototypes are still exchanged but unused.
* Adam's state is shared by both stages (the paper uses one learning rate for both); encoder
  parameters get no gradient in stage 2, so no optimizer touches them there.

Defaults: ``mu = 1.0``, ``gamma = 0.5`` (the middle of the paper's grid; it reports a flat
plateau over ``mu in [0.1, 2]``, ``gamma in [0.1, 0.9]``), ``rho = 0.1``, ``ppr_alpha = 0.15``,
``ppr_steps = 10``.
"""

from __future__ import annotations

from typing import Literal, Sequence

import torch
from pydantic import Field
from torch import Tensor

from fgl_ray.algorithms.base import ALGORITHMS, Algorithm, ClientContext
from fgl_ray.algorithms.fedepd_graph import (class_homophily, inject_prototypes, logit_margins, purify_edges,
                                             select_elites)
from fgl_ray.algorithms.prototypes import class_sums, merge_prototypes, training_phase
from fgl_ray.messages import ClientUpdate

LogitAdjust = Literal["train", "posthoc", "prior", "none"]

#: Chosen by measurement (``benchmarks/fedepd.py``, 200 rounds, 10 Louvain clients, IR 20; pooled
#: test balanced accuracy, last-20-round mean, 3 seeds; the ``fedepd-logit-adjust`` section of
#: ``benchmarks/RESULTS.md``): ``train`` (the paper's form) beat ``posthoc`` on Cora-LT (69.8 vs 61.5)
#: and Chameleon-LT (39.4 vs 38.6), lost on CiteSeer-LT (55.7 vs 58.1) and Email-Eu-core (65.1 vs
#: 67.4); its four-dataset mean is higher (57.5 vs 56.4) and its worst loss far smaller. Why
#: ``posthoc`` can hurt: every client is evaluated on its own test nodes, whose labels follow the
#: same local (Louvain-community) distribution as its training labels. ``Delta`` comes from LOCAL
#: counts, so ``posthoc`` removes that informative local prior and boosts the classes the client
#: rarely sees, which are rare in its test nodes too (false positives), while ``train`` sharpens
#: the local prior at inference.
DEFAULT_LOGIT_ADJUST: LogitAdjust = "train"


@ALGORITHMS.register("fedepd")
class FedEPD(Algorithm):
    """Energy pruning, elite prototypes, low-pass injection, decoupled logit-adjusted calibration."""

    tasks = ("node-classification",)
    whole_graph = "prunes edges by the energy of the client's whole graph and propagates over it (PPR)"

    class Options(Algorithm.Options):
        mu: float = Field(1.0, ge=0.0, description="logit adjustment intensity mu (Eq. 15)")
        gamma: float = Field(0.5, ge=0.0, le=1.0, description="prototype injection intensity gamma (Eq. 12)")
        rho: float = Field(0.1, gt=0.0, le=1.0, description="elite fraction rho of each class's training nodes")
        ppr_alpha: float = Field(0.15, gt=0.0, le=1.0, description="PPR teleport probability (Eq. 6)")
        ppr_steps: int = Field(10, ge=0, description="PPR iterations L (Eq. 6)")
        logit_adjust: LogitAdjust = Field(
            DEFAULT_LOGIT_ADJUST,
            description="train: +Delta in the stage-2 loss (paper, Eq. 15); posthoc: +Delta at inference; "
                        "prior: -Delta in the stage-2 loss; none")
        homophily_labels: Literal["train", "all"] = Field(
            "train",
            description="neighbour labels used by the homophily gate (all = literal Eq. 13, uses val/test labels)")
        schedule: Literal["alternate", "sequential"] = Field(
            "alternate", description="alternate stage 1/stage 2 every local epoch, or all stage 1 then all stage 2")
        consensus: bool = Field(True, description="ablation switch: elite prototypes and their injection")
        purification: bool = Field(True, description="ablation switch: Dirichlet-energy edge pruning")
        recalibration: bool = Field(True, description="ablation switch: stage 2 and the logit adjustment")
        client_weight: Literal["nodes", "train_nodes"] = Field(
            "nodes", description="aggregation weight of a client: its node count |V_k| (paper, Algorithm 1) or its "
                                 "training-node count (the authors' code)")

    # ------------------------------------------------------------------ client side
    def setup_client(self, ctx: ClientContext) -> None:
        """Purification, elites, homophily gate and margins, computed once and cached."""
        opts = self.options
        data = ctx.data
        x, edge_index = data.x.cpu(), data.edge_index.cpu()
        y, train = data.y.cpu(), data.train_mask.cpu()
        if opts.purification:
            purified = purify_edges(x, edge_index)
            graph = purified.edge_index
            ctx.state["purify_lambda"] = purified.lam
            ctx.state["purify_dropped"] = purified.dropped_fraction
        else:
            graph = edge_index
        counts = torch.bincount(y[train], minlength=ctx.num_classes)
        labelled = train if opts.homophily_labels == "train" else None
        q = class_homophily(graph, y, train, ctx.num_classes, labelled=labelled)
        ctx.state["edge_index"] = graph.to(ctx.device)
        ctx.state["class_counts"] = counts
        ctx.state["homophily"] = q
        ctx.state["delta"] = logit_margins(counts, q, opts.mu).float().to(ctx.device)
        if opts.consensus:
            elites = select_elites(edge_index, y, train, ctx.num_classes, opts.rho, opts.ppr_alpha, opts.ppr_steps)
            ctx.state["elites"] = elites.to(ctx.device)

    def num_samples(self, ctx: ClientContext) -> int:
        """``|V_k|`` (the paper's weight) or the training-node count (``client_weight``)."""
        if self.options.client_weight == "nodes":
            return int(ctx.data.num_nodes)
        return super().num_samples(ctx)

    def graph(self, ctx: ClientContext) -> Tensor:
        """The edges this client trains and predicts on (purified unless ablated)."""
        return ctx.state["edge_index"]

    def global_prototypes(self, ctx: ClientContext) -> tuple[Tensor, Tensor] | None:
        stats = ctx.server_stats
        if not self.options.consensus or "prototypes" not in stats or not bool(stats["present"].any()):
            return None
        return stats["prototypes"].to(ctx.device), stats["present"].to(ctx.device).bool()

    def calibrates(self, ctx: ClientContext) -> bool:
        """Stage 2 runs when enabled and prototypes exist (or consensus is ablated)."""
        if not self.options.recalibration:
            return False
        return not self.options.consensus or self.global_prototypes(ctx) is not None

    def base_step(self, ctx: ClientContext) -> Tensor:
        """Stage 1 (Eq. 9): cross-entropy over the purified graph, all parameters."""
        ctx.optimizer.zero_grad(set_to_none=True)
        loss = self.loss(ctx, ctx.data, ctx.model(ctx.data.x, self.graph(ctx)))
        loss.backward()
        ctx.optimizer.step()
        return loss.detach()

    def calibration_loss(self, ctx: ClientContext) -> Tensor:
        """Stage 2 loss (Eqs. 10–16) with the encoder frozen: only the classifier gets gradients."""
        data, edges = ctx.data, self.graph(ctx)
        with torch.no_grad(), training_phase(ctx.model) as model:
            h = model.encode(data.x, edges)
        protos = self.global_prototypes(ctx)
        if protos is not None:
            prototypes, present = protos
            nodes = data.train_mask & present[data.y]
            h = inject_prototypes(h, edges, prototypes, data.y, nodes, self.options.gamma)
        logits = ctx.model.classify(h, edges)
        mode = self.options.logit_adjust
        if mode == "train":
            logits = logits + ctx.state["delta"]
        elif mode == "prior":
            logits = logits - ctx.state["delta"]
        return self.loss(ctx, data, logits)

    def calibration_step(self, ctx: ClientContext) -> Tensor:
        ctx.optimizer.zero_grad(set_to_none=True)
        loss = self.calibration_loss(ctx)
        loss.backward()
        ctx.optimizer.step()
        return loss.detach()

    def local_train(self, ctx: ClientContext) -> dict[str, float]:
        """Stage 1 and (once prototypes exist) stage 2, alternating per local epoch by default."""
        ctx.model.train()
        epochs = self.config.local_epochs
        calibrate = self.calibrates(ctx)
        base = calib = torch.zeros(())
        if self.options.schedule == "alternate":
            for _ in range(epochs):
                base = self.base_step(ctx)
                if calibrate:
                    calib = self.calibration_step(ctx)
        else:
            for _ in range(epochs):
                base = self.base_step(ctx)
            for _ in range(epochs if calibrate else 0):
                calib = self.calibration_step(ctx)
        metrics = {"loss": float(base), "calibrated": float(calibrate)}
        if calibrate:
            metrics["calibration_loss"] = float(calib)
        for key in ("purify_lambda", "purify_dropped"):
            if key in ctx.state:
                metrics[key] = float(ctx.state[key])
        return metrics

    @torch.no_grad()
    def predict(self, ctx: ClientContext, batch=None) -> Tensor:
        """Logits on the purified graph, without injection; ``+Delta`` in ``posthoc`` mode."""
        ctx.model.eval()
        logits = ctx.model(ctx.data.x, self.graph(ctx))
        if self.options.recalibration and self.options.logit_adjust == "posthoc":
            logits = logits + ctx.state["delta"].to(logits.dtype)
        return logits

    @torch.no_grad()
    def upload(self, ctx: ClientContext) -> dict[str, Tensor]:
        """Per-class sums of the encoder output over the elites (Eq. 7) and the elite counts."""
        if not self.options.consensus:
            return {}
        with training_phase(ctx.model) as model:
            h = model.encode(ctx.data.x, self.graph(ctx))
        sums, counted = class_sums(h, ctx.data.y, ctx.state["elites"], ctx.num_classes)
        return {"elite_sums": sums, "elite_counts": counted}

    def declared_stats(self, num_classes: int, hidden: int, num_features: int) -> dict[str, tuple[int, ...]]:
        if not self.options.consensus:
            return {}
        return {"elite_sums": (num_classes, hidden), "elite_counts": (num_classes,)}

    # ------------------------------------------------------------------ server side
    def setup_server(self, server) -> None:
        """No global prototype before the first aggregation (``P^0`` is empty)."""
        self.prototypes: Tensor | None = None
        self.present = torch.zeros(server.num_classes, dtype=torch.bool)

    def aggregate(self, server, updates: Sequence[ClientUpdate]) -> None:
        """``Theta = sum_k n_k / N Theta_k`` (configured aggregator), then Eq. 8."""
        server.aggregate_with_aggregator(updates)
        entries = [(u.stats["elite_sums"], u.stats["elite_counts"]) for u in updates if "elite_sums" in u.stats]
        if not entries:
            return
        merged, present = merge_prototypes(entries, are_sums=True)
        if self.prototypes is None:
            self.prototypes = torch.zeros_like(merged)
        self.prototypes = torch.where(present.unsqueeze(-1), merged, self.prototypes)
        self.present = self.present | present

    def server_stats(self, server) -> dict[str, Tensor]:
        if self.prototypes is None:
            return {}
        return {"prototypes": self.prototypes.clone(), "present": self.present.clone()}
