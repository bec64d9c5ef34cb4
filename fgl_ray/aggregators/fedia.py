"""FedIA: importance-aware aggregation (Importance Masking + Contribution-Aware Momentum).

Implements Algorithm 1 / Eqs. 5-8 of the FedIA paper. With participants ``S`` this round,
descent-convention updates ``u_k = -(W_k - W) / eta`` and parameter groups ``G_m``:

* Eq. 5, Importance Masking (IM)::

      I_{G_m} = (1/|S|) sum_{k in S} |u_{k,G_m}|
      M_{G_m} = Top_{ceil(rho |G_m|)}(I_{G_m})        (a 0/1 mask), M = Concat_m M_{G_m}

  Exactly ``ceil(rho * |G_m|)`` coordinates are kept per group. ``rho`` is read as the decimal it
  prints as, so ``rho=0.07`` on 100 coordinates keeps 7 (not ``ceil(7.000000000000001) = 8``).
  Ties are broken deterministically: a stable descending sort keeps the lowest indices first.
* Eq. 6, client scores on the selected subspace::

      s_k = || u_k * M ||_2,      p_k = exp(s_k) / sum_{j in S} exp(s_j)
* Eq. 7, Contribution-Aware Momentum (CAM)::

      alpha~_k = beta alpha_k + (1 - beta) p_k,   alpha_k = alpha~_k / sum_{j in S} alpha~_j   (k in S)

  ``alpha`` is kept per client of the federation (initialised to ``1/|C|``); a client that does
  not participate keeps its value. ``alpha[i]`` belongs to ``client_ids[i]`` (the client id itself
  when the ids are ``0..N-1``). The authors' public code indexes the momentum by position in the
  participant list instead, which is wrong under partial participation; that is not reproduced.
  As Eq. 7 says, the *stored* alpha is the one renormalised over this round's participants, so
  under partial participation ``alpha`` sums to 1 over the last participants, not over all
  clients, and with ``beta=1`` the weights are uniform only while the participants' alphas are
  equal (always under full participation, where ``rho=1, beta=1`` is plain uniform averaging).
* Eq. 8::

      u = sum_{k in S} alpha_k (u_k * M),        W <- W - eta u

  Unselected coordinates get no update this round, exactly as in the paper.

Score scale (``score_scale``): Eq. 6 has no temperature, so the sharpness of ``p`` depends on the
units of ``u_k``. ``"update"`` (default, the paper) scores the descent update as sent, the sum of
the ``E`` local steps; ``"per_step"`` divides it by ``E`` (``local_epochs``: the local steps of a full-batch node task;
a task with several batches per epoch, or FedEPD's two stages, takes more) before the softmax, as
the authors' code does by uploading the gradient averaged over the local steps (its ``p`` is
flatter). Only the
scores change: the step of Eq. 8 always uses the updates as sent.

Readings: ``mask_scope="layer"`` (default) ranks within each parameter group as the paper's
equations do; ``mask_scope="global"`` ranks all ``P`` coordinates at once and keeps
``ceil(rho * P)``, as the authors' public code does (``group_by`` is then irrelevant). Groups are
each trainable tensor (``group_by="tensor"``, default, the paper's "trainable layer") or each
module, i.e. a layer's weight and bias together (``group_by="module"``).

Only trainable parameters pass through here; non-trainable floating-point buffers (e.g.
normalisation statistics) are averaged by the server with sample weights, not by FedIA.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Literal, Sequence

import torch
from pydantic import Field
from torch import Tensor

from fgl_ray.aggregators.base import AGGREGATORS, Aggregator
from fgl_ray.params import ParamLayout


def kept_count(rho: float, size: int) -> int:
    """``ceil(rho * size)`` with ``rho`` read as its shortest decimal form (no float round-up)."""
    return min(size, math.ceil(Fraction(repr(float(rho))) * size))


#: Columns read per block when summing ``|u|`` over clients: a block's temporary stays in cache,
#: which makes the column sums several times faster than one ``updates.abs()`` of the whole matrix.
COLUMN_BLOCK = 1 << 16


def column_abs_mean(updates: Tensor) -> Tensor:
    """``mean_k |u_k|`` of a ``[K, P]`` matrix, read block by block (no ``[K, P]`` temporary)."""
    importance = torch.empty(updates.shape[1], dtype=updates.dtype, device=updates.device)
    for start in range(0, updates.shape[1], COLUMN_BLOCK):
        block = slice(start, start + COLUMN_BLOCK)
        torch.sum(updates[:, block].abs(), dim=0, out=importance[block])
    return importance.div_(updates.shape[0])


class GroupTopK:
    """Per contiguous group of coordinates, the mask of its ``ceil(rho * |G|)`` largest entries.

    One selection per group finds its threshold (the k-th largest value); the comparison with the
    thresholds, and the tie-break that keeps the lowest indices among entries equal to a threshold,
    are vectorised over all coordinates. The result equals a stable descending sort per group.
    """

    def __init__(self, groups: Sequence[slice], rho: float) -> None:
        self.groups = [g for g in groups if g.stop > g.start]
        sizes = [g.stop - g.start for g in self.groups]
        self.sizes = torch.tensor(sizes)
        self.keep = torch.tensor([kept_count(rho, n) for n in sizes])
        self.starts = torch.tensor([g.start for g in self.groups])

    def __call__(self, importance: Tensor) -> Tensor:
        thresholds = torch.stack([torch.kthvalue(importance[g], n - k + 1).values
                                  for g, n, k in zip(self.groups, self.sizes.tolist(), self.keep.tolist())])
        threshold = torch.repeat_interleave(thresholds, self.sizes)
        above = importance > threshold
        tied = importance == threshold
        above_so_far = torch.cumsum(above, 0)       # running counts; a group's own count is a difference
        tied_so_far = torch.cumsum(tied, 0)
        above_in_group = above_so_far[self.starts + self.sizes - 1] - self._before_groups(above_so_far)
        tied_rank = tied_so_far - torch.repeat_interleave(self._before_groups(tied_so_far), self.sizes)  # 1-based
        room = torch.repeat_interleave(self.keep - above_in_group, self.sizes)
        return above | (tied & (tied_rank <= room))

    def _before_groups(self, running: Tensor) -> Tensor:
        """Per group, a running count's value just before the group's first coordinate."""
        return torch.where(self.starts > 0, running[self.starts - 1], 0)


@AGGREGATORS.register("fedia")
class FedIAAggregator(Aggregator):
    """Layer-wise top-rho importance mask plus momentum-smoothed softmax client weights."""

    class Options(Aggregator.Options):
        rho: float = Field(0.1, gt=0.0, le=1.0, description="fraction of coordinates kept per group")
        beta: float = Field(0.1, ge=0.0, le=1.0, description="momentum of the client weights alpha")
        mask_scope: Literal["layer", "global"] = Field(
            "layer", description="rank per parameter group (paper) or over all coordinates (authors' code)")
        group_by: Literal["tensor", "module"] = Field(
            "tensor", description="parameter groups: each trainable tensor, or each module")
        score_scale: Literal["update", "per_step"] = Field(
            "update", description="softmax scores of the update as sent (paper), or of the update divided by "
                                  "the local steps E (the authors' code uploads the mean gradient)")

    def __init__(self, options: "FedIAAggregator.Options", layout: ParamLayout, client_ids: Sequence[int],
                 local_steps: int = 1) -> None:
        super().__init__(options, layout, client_ids, local_steps)
        if not self.client_ids:
            raise ValueError("FedIA needs at least one client")
        self._position = {cid: i for i, cid in enumerate(self.client_ids)}
        if len(self._position) != len(self.client_ids):
            raise ValueError(f"client ids must be unique, got {self.client_ids}")
        groups = [slice(0, layout.size)] if options.mask_scope == "global" else layout.groups(by=options.group_by)
        self.top = GroupTopK(groups, options.rho)
        self.alpha = torch.full((len(self.client_ids),), 1.0 / len(self.client_ids), dtype=torch.float64)
        self.last_mask: Tensor | None = None
        self.last_scores: Tensor | None = None
        self.last_softmax: Tensor | None = None

    @property
    def last_density(self) -> float | None:
        """Fraction of coordinates the last round's mask kept."""
        if self.last_mask is None:
            return None
        return float(self.last_mask.double().mean())

    def alpha_of(self, client_id: int) -> float:
        """The current momentum weight of one client."""
        return float(self.alpha[self._position[client_id]])

    def mask(self, updates: Tensor) -> Tensor:
        """Eq. 5: the concatenated per-group top-rho mask of ``mean_k |u_k|`` (boolean ``[P]``)."""
        return self.top(column_abs_mean(updates))

    def aggregate(self, weights: Tensor, updates: Tensor, num_samples: Tensor, client_ids: Sequence[int],
                  lr: float) -> Tensor:
        if updates.dim() != 2 or updates.shape[0] != len(client_ids) or updates.shape[1] != weights.numel():
            raise ValueError(f"updates of shape {tuple(updates.shape)} do not match {len(client_ids)} clients "
                             f"and {weights.numel()} weights")
        unknown = [c for c in client_ids if c not in self._position]
        if unknown:
            raise ValueError(f"unknown client ids {unknown}; the federation has {self.client_ids}")
        index = torch.tensor([self._position[c] for c in client_ids], dtype=torch.long)

        mask = self.mask(updates)
        kept = updates.index_select(1, mask.nonzero().squeeze(1))
        scores = torch.linalg.vector_norm(kept.double(), dim=1)                     # Eq. 6
        if self.options.score_scale == "per_step":
            scores = scores / self.local_steps
        p = torch.softmax(scores, dim=0)
        smoothed = self.options.beta * self.alpha[index] + (1.0 - self.options.beta) * p  # Eq. 7
        total = smoothed.sum()
        alpha = smoothed / total if total > 0 else torch.full_like(smoothed, 1.0 / len(smoothed))
        self.alpha[index] = alpha

        step = (alpha.to(updates.dtype) @ updates) * mask                          # Eq. 8
        self.last_mask, self.last_scores, self.last_softmax, self.last_weights = mask, scores, p, alpha
        return weights - lr * step.to(weights.dtype)

    def state_dict(self) -> dict:
        """The persistent state: per-client alpha and the client ids it is indexed by."""
        return {"alpha": self.alpha.clone(), "client_ids": list(self.client_ids)}

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`; the client ids must match this federation's."""
        if list(state["client_ids"]) != self.client_ids:
            raise ValueError(f"state is for clients {list(state['client_ids'])}, not {self.client_ids}")
        alpha = torch.as_tensor(state["alpha"], dtype=torch.float64)
        if alpha.shape != self.alpha.shape:
            raise ValueError(f"alpha of shape {tuple(alpha.shape)}, expected {tuple(self.alpha.shape)}")
        self.alpha = alpha.clone()
