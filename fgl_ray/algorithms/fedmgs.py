"""FedMGS (Wu et al., "Towards Modality-imbalanced Federated Graph Learning: A Data Synthesis-based
Approach", CIKM 2026): missing modalities recovered in representation space.

Client ``k`` (Algorithm 1), on the ``mm_gnn`` backbone (:mod:`fgl_ray.models.multimodal`), every
local epoch one step on (Eq. 10)

    L = L_task + lambda_rec * L_rec + lambda_proto * L_proto

* the forward pass of Eqs. 2-9 (:meth:`MultimodalGNN.forward_parts`): gated modality encoders
  and the mean over observed modalities, GCN + LayerNorm for ``h^g``; for each modality the query
  ``pi^m = q^T P^m`` into the broadcast class-modality banks, ``q`` the stop-gradient class
  estimate of ``unlabelled_query`` (``auto``: on node classification the classifier's softmax from
  a first, gradient-free pass, elsewhere the softmax of prototype similarities), renormalised
  over the modality's valid classes, the same for training and test nodes (``query: predicted``,
  default; ``query: label`` gives labelled training nodes their one-hot label, Eq. 4 read
  literally, which lets the readout learn the class from a training node's synthesis where a
  test node offers none); the synthesis ``z_hat^m = psi_syn^m([z^{m'} | h | pi^m | 0])``, the
  confidence ``eta^m``, scaled by ``sigmoid(-beta_m Delta_m)`` with the server's spread
  ``Delta_m`` (``beta: softplus`` keeps ``beta_m`` positive, so that the spread can only lower the
  confidence), and the fusion ``eta z_hat + (1 - eta) h`` for a missing modality (an observed one
  passes unchanged);
* ``L_rec``: mean over complete nodes and both modalities of ``||z_hat^m - z^m||^2``, ``z_hat^m``
  synthesised from a forward pass in which the complete nodes miss ``m`` (``reconstruction_context:
  masked``, default: the context a node missing ``m`` has at test time; ``observed``: from ``h``
  computed with ``z^m`` present, which can carry the target); it trains the synthesis networks only
  (``reconstruction_gradient: synthesizer``, default: the paper calls it a regulariser of the
  recovered latents) or also the encoders and GCN behind ``z^{m'}``, ``h`` and the target (``all``,
  plain autograd on Eq. 10), which erases what one modality holds that the other cannot predict
  (see the README);
* ``L_proto``: cross-entropy of ``cos(s_i, p_c) / tau`` (``tau = sqrt(d)``, the paper) over the
  classes with a prototype, on labelled training nodes; off before any prototype exists.

Evaluation (``diagnostics``, node classification) adds to each client's rows, on training and on
test nodes, the calibrated ``eta`` of missing modalities and the accuracy on nodes with and without
a missing modality: where a train/test asymmetry or the missing modalities cost accuracy.

After training the client uploads, per modality and class, the mean of its encoder outputs
``e_m(x^m)`` over the training-labelled nodes that observe ``m`` and their count (Eq. 3):
``prototypes [2, C, d]``, ``counts [2, C]`` and the model; nothing per node. The server averages
the models (the configured aggregator, sample-weighted by the task's training samples, Eq. 1),
merges each bank entry count-weighted over the clients that observed it (an entry nobody observed
stays absent, and one nobody reported this round keeps its previous value), and computes the
spread ``Delta_m``, the mean over dimensions of the population variance of the valid class
prototypes (Eq. 6; 0 with fewer than two). It broadcasts ``prototypes``, ``valid``, ``spread``.

Ablations: ``availability_gate: false`` encodes placeholders as inputs (they enter message
passing); ``prototype_synthesis: false`` drops the prototype route (``pi = 0``, no ``L_proto``, no
upload, no spread); ``reliability_fusion: false`` lets a missing modality take ``z_hat``
directly. Readings of the paper's open details: ``fgl_ray/models/multimodal.py`` and the README.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from typing import Literal, Optional, Sequence

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor

from fgl_ray.algorithms.base import ALGORITHMS, Algorithm, ClientContext
from fgl_ray.algorithms.prototypes import class_means, merge_prototypes, training_phase
from fgl_ray.data.multimodal import hide_modality
from fgl_ray.messages import ClientUpdate
from fgl_ray.models.multimodal import MULTIMODAL_TASKS, MultimodalGNN, Prototypes, prototype_logits


def reconstruction_loss(model: MultimodalGNN | None, parts: dict[str, Tensor], gradient: str = "synthesizer",
                        contexts: Sequence[dict[str, Tensor]] | None = None) -> Tensor:
    """``L_rec``: mean of ``||z_hat^m - z^m||^2`` over complete nodes and both modalities (0 without any).

    ``z_hat^m`` is synthesised from ``contexts[m]`` (the forward pass with modality ``m`` hidden on the
    complete nodes) when given, else from ``parts`` itself (``h`` computed with ``z^m`` present).
    ``gradient: synthesizer`` trains only the synthesis networks on it (their inputs and the target
    ``z^m`` held fixed); ``all`` lets it reach the encoders and the GCN too."""
    complete = parts["available"].all(dim=1)
    if not bool(complete.any()):
        return parts["z_hat"].sum() * 0.0
    z = parts["z"][complete]
    contexts = contexts or (parts, parts)
    if gradient == "all":
        z_hat = [context["z_hat"][complete][:, m] for m, context in enumerate(contexts)]
    else:
        z = z.detach()
        z_hat = [model.synthesize(c["z"][complete].detach(), c["h"][complete].detach(), c["pi"][complete])[:, m]
                 for m, c in enumerate(contexts)]
    return (torch.stack(z_hat, dim=1) - z).pow(2).sum(-1).mean()


def prototype_loss(s: Tensor, labels: Tensor, prototypes: Prototypes, temperature: float) -> Tensor:
    """``L_proto``: cross-entropy of prototype similarities on labelled nodes whose class has a prototype."""
    means, present = prototypes.class_means()
    rows = (labels >= 0) & present[labels.clamp(min=0)]
    if not bool(rows.any()):
        return s.sum() * 0.0
    return F.cross_entropy(prototype_logits(s[rows], means, present, temperature), labels[rows])


def bank_spread(banks: Tensor, valid: Tensor) -> Tensor:
    """``Delta_m`` per modality: mean over dimensions of the variance over valid classes (Eq. 6)."""
    spread = torch.zeros(banks.shape[0])
    for m in range(banks.shape[0]):
        if int(valid[m].sum()) >= 2:
            spread[m] = banks[m][valid[m]].var(dim=0, unbiased=False).mean()
    return spread


@ALGORITHMS.register("fedmgs")
class FedMGS(Algorithm):
    """Availability-aware encoding, prototype-guided latent synthesis, reliability-calibrated fusion."""

    tasks = MULTIMODAL_TASKS
    models = ("mm_gnn",)
    default_dataset = "synthetic-mm"

    class Options(Algorithm.Options):
        lambda_rec: float = Field(0.05, ge=0.0, description="weight of the reconstruction loss on complete nodes")
        lambda_proto: float = Field(0.3, ge=0.0, description="weight of the prototype alignment loss")
        temperature: Optional[float] = Field(None, gt=0.0, description="of prototype similarities; default sqrt(d)")
        query: Literal["predicted", "label"] = Field(
            "predicted", description="the synthesis query of labelled training nodes: like every other node, the "
                                     "estimate of unlabelled_query (the same for training and test nodes), or their "
                                     "one-hot label (Eq. 4 read literally: the readout can then learn the class from "
                                     "a training node's synthesis, which a test node cannot give it)")
        unlabelled_query: Literal["auto", "prototypes", "classifier"] = Field(
            "auto", description="the estimate that queries the banks: the softmax of prototype similarities (the "
                                "semantic anchors of Algorithm 1, line 9), or on node classification the classifier's "
                                "prediction from a first, gradient-free pass; auto: classifier on node "
                                "classification, prototypes on the other tasks")
        reconstruction_gradient: Literal["synthesizer", "all"] = Field(
            "synthesizer", description="what L_rec trains: the synthesis networks alone (it regularises the recovered "
                                       "latents), or also the encoders and GCN that make its inputs and target")
        reconstruction_context: Literal["observed", "masked"] = Field(
            "masked", description="the graph context h from which L_rec recovers z^m on complete nodes: computed with "
                                  "modality m hidden on them, as a node missing m has it at test time, or with z^m "
                                  "present (observed: h can carry the target)")
        beta: Literal["free", "softplus"] = Field(
            "free", description="Eq. 7's beta_m as learned (any sign: a negative beta turns the spread's penalty into "
                                "a bonus), or kept positive through a softplus equal to 1 at initialisation")
        diagnostics: bool = Field(True, description="on node classification, add each client's calibrated eta and "
                                                    "accuracy on training and test nodes, with and without a missing "
                                                    "modality, to its evaluation rows")
        availability_gate: bool = Field(True, description="ablation switch: availability-aware encoding")
        prototype_synthesis: bool = Field(True, description="ablation switch: prototype-guided synthesis")
        reliability_fusion: bool = Field(True, description="ablation switch: reliability-calibrated fusion")

    @classmethod
    def check_task(cls, options: dict, task: str) -> None:
        if options.get("unlabelled_query") == "classifier" and task != "node-classification":
            raise ValueError(f"unlabelled_query 'classifier' reads the node classifier, which task {task!r} does "
                             "not train; use unlabelled_query 'prototypes' (the default)")

    # ------------------------------------------------------------------ client side
    def tau(self) -> float:
        return self.options.temperature or math.sqrt(self.config.hidden)

    def prototypes(self, ctx: ClientContext) -> Prototypes | None:
        """The broadcast banks on the client's device (``None`` before any, or when ablated)."""
        stats = ctx.server_stats
        if not self.options.prototype_synthesis or "prototypes" not in stats or not bool(stats["valid"].any()):
            return None
        return Prototypes(stats["prototypes"].to(ctx.device), stats["valid"].to(ctx.device).bool(),
                          stats["spread"].to(ctx.device))

    def estimate_source(self, ctx: ClientContext) -> str:
        """``prototypes`` or ``classifier``: what estimates a query's class (``unlabelled_query``)."""
        if self.options.unlabelled_query != "auto":
            return self.options.unlabelled_query
        return "classifier" if ctx.task.name == "node-classification" else "prototypes"

    def parts(self, ctx: ClientContext, batch, x: Tensor | None = None) -> tuple[dict[str, Tensor], Tensor]:
        """FedMGS's forward pass on ``batch`` (with packed features ``x`` in place of its own when
        given) and the query labels (labelled training nodes, else -1)."""
        own, edge_index = ctx.task.node_inputs(batch)
        x = own if x is None else x
        mask, y = ctx.task.labelled(batch)
        labels = torch.where(mask, y, torch.full_like(y, -1))
        options, prototypes = self.options, self.prototypes(ctx)
        queries = labels if options.query == "label" else None

        def forward(estimate: Tensor | None = None) -> dict[str, Tensor]:
            return ctx.model.forward_parts(x, edge_index, prototypes, queries, gate=options.availability_gate,
                                           synthesis=options.prototype_synthesis, fusion=options.reliability_fusion,
                                           temperature=self.tau(), class_estimate=estimate,
                                           positive_beta=options.beta == "softplus")

        if prototypes is None or self.estimate_source(ctx) == "prototypes":
            return forward(), labels
        with torch.no_grad(), (training_phase(ctx.model) if ctx.model.training else nullcontext()):
            estimate = torch.softmax(ctx.task.classify(ctx.model, forward()["readout"], batch), dim=-1)
        return forward(estimate), labels

    def local_train(self, ctx: ClientContext) -> dict[str, float]:
        """One step per local epoch (and batch) on Eq. 10."""
        ctx.model.train()
        task, prototypes = ctx.task, self.prototypes(ctx)
        total = rec = proto = torch.zeros(())
        steps = 0
        for _ in range(self.config.local_epochs):
            for batch in task.train_batches(ctx.data):
                steps += 1
                ctx.optimizer.zero_grad(set_to_none=True)
                parts, labels = self.parts(ctx, batch)
                loss = task.loss(task.classify(ctx.model, parts["readout"], batch), batch)
                rec = self.reconstruction(ctx, batch, parts)
                proto = (prototype_loss(parts["s"], labels, prototypes, self.tau()) if prototypes is not None
                         else torch.zeros(()))
                total = loss + self.options.lambda_rec * rec + self.options.lambda_proto * proto
                total.backward()
                ctx.optimizer.step()
        return {"loss": float(total.detach()), "reconstruction_loss": float(rec.detach()),
                "prototype_loss": float(proto.detach()), "steps": float(steps)}

    def reconstruction(self, ctx: ClientContext, batch, parts: dict[str, Tensor]) -> Tensor:
        """``L_rec`` on ``batch``, with ``reconstruction_context: masked`` from one more forward pass per
        modality in which the complete nodes miss it (without gradient unless ``reconstruction_gradient: all``)."""
        gradient = self.options.reconstruction_gradient
        complete = parts["available"].all(dim=1)
        if self.options.reconstruction_context == "observed" or not bool(complete.any()):
            return reconstruction_loss(ctx.model, parts, gradient)
        x, _ = ctx.task.node_inputs(batch)
        with torch.no_grad() if gradient == "synthesizer" else nullcontext():
            contexts = [self.parts(ctx, batch, hide_modality(x, ctx.model.modality_dims, m, complete))[0]
                        for m in range(2)]
        return reconstruction_loss(ctx.model, parts, gradient, contexts)

    @torch.no_grad()
    def predict(self, ctx: ClientContext, batch) -> Tensor:
        ctx.model.eval()
        parts, _ = self.parts(ctx, batch)
        return ctx.task.classify(ctx.model, parts["readout"], batch)

    @torch.no_grad()
    def evaluation_metrics(self, ctx: ClientContext) -> dict[str, dict[str, float]]:
        """Per split (train, test): the mean calibrated ``eta`` of the missing modalities and accuracy
        over the nodes missing a modality and over the complete ones (``eta_missing``,
        ``accuracy_missing``, ``accuracy_complete``; a group without nodes is left out), the share of
        nodes missing one (``missing_fraction``), and on training nodes ``accuracy`` (the task's own
        rows hold it for test nodes); node classification with ``diagnostics`` only."""
        if not self.options.diagnostics or ctx.task.name != "node-classification":
            return {}
        ctx.model.eval()
        metrics = {}
        for split in ("train", "test"):
            (batch, rows), = ctx.task.split_batches(ctx.data, split)
            parts, _ = self.parts(ctx, batch)
            _, y = ctx.task.labelled(batch)
            right = ctx.task.classify(ctx.model, parts["readout"], batch).argmax(-1) == y
            missing = ~parts["available"].all(dim=1)
            groups = {"accuracy_missing": rows & missing, "accuracy_complete": rows & ~missing}
            if split == "train":
                groups["accuracy"] = rows
            values = {name: float(right[nodes].float().mean()) for name, nodes in groups.items() if bool(nodes.any())}
            unobserved = ~parts["available"] & rows.unsqueeze(1)
            if bool(unobserved.any()):
                values["eta_missing"] = float(parts["eta"][unobserved].mean())
            values["missing_fraction"] = float(missing[rows].float().mean()) if bool(rows.any()) else 0.0
            metrics[split] = values
        return metrics

    @torch.no_grad()
    def upload(self, ctx: ClientContext) -> dict[str, Tensor]:
        """Class-modality prototypes of the encoder outputs over observed training nodes, and counts (Eq. 3)."""
        if not self.options.prototype_synthesis:
            return {}
        batch = next(iter(ctx.task.representation_batches(ctx.data)))
        x, edge_index = ctx.task.node_inputs(batch)
        mask, y = ctx.task.labelled(batch)
        with training_phase(ctx.model) as model:
            views, available = model.split(x)
            raw = [encoder(view) for encoder, view in zip(model.encoders, views)]
        banks, counts = zip(*(class_means(raw[m], y, mask & available[:, m], ctx.num_classes) for m in range(2)))
        return {"prototypes": torch.stack(banks), "counts": torch.stack(counts)}

    def declared_stats(self, num_classes: int, hidden: int, num_features: int) -> dict[str, tuple[int, ...]]:
        if not self.options.prototype_synthesis:
            return {}
        return {"prototypes": (2, num_classes, self.config.hidden), "counts": (2, num_classes)}

    # ------------------------------------------------------------------ server side
    def setup_server(self, server) -> None:
        """Empty banks (no entry valid) and zero spreads before the first round."""
        self.banks = torch.zeros(2, server.num_classes, self.config.hidden)
        self.valid = torch.zeros(2, server.num_classes, dtype=torch.bool)

    def aggregate(self, server, updates: Sequence[ClientUpdate]) -> None:
        """Model average, then each modality's bank merged over the clients that observed each entry."""
        server.aggregate_with_aggregator(updates)
        reported = [u.stats for u in updates if "prototypes" in u.stats]
        if not reported:
            return
        for m in range(2):
            merged, present = merge_prototypes([(s["prototypes"][m], s["counts"][m]) for s in reported])
            self.banks[m] = torch.where(present.unsqueeze(-1), merged, self.banks[m])
            self.valid[m] |= present

    def server_stats(self, server) -> dict[str, Tensor]:
        if not self.options.prototype_synthesis:
            return {}
        return {"prototypes": self.banks.clone(), "valid": self.valid.clone(),
                "spread": bank_spread(self.banks, self.valid)}
