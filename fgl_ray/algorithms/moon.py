"""MOON (Li, He & Song, "Model-Contrastive Federated Learning", CVPR 2021).

Local objective (Eqs. 2-3 of the paper), over the client's training nodes ``i``:

    l_con = -log( exp(sim(z_i, z_glob_i)/tau) / (exp(sim(z_i, z_glob_i)/tau) + exp(sim(z_i, z_prev_i)/tau)) )
    loss  = CE + mu * mean_i l_con

``z = model.encode(x, edge_index)`` is the representation of the model being trained,
``z_glob`` that of the global model received this round and ``z_prev`` that of this client's
own model at the end of its previous local training; ``sim`` is cosine similarity.
Defaults ``mu = 1``, ``tau = 0.5`` (OpenFGL).

Choices:
    * First participation: there is no previous local model, so the negative term is
      omitted. As in the authors' code (the pool of previous models is empty in round 0 and
      the softmax over the single positive column is identically zero), the contrastive term
      vanishes and the first round is plain cross-entropy. (Using the global model as the
      negative would give the constant ``log 2`` with zero gradient: the same training.)
    * ``z_glob`` and ``z_prev`` come from frozen copies, computed once per round under
      ``no_grad`` in the training phase with dropout off
      (:func:`~fgl_ray.algorithms.prototypes.training_phase`): deterministic like the
      authors' eval-mode copies, and in the same space as ``z`` also for PMLP-GCN, whose
      evaluation phase propagates while its training phase does not. The copies are built
      once in :meth:`setup_client`.
    * The previous local model is kept as a detached weight vector in ``ctx.state``; it
      persists while the client is not sampled, so under partial participation the negative
      is the client's model from its last participation.
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
from fgl_ray.params import buffer_vector, load_buffer_vector, load_trainable_vector, trainable_vector


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
        ctx.state["moon_previous"] = None  # (params, buffers) after this client's last local training

    def receive(self, ctx: ClientContext, broadcast: Broadcast) -> None:
        """Loads the global model into the client model and into the frozen global copy."""
        super().receive(ctx, broadcast)
        state = broadcast.model_for(ctx.client_id)
        # clone: the copy must not share storage with the broadcast (nor with the trained model)
        load_trainable_vector(ctx.state["moon_global_model"], state.params.clone())
        load_buffer_vector(ctx.state["moon_global_model"], state.buffers)

    @torch.no_grad()
    def _targets(self, ctx: ClientContext) -> tuple[Tensor, Tensor | None]:
        """``z_glob`` and ``z_prev`` (``None`` before the first local training) on training nodes."""
        data, mask = ctx.data, ctx.data.train_mask
        with training_phase(ctx.state["moon_global_model"]) as model:
            z_glob = model.encode(data.x, data.edge_index)[mask]
        previous = ctx.state.get("moon_previous")
        if previous is None:
            return z_glob, None
        frame = ctx.state["moon_previous_model"]
        load_trainable_vector(frame, previous[0].clone())
        load_buffer_vector(frame, previous[1])
        with training_phase(frame) as model:
            return z_glob, model.encode(data.x, data.edge_index)[mask]

    def objective(self, ctx: ClientContext, z: Tensor, logits: Tensor) -> Tensor:
        """``CE + mu * l_con`` against this round's targets (see :meth:`local_train`)."""
        z_glob, z_prev = ctx.state["moon_targets"]
        mask = ctx.data.train_mask
        con = model_contrastive_loss(z[mask], z_glob, z_prev, self.options.temperature)
        return self.loss(ctx, logits) + self.options.mu * con

    def local_train(self, ctx: ClientContext) -> dict[str, float]:
        """Fixes the round's targets, trains, then remembers the trained weights."""
        ctx.state["moon_targets"] = self._targets(ctx)
        metrics = super().local_train(ctx)
        ctx.state["moon_previous"] = (trainable_vector(ctx.model), buffer_vector(ctx.model))
        del ctx.state["moon_targets"]
        return metrics
