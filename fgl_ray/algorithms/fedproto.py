"""FedProto (Tan et al., "FedProto: Federated Prototype Learning across Heterogeneous Clients", AAAI 2022).

Client ``k`` minimises (Eq. 8 of the paper, with the MSE distance of the authors' code)

    loss = CE + lam * MSE(h_i, p_{y_i})    over training samples i whose class has a global prototype

with ``h`` the task's ``encode`` (node or graph representations); with no global prototypes yet
the loss is plain CE. After local training the client uploads its local prototypes, the
per-class means of ``h`` over its TRAINING samples, and its per-class counts. ``h`` is taken in the training phase with
dropout off (:func:`~fgl_ray.algorithms.prototypes.training_phase`): the prototypes live in
the space of the representations they regularise (for PMLP-GCN, without propagation), as the
authors of FedProto and FedProc build them from training-mode features. The server's
prototype of class ``c`` is the count-weighted mean over the clients that have class ``c``
(:func:`~fgl_ray.algorithms.prototypes.merge_prototypes`; never averaging in the zero
vectors of absent classes); a class that no participant of this round holds keeps its
previous global prototype. The server broadcasts ``prototypes [C, hidden]`` and
``present [C]``. By default model weights are also aggregated by the configured aggregator
(as OpenFGL does); ``share_weights: false`` is the paper's form, which shares prototypes only:
every client keeps and evaluates its own model. Prediction uses the classifier head.
Default ``lam = 1`` (OpenFGL).
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor

from fgl_ray.algorithms.base import ALGORITHMS, Algorithm, ClientContext
from fgl_ray.algorithms.prototypes import class_means, merge_prototypes, training_phase
from fgl_ray.messages import ClientUpdate


class PrototypeExchangeOptions(Algorithm.Options):
    """Options of every prototype-exchange method (FedProto, FedProc)."""

    share_weights: bool = Field(
        True, description="also aggregate model weights (OpenFGL); false = prototypes only (the paper)")


@ALGORITHMS.register("fedproto")
class FedProto(Algorithm):
    """Prototype exchange; subclasses (FedProc) change only :meth:`objective`."""

    class Options(PrototypeExchangeOptions):
        lam: float = Field(1.0, ge=0.0, description="weight lambda of the prototype regulariser")

    def __init__(self, options: PrototypeExchangeOptions, config) -> None:
        super().__init__(options, config)
        self.personalized = not options.share_weights

    # ------------------------------------------------------------------ client side
    @staticmethod
    def global_prototypes(ctx: ClientContext) -> tuple[Tensor, Tensor] | None:
        """The broadcast ``(prototypes, present)`` on the client's device, or ``None`` if none exist."""
        stats = ctx.server_stats
        if "prototypes" not in stats or not bool(stats["present"].any()):
            return None
        return stats["prototypes"].to(ctx.device), stats["present"].to(ctx.device).bool()

    def prototype_targets(self, ctx: ClientContext, batch) -> tuple[Tensor, Tensor, Tensor, Tensor] | None:
        """``(prototypes, present, rows, y)``: the batch's counted rows whose class has a global
        prototype, and the labels; ``None`` when no such row exists."""
        protos = self.global_prototypes(ctx)
        if protos is None:
            return None
        prototypes, present = protos
        mask, y = ctx.task.labelled(batch)
        rows = mask & present[y]
        return (prototypes, present, rows, y) if bool(rows.any()) else None

    def objective(self, ctx: ClientContext, batch, z: Tensor, logits: Tensor) -> Tensor:
        """``CE + lam * MSE(h_i, p_{y_i})``; plain CE when no prototype applies."""
        ce = self.loss(ctx, batch, logits)
        targets = self.prototype_targets(ctx, batch)
        if targets is None:
            return ce
        prototypes, _, rows, y = targets
        return ce + self.options.lam * F.mse_loss(z[rows], prototypes[y[rows]].to(z.dtype))

    @torch.no_grad()
    def upload(self, ctx: ClientContext) -> dict[str, Tensor]:
        """Local prototypes (per-class means of ``encode`` over the training samples) and counts."""
        with training_phase(ctx.model) as model:
            z, y = ctx.task.representations(model, ctx.data)
        means, counts = class_means(z, y, None, ctx.num_classes)
        return {"prototypes": means, "counts": counts}

    def declared_stats(self, num_classes: int, hidden: int, num_features: int) -> dict[str, tuple[int, ...]]:
        return {"prototypes": (num_classes, hidden), "counts": (num_classes,)}

    # ------------------------------------------------------------------ server side
    def setup_server(self, server) -> None:
        """No global prototype before the first aggregation."""
        self.prototypes = torch.zeros(server.declared["prototypes"])
        self.present = torch.zeros(server.num_classes, dtype=torch.bool)

    def aggregate(self, server, updates: Sequence[ClientUpdate]) -> None:
        """Configured weight aggregation (unless prototypes only), then the prototype merge."""
        if self.options.share_weights:
            server.aggregate_with_aggregator(updates)
        entries = [(u.stats["prototypes"], u.stats["counts"]) for u in updates if "prototypes" in u.stats]
        if not entries:
            return
        merged, present = merge_prototypes(entries)
        keep = present.unsqueeze(-1)
        self.prototypes = torch.where(keep, merged, self.prototypes)
        self.present = self.present | present

    def server_stats(self, server) -> dict[str, Tensor]:
        return {"prototypes": self.prototypes.clone(), "present": self.present.clone()}
