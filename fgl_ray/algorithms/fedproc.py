"""FedProc (Mu et al., "FedProc: Prototypical Contrastive Federated Learning on Non-IID Data",
FGCS 2023, arXiv:2109.12273).

Client objective, a hybrid of the global prototypical contrastive loss and cross-entropy:

    L_pc  = -log( exp(cos(z_i, c_{y_i})/tau) / sum_{j present} exp(cos(z_i, c_j)/tau) )
    loss  = alpha_t * weight * L_pc + (1 - alpha_t) * CE,     alpha_t = 1 - t/T

over training samples (nodes or graphs) whose class has a global prototype ``c`` (the
positive); the other classes' prototypes that exist are the negatives. ``z`` is the task's
``encode``,
``t`` is the round index (from 0) and ``T`` the number of rounds (``anneal_rounds``,
default the config's ``rounds``; the authors' code fixes T = 100 and clips ``alpha_t`` at
0, i.e. weights CE by ``t/T``, which is what this schedule reproduces). Early rounds lean on
the global prototypes, later ones on the local labels. ``constant_alpha`` replaces the
schedule by a fixed ``alpha``. With no global prototype yet (round 0) the loss is plain CE,
as in the authors' code. ``tau = 0.5``; ``weight = 1`` scales L_pc.

Differences from the authors' code, documented: they take the dot product of the raw
feature with the L2-normalised centres and no temperature; this follows the paper's cosine
similarity with temperature ``tau``. Prototype upload and merge are FedProto's (class means
of training samples, count-weighted over the clients holding each class).
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field
from torch import Tensor

from fgl_ray.algorithms.base import ALGORITHMS, ClientContext
from fgl_ray.algorithms.fedproto import FedProto, PrototypeExchangeOptions
from fgl_ray.algorithms.prototypes import prototype_contrastive_loss
from fgl_ray.messages import Broadcast


def annealed_alpha(round_index: int, total_rounds: int) -> float:
    """``alpha_t = max(0, 1 - t/T)``: the weight of the prototypical contrastive loss."""
    return max(0.0, 1.0 - round_index / total_rounds)


@ALGORITHMS.register("fedproc")
class FedProc(FedProto):
    """FedProto's prototype exchange with FedProc's annealed prototypical contrastive loss."""

    class Options(PrototypeExchangeOptions):
        temperature: float = Field(0.5, gt=0.0, description="temperature tau of the contrastive loss")
        weight: float = Field(1.0, ge=0.0, description="scale of the prototypical contrastive loss")
        anneal_rounds: Optional[int] = Field(None, ge=1, description="T of alpha_t = 1 - t/T; default: rounds")
        constant_alpha: Optional[float] = Field(None, ge=0.0, le=1.0,
                                                description="fixed alpha instead of the annealing schedule")

    def receive(self, ctx: ClientContext, broadcast: Broadcast) -> None:
        """Loads the model and remembers the round index for the schedule."""
        super().receive(ctx, broadcast)
        ctx.state["fedproc_round"] = broadcast.round

    def alpha(self, round_index: int) -> float:
        """The weight of the contrastive loss in round ``round_index``."""
        if self.options.constant_alpha is not None:
            return self.options.constant_alpha
        return annealed_alpha(round_index, self.options.anneal_rounds or self.config.rounds)

    def objective(self, ctx: ClientContext, batch, z: Tensor, logits: Tensor) -> Tensor:
        """``alpha * weight * L_pc + (1 - alpha) * CE``; plain CE when no prototype applies."""
        ce = self.loss(ctx, batch, logits)
        targets = self.prototype_targets(ctx, batch)
        if targets is None:
            return ce
        prototypes, present, rows, y = targets
        alpha = self.alpha(ctx.state.get("fedproc_round", 0))
        pc = prototype_contrastive_loss(z[rows], y[rows], prototypes, present, self.options.temperature)
        return alpha * self.options.weight * pc + (1.0 - alpha) * ce
