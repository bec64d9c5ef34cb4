"""MOON (Li, He & Song, "Model-Contrastive Federated Learning", CVPR 2021).

Local objective (Eqs. 2-3 of the paper), over the client's training samples ``i`` (nodes or
graphs, the rows of the task's ``encode`` that count):

    l_con = -log( exp(sim(z_i, z_glob_i)/tau) / (exp(sim(z_i, z_glob_i)/tau) + exp(sim(z_i, z_prev_i)/tau)) )
    loss  = CE + mu * mean_i l_con

``z`` (the task's ``encode``) is the representation of the model being trained,
``z_glob`` that of the global model received this round and ``z_prev`` that of this client's
own model at the end of its previous local training; ``sim`` is cosine similarity.
Defaults ``mu = 1``, ``tau = 0.5`` (OpenFGL).

Choices:
    * First participation: there is no previous local model, so the negative term is
      omitted. As in the authors' code (the pool of previous models is empty in round 0 and
      the softmax over the single positive column is identically zero), the contrastive term
      vanishes and the first round is plain cross-entropy. (Using the global model as the
      negative would give the constant ``log 2`` with zero gradient: the same training.)
    * ``z_glob`` and ``z_prev`` come from frozen copies, computed under ``no_grad`` in the
      training phase with dropout off
      (:func:`~fgl_ray.algorithms.prototypes.training_phase`): deterministic like the
      authors' eval-mode copies, and in the same space as ``z`` also for PMLP-GCN, whose
      evaluation phase propagates while its training phase does not. The copies are built
      once in :meth:`setup_client`.
    * The previous local model is kept as a frozen copy in ``ctx.state``; it persists while
      the client is not sampled, so under partial participation the negative is the client's
      model from its last participation. Parameters a model does not share (GIN's embedding
      and readout) are the client's own in both copies.
    * Targets are computed per batch (once for the full-batch node task, per mini-batch of
      graphs), as the authors' code does per mini-batch.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor

from fgl_ray.algorithms.base import ALGORITHMS, Algorithm, ClientContext
from fgl_ray.algorithms.prototypes import training_phase
from fgl_ray.messages import Broadcast


def model_contrastive_loss(z: Tensor, z_glob: Tensor, z_prev: Tensor | None, temperature: float) -> Tensor:
    """MOON's ``l_con`` averaged over rows; zero when there is no previous representation.

    Args:
        z: representations of the model being trained ``[n, d]``.
        z_glob: the global model's representations ``[n, d]`` (positive pair).
        z_prev: the previous local model's representations ``[n, d]`` (negative) or ``None``.
        temperature: ``tau``.
    """
    if z_prev is None or z.shape[0] == 0:
        return z.new_zeros(())
    logits = torch.stack([F.cosine_similarity(z, z_glob, dim=-1), F.cosine_similarity(z, z_prev, dim=-1)], dim=1)
    target = torch.zeros(z.shape[0], dtype=torch.long, device=z.device)
    return F.cross_entropy(logits / temperature, target)


def _frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy only ever run under ``no_grad`` (its parameters keep ``requires_grad`` so that
    the flat-vector helpers, which select trainable parameters, still apply)."""
    return copy.deepcopy(model)


@ALGORITHMS.register("moon")
class Moon(Algorithm):
    """Cross-entropy plus MOON's model-contrastive term on encoder representations."""

    class Options(Algorithm.Options):
        mu: float = Field(1.0, ge=0.0, description="weight mu of the model-contrastive loss")
        temperature: float = Field(0.5, gt=0.0, description="temperature tau")

    def setup_client(self, ctx: ClientContext) -> None:
        """Builds the frozen global and previous-model copies once."""
        ctx.state["moon_global_model"] = _frozen_copy(ctx.model)
        ctx.state["moon_previous_model"] = _frozen_copy(ctx.model)
        ctx.state["moon_has_previous"] = False  # the previous copy holds this client's last trained model

    def receive(self, ctx: ClientContext, broadcast: Broadcast) -> None:
        """Loads the global model into the client model, then copies it into the frozen global copy
        (parameters a model does not share are the client's own in both)."""
        super().receive(ctx, broadcast)
        ctx.state["moon_global_model"].load_state_dict(ctx.model.state_dict())

    @torch.no_grad()
    def _targets(self, ctx: ClientContext, batch) -> tuple[Tensor, Tensor | None]:
        """``z_glob`` and ``z_prev`` (``None`` before the first local training) on the batch's
        counted rows; computed once per batch object (the full-batch node task reuses them)."""
        cached = ctx.state.get("moon_targets")
        if cached is not None and cached[0] is batch:
            return cached[1]
        task, (mask, _) = ctx.task, ctx.task.labelled(batch)
        with training_phase(ctx.state["moon_global_model"]) as model:
            z_glob = task.encode(model, batch)[mask]
        z_prev = None
        if ctx.state["moon_has_previous"]:
            with training_phase(ctx.state["moon_previous_model"]) as model:
                z_prev = task.encode(model, batch)[mask]
        ctx.state["moon_targets"] = (batch, (z_glob, z_prev))
        return z_glob, z_prev

    def objective(self, ctx: ClientContext, batch, z: Tensor, logits: Tensor) -> Tensor:
        """``CE + mu * l_con`` against this round's frozen global and previous models."""
        z_glob, z_prev = self._targets(ctx, batch)
        mask, _ = ctx.task.labelled(batch)
        con = model_contrastive_loss(z[mask], z_glob, z_prev, self.options.temperature)
        return self.loss(ctx, batch, logits) + self.options.mu * con

    def local_train(self, ctx: ClientContext) -> dict[str, float]:
        """Trains, then remembers the trained model as next round's negative."""
        metrics = super().local_train(ctx)
        ctx.state.pop("moon_targets", None)
        ctx.state["moon_previous_model"].load_state_dict(ctx.model.state_dict())
        ctx.state["moon_has_previous"] = True
        return metrics
