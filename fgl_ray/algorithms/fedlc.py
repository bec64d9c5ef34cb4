"""FedLC (Zhang et al., "Federated Learning with Label Distribution Skew via Logits
Calibration", ICML 2022).

Client ``k`` trains on the calibrated cross-entropy

    L_cal(z, y) = -log( exp(z_y - delta_y) / sum_c exp(z_c - delta_c) ),  delta_c = tau * n_{k,c}^{-1/4}

with ``n_{k,c}`` the client's number of training nodes of class ``c``: every logit is lowered by
a margin that is larger for rarer classes, so a rare class must win by a larger margin during
training. A class the client has no training node of (``n = 0``, margin ``+inf`` in the
authors' formula) is left out of the softmax, as the ``-inf`` logit it gets there does
(``absent_classes: exclude``, default); no client then pushes its logit down, which under
label skew lets it win on clients that never see it. ``count_one`` keeps such classes in the
softmax with the margin of a one-node class.
When all present classes have the same count ``n``, every logit moves by the same ``tau n^{-1/4}``
and ``L_cal`` equals plain cross-entropy (softmax is shift-invariant). Prediction uses the raw
logits; aggregation is the configured one (FedAvg by default). Default ``tau = 1`` (the
public implementations' default).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor

from fgl_ray.algorithms.base import ALGORITHMS, Algorithm, ClientContext

AbsentClasses = Literal["exclude", "count_one"]


def calibration_margins(class_counts: Tensor, tau: float, absent: AbsentClasses = "exclude") -> Tensor:
    """``delta_c = tau * n_c^{-1/4}``; for ``n_c = 0`` ``+inf`` (``exclude``) or ``tau`` (``count_one``)."""
    counts = class_counts.to(torch.float64)
    margins = tau * counts.clamp(min=1.0).pow(-0.25)
    if absent == "count_one":
        return margins
    return torch.where(counts > 0, margins, torch.full_like(margins, float("inf")))


def calibrated_cross_entropy(logits: Tensor, y: Tensor, margins: Tensor) -> Tensor:
    """Mean of ``-log softmax(z - delta)_y`` over rows; classes with an infinite margin drop out."""
    return F.cross_entropy(logits - margins.to(logits.dtype), y)


@ALGORITHMS.register("fedlc")
class FedLC(Algorithm):
    """Local logit calibration by the client's label distribution."""

    class Options(Algorithm.Options):
        tau: float = Field(1.0, ge=0.0, description="calibration strength tau")
        absent_classes: AbsentClasses = Field(
            "exclude", description="classes without local training nodes: exclude = leave the softmax (authors' "
                                   "code), count_one = stay in it with the margin of a one-node class")

    tasks = ("node-classification",)

    def setup_client(self, ctx: ClientContext) -> None:
        """The client's training label counts and margins, computed once."""
        counts = torch.bincount(ctx.task.train_labels(ctx.data).cpu(), minlength=ctx.num_classes)
        margins = calibration_margins(counts, self.options.tau, self.options.absent_classes)
        ctx.state["margins"] = margins.float().to(ctx.device)

    def loss(self, ctx: ClientContext, batch, logits: Tensor) -> Tensor:
        mask, y = ctx.task.labelled(batch)
        return calibrated_cross_entropy(logits[mask], y[mask], ctx.state["margins"])
