"""FedDyn (Acar et al., "Federated Learning Based on Dynamic Regularization", ICLR 2021).

Algorithm 1 of the paper. Client ``k`` in round ``t``, from the server model ``theta^{t-1}``:

    theta_k^t = argmin_theta  L_k(theta) - <grad L_k(theta_k^{t-1}), theta> + alpha/2 ||theta - theta^{t-1}||^2
    grad L_k(theta_k^t) = grad L_k(theta_k^{t-1}) - alpha (theta_k^t - theta^{t-1})

The client keeps ``g_k = grad L_k(theta_k^{t-1})`` (zeros before its first round) in
``ctx.state["feddyn_grad"]``. The server keeps ``h`` (zeros at first), with ``m`` the number
of ALL clients and ``P_t`` the participants:

    h^t     = h^{t-1} - alpha (1/m) sum_{k in P_t} (theta_k^t - theta^{t-1})
    theta^t = aggregated - h^t / alpha

where "aggregated" is what the configured aggregator produced (the paper's ``gamma^t``, the
participants' mean, with the default ``mean`` aggregator), so FedDyn composes with any
aggregator. ``theta_k^t - theta^{t-1} = -lr * u_k`` by the update convention.
``h`` lives on this algorithm instance, which lives in the server process (one ``h`` per
server model key). The corrected ``theta^t`` is both broadcast and evaluated.
Default ``alpha = 0.01``.
"""

from __future__ import annotations

from typing import Sequence

import torch
from pydantic import Field
from torch import Tensor

from fgl_ray.algorithms.base import ALGORITHMS, Algorithm, ClientContext
from fgl_ray.algorithms.fedprox import squared_distance
from fgl_ray.messages import Broadcast, ClientUpdate, ModelState
from fgl_ray.params import shared_parameters, trainable_vector


def server_correction(h: Tensor, drifts: Tensor, num_clients: int, alpha: float) -> Tensor:
    """``h - alpha/m * sum_k (theta_k - theta^{t-1})`` for stacked ``drifts`` ``[K, P]``."""
    return h - alpha * drifts.sum(0) / num_clients


@ALGORITHMS.register("feddyn")
class FedDyn(Algorithm):
    """Dynamic regularisation: linear and quadratic penalties on clients, ``h`` on the server."""

    class Options(Algorithm.Options):
        alpha: float = Field(0.01, gt=0.0, description="dynamic regularisation coefficient alpha")

    # ------------------------------------------------------------------ client side
    def setup_client(self, ctx: ClientContext) -> None:
        """``g_k = 0`` before the client's first round."""
        ctx.state["feddyn_grad"] = torch.zeros_like(trainable_vector(ctx.model))

    def receive(self, ctx: ClientContext, broadcast: Broadcast) -> None:
        """Loads ``theta^{t-1}`` and keeps a detached copy as the anchor of the quadratic term."""
        super().receive(ctx, broadcast)
        ctx.state["feddyn_anchor"] = [p.detach().clone() for p in shared_parameters(ctx.model)]

    def loss(self, ctx: ClientContext, batch, logits: Tensor) -> Tensor:
        """``CE - <g_k, theta> + alpha/2 ||theta - theta^{t-1}||^2``."""
        loss = super().loss(ctx, batch, logits)
        params = shared_parameters(ctx.model)
        theta = torch.cat([p.reshape(-1) for p in params])
        loss = loss - torch.dot(ctx.state["feddyn_grad"], theta)
        anchor = ctx.state.get("feddyn_anchor")
        if anchor is not None:
            loss = loss + 0.5 * self.options.alpha * squared_distance(params, anchor)
        return loss

    def local_train(self, ctx: ClientContext) -> dict[str, float]:
        """Trains, then ``g_k <- g_k - alpha (theta_k^t - theta^{t-1})``."""
        metrics = super().local_train(ctx)
        anchor = torch.cat([a.reshape(-1) for a in ctx.state["feddyn_anchor"]])
        drift = trainable_vector(ctx.model) - anchor
        ctx.state["feddyn_grad"] = ctx.state["feddyn_grad"] - self.options.alpha * drift
        return metrics

    # ------------------------------------------------------------------ server side
    def setup_server(self, server) -> None:
        """``h = 0`` for every server model."""
        self.h: dict[str, Tensor] = {key: torch.zeros_like(state.params) for key, state in server.models.items()}

    def aggregate(self, server, updates: Sequence[ClientUpdate]) -> None:
        """Configured aggregation, then the ``h`` update and ``theta^t = aggregated - h/alpha``."""
        alpha = self.options.alpha
        keys = sorted({u.model_key for u in updates})
        server.aggregate_with_aggregator(updates)
        for key in keys:
            drifts = torch.stack([-self.config.lr * u.update for u in updates if u.model_key == key])
            aggregated = server.models[key]
            h = self.h.get(key, torch.zeros_like(aggregated.params))
            self.h[key] = server_correction(h, drifts.to(h.dtype), len(server.client_ids), alpha)
            server.models[key] = ModelState((aggregated.params - self.h[key] / alpha).to(aggregated.params.dtype),
                                            aggregated.buffers)
