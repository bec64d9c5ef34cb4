"""Adaptive server optimizers: FedAdagrad, FedYogi, FedAdam (Reddi et al., "Adaptive Federated
Optimization", ICLR 2021, Algorithm 2).

With sample weights ``q_k = n_k / sum n`` and descent-convention updates ``u_k = -(W_k - W)/lr``,
the pseudo-gradient is the weighted model change (it points *along* the local progress)::

    Delta = sum_k q_k (W_k - W) = -lr * sum_k q_k u_k
    m     = beta1 m + (1 - beta1) Delta
    v     = v + Delta^2                                       (fedadagrad)
    v     = v - (1 - beta2) Delta^2 sign(v - Delta^2)         (fedyogi)
    v     = beta2 v + (1 - beta2) Delta^2                     (fedadam)
    W     = W + server_lr * m / (sqrt(v) + tau)

As in the paper there is no bias correction; ``m`` starts at 0 and ``v`` at ``initial_v``, which
the paper requires to satisfy ``v_{-1} >= tau^2``: ``initial_v=None`` (default) means exactly
``tau^2``, and a smaller value is rejected. The state (``m``, ``v``, step count) lives across
rounds; ``beta2`` is unused by FedAdagrad. Non-trainable buffers are averaged by the server.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from pydantic import Field, model_validator
from torch import Tensor

from fgl_ray.aggregators.base import AGGREGATORS, Aggregator, sample_weights
from fgl_ray.params import ParamLayout


class FedOptAggregator(Aggregator):
    """Shared server-optimizer state and step; subclasses define the second-moment rule."""

    shared_state = True

    class Options(Aggregator.Options):
        server_lr: float = Field(0.01, gt=0.0, description="server learning rate eta")
        beta1: float = Field(0.9, ge=0.0, lt=1.0, description="first-moment decay")
        beta2: float = Field(0.99, ge=0.0, lt=1.0, description="second-moment decay (Adam, Yogi)")
        tau: float = Field(1e-3, gt=0.0, description="adaptivity: added to sqrt(v)")
        initial_v: Optional[float] = Field(None, description="v_{-1}; None means tau**2 (must be >= tau**2)")

        @model_validator(mode="after")
        def _check_initial_v(self) -> "FedOptAggregator.Options":
            if self.initial_v is not None and self.initial_v < self.tau ** 2:
                raise ValueError(f"initial_v={self.initial_v} must be >= tau**2={self.tau ** 2} (Reddi et al.)")
            return self

        @property
        def v0(self) -> float:
            return self.tau ** 2 if self.initial_v is None else self.initial_v

    def __init__(self, options: "FedOptAggregator.Options", layout: ParamLayout, client_ids: Sequence[int],
                 local_steps: int = 1) -> None:
        super().__init__(options, layout, client_ids, local_steps)
        self.m = torch.zeros(layout.size, dtype=torch.float64)
        self.v = torch.full((layout.size,), options.v0, dtype=torch.float64)
        self.steps = 0

    def second_moment(self, v: Tensor, delta_sq: Tensor) -> Tensor:
        """The new ``v`` from the old one and ``Delta^2``."""
        raise NotImplementedError

    def aggregate(self, weights: Tensor, updates: Tensor, num_samples: Tensor, client_ids: Sequence[int],
                  lr: float) -> Tensor:
        if updates.dim() != 2 or updates.shape[1] != self.m.numel():
            raise ValueError(f"updates of shape {tuple(updates.shape)}; expected [K, {self.m.numel()}]")
        q = sample_weights(num_samples)
        self.last_weights = q
        delta = -lr * (q @ updates.double())
        o = self.options
        self.m = o.beta1 * self.m + (1.0 - o.beta1) * delta
        self.v = self.second_moment(self.v, delta * delta)
        self.steps += 1
        step = o.server_lr * self.m / (self.v.sqrt() + o.tau)
        return (weights.double() + step).to(weights.dtype)

    def state_dict(self) -> dict:
        """The server-optimizer state: moments and step count."""
        return {"m": self.m.clone(), "v": self.v.clone(), "steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`; the moment shapes must match the layout."""
        m = torch.as_tensor(state["m"], dtype=torch.float64)
        v = torch.as_tensor(state["v"], dtype=torch.float64)
        if m.shape != self.m.shape or v.shape != self.v.shape:
            raise ValueError(f"state moments of shapes {tuple(m.shape)}, {tuple(v.shape)}; "
                             f"expected {tuple(self.m.shape)}")
        self.m, self.v, self.steps = m.clone(), v.clone(), int(state["steps"])


@AGGREGATORS.register("fedadagrad")
class FedAdagrad(FedOptAggregator):
    """``v = v + Delta^2``."""

    def second_moment(self, v: Tensor, delta_sq: Tensor) -> Tensor:
        return v + delta_sq


@AGGREGATORS.register("fedyogi")
class FedYogi(FedOptAggregator):
    """``v = v - (1 - beta2) Delta^2 sign(v - Delta^2)``."""

    def second_moment(self, v: Tensor, delta_sq: Tensor) -> Tensor:
        return v - (1.0 - self.options.beta2) * delta_sq * torch.sign(v - delta_sq)


@AGGREGATORS.register("fedadam")
class FedAdam(FedOptAggregator):
    """``v = beta2 v + (1 - beta2) Delta^2``."""

    def second_moment(self, v: Tensor, delta_sq: Tensor) -> Tensor:
        return self.options.beta2 * v + (1.0 - self.options.beta2) * delta_sq
