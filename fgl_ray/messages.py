"""Typed messages between server and clients.

Only model-sized tensors and statistics whose shapes do not depend on the number of nodes
cross the actor boundary; :func:`check_update` enforces that.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
from torch import Tensor

GLOBAL = "global"
CLUSTER_PREFIX = "cluster-"
PERSONAL_PREFIX = "client-"


def cluster_key(number: int) -> str:
    """The server-model key of cluster ``number`` (cluster 0 is the ``global`` model)."""
    return GLOBAL if number == 0 else f"{CLUSTER_PREFIX}{number}"


def cluster_number(key: str) -> int:
    """The inverse of :func:`cluster_key`; other keys raise ``ValueError``."""
    if key == GLOBAL:
        return 0
    if not key.startswith(CLUSTER_PREFIX):
        raise ValueError(f"model key {key!r} is neither {GLOBAL!r} nor {CLUSTER_PREFIX}<n>")
    return int(key.removeprefix(CLUSTER_PREFIX))


def personal_key(client_id: int) -> str:
    """The server-model key of the model the server keeps for client ``client_id`` alone."""
    return f"{PERSONAL_PREFIX}{client_id}"


def is_cluster_key(key: str) -> bool:
    """Whether ``key`` names the global model or a cluster's (not a client's personal model)."""
    return key == GLOBAL or key.startswith(CLUSTER_PREFIX)


class PayloadError(ValueError):
    """A client update whose payload breaks the declared contract."""


@dataclass(frozen=True)
class ModelState:
    """Flat trainable parameters and flat floating-point buffers of one model."""

    params: Tensor
    buffers: Tensor


@dataclass(frozen=True)
class Broadcast:
    """What the server sends at the start of a round (put in the object store once).

    Attributes:
        round: the round this broadcast opens.
        models: server-held models by key (``"global"``, one per cluster, or one per client).
        assignment: client id -> model key; clients not listed take ``"global"``.
        stats: server statistics (prototype banks, ...), shapes independent of node counts.
        instructions: per-client instructions (cluster id, ...).
    """

    round: int
    models: Mapping[str, ModelState]
    assignment: Mapping[int, str] = field(default_factory=dict)
    stats: Mapping[str, Tensor] = field(default_factory=dict)
    instructions: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)

    def model_key(self, client_id: int) -> str:
        return self.assignment.get(client_id, GLOBAL)

    def model_for(self, client_id: int) -> ModelState:
        return self.models[self.model_key(client_id)]


@dataclass
class ClientUpdate:
    """One client's answer to a training round.

    ``update`` follows the descent convention of the FedIA paper, Section 3.1:
    ``u_k = -(W_k - W) / lr``, so the server step is ``W <- W - lr * u``.
    """

    client_id: int
    model_key: str
    num_samples: int
    update: Tensor
    buffers: Tensor
    stats: dict[str, Tensor] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class ClientEvaluation:
    """The task's additive statistics per split (``{"confusion": C x C counts}`` for
    classification), which pool over clients by summation, and the algorithm's own per-split
    diagnostics (``metrics``: split -> name -> value; written as the client's rows, not pooled)."""

    client_id: int
    stats: dict[str, dict[str, np.ndarray]]
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass
class ClientFailure:
    """A client that raised, timed out or sent a bad payload in one phase of a round."""

    client_id: int
    phase: str
    reason: str


def check_update(update: ClientUpdate, num_params: int, num_buffers: int,
                 declared: Mapping[str, tuple[int, ...]]) -> None:
    """Raises :class:`PayloadError` unless the update matches the model and declared stats."""
    if update.update.shape != (num_params,):
        raise PayloadError(f"client {update.client_id}: update has shape {tuple(update.update.shape)}, "
                           f"expected ({num_params},)")
    if update.buffers.shape != (num_buffers,):
        raise PayloadError(f"client {update.client_id}: buffers have shape {tuple(update.buffers.shape)}, "
                           f"expected ({num_buffers},)")
    if not bool(update.update.isfinite().all()):
        raise PayloadError(f"client {update.client_id}: update holds NaN or infinite values")
    undeclared = set(update.stats) - set(declared)
    if undeclared:
        raise PayloadError(f"client {update.client_id}: undeclared statistics {sorted(undeclared)}")
    for name, tensor in update.stats.items():
        if tuple(tensor.shape) != tuple(declared[name]):
            raise PayloadError(f"client {update.client_id}: statistic {name!r} has shape {tuple(tensor.shape)}, "
                               f"declared {tuple(declared[name])} (statistics must not depend on node counts)")
    if update.num_samples < 0:
        raise PayloadError(f"client {update.client_id}: negative sample count {update.num_samples}")
