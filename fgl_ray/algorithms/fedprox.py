"""FedProx (Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020).

Each client minimises its local loss plus a proximal term around the global weights it
received (Eq. 2 of the paper), over the parameters that are shared (only those have a global
value):

    h_k(w; w^t) = F_k(w) + mu/2 * ||w - w^t||^2

The server side is FedAvg's (any configured aggregator). Default ``mu = 1e-3`` as in OpenFGL.
"""

from __future__ import annotations

from pydantic import Field
from torch import Tensor

from fgl_ray.algorithms.base import ALGORITHMS, Algorithm, ClientContext
from fgl_ray.messages import Broadcast
from fgl_ray.params import shared_parameters


def squared_distance(params: list[Tensor], anchor: list[Tensor]) -> Tensor:
    """``||w - w_anchor||^2`` over matching lists of tensors (differentiable in ``params``)."""
    return sum(((p - a) ** 2).sum() for p, a in zip(params, anchor))


@ALGORITHMS.register("fedprox")
class FedProx(Algorithm):
    """FedAvg with a proximal term pulling local weights towards the received global weights."""

    class Options(Algorithm.Options):
        mu: float = Field(1e-3, ge=0.0, description="proximal coefficient mu")

    def receive(self, ctx: ClientContext, broadcast: Broadcast) -> None:
        """Loads the global model and keeps a detached copy ``w^t`` as the proximal anchor."""
        super().receive(ctx, broadcast)
        ctx.state["fedprox_anchor"] = [p.detach().clone() for p in shared_parameters(ctx.model)]

    def loss(self, ctx: ClientContext, batch, logits: Tensor) -> Tensor:
        """The task's loss plus ``mu/2 ||w - w^t||^2``."""
        loss = super().loss(ctx, batch, logits)
        anchor = ctx.state.get("fedprox_anchor")
        if anchor is None:
            return loss
        return loss + 0.5 * self.options.mu * squared_distance(shared_parameters(ctx.model), anchor)
