"""The server side of one round: plan, broadcast, collect, aggregate, evaluate.

The same class runs in the driver (in-process backend) and inside ``ServerActor`` (Ray
backend); only the :class:`ClientPool` that reaches the clients differs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Protocol, Sequence

import numpy as np
import torch

from fgl_ray.aggregators import build_aggregator
from fgl_ray.aggregators.base import sample_weights
from fgl_ray.aggregators.privacy import aggregate_noise, clip_update
from fgl_ray.algorithms import build_algorithm
from fgl_ray.config import ExperimentConfig
from fgl_ray.diagnostics import round_diagnostics
from fgl_ray.messages import (GLOBAL, Broadcast, ClientEvaluation, ClientFailure, ClientUpdate, ModelState,
                              PayloadError, check_update)
from fgl_ray.params import ParamLayout, buffer_vector, trainable_vector
from fgl_ray.runtime.checkpoint import from_bytes, object_state, to_bytes
from fgl_ray.runtime.client import build_config_model
from fgl_ray.runtime.seeding import derive_seed


class ClientPool(Protocol):
    """Reaches the clients: in-process objects or Ray actors."""

    def train(self, broadcast: Broadcast, client_ids: Sequence[int],
              timeout_s: float) -> list[ClientUpdate | ClientFailure]: ...

    def evaluate(self, broadcast: Broadcast, client_ids: Sequence[int],
                 timeout_s: float) -> list[ClientEvaluation | ClientFailure]: ...


@dataclass
class RoundResult:
    """What one round produced, sent back to the driver for recording."""

    round: int
    selected: list[int]
    updates: dict[int, dict[str, float]]
    evaluations: list[ClientEvaluation]
    failures: list[ClientFailure]
    aggregated: bool
    seconds: float
    timings: dict[str, float] = field(default_factory=dict)
    diagnostics: dict[str, np.ndarray] = field(default_factory=dict)
    aggregation_weights: dict[int, float] = field(default_factory=dict)
    assignment: dict[int, str] = field(default_factory=dict)


class ServerRuntime:
    """Holds the server models and algorithm state; runs rounds against a client pool."""

    def __init__(self, config: ExperimentConfig, pool: ClientPool, client_ids: Sequence[int], num_features: int,
                 num_classes: int) -> None:
        self.config = config
        self.pool = pool
        self.client_ids = sorted(client_ids)
        self.num_features = num_features
        self.num_classes = num_classes
        torch.manual_seed(derive_seed(config.seed, -1))
        model = build_config_model(config, num_features, num_classes)
        self.layout = ParamLayout.of(model)
        self.models: dict[str, ModelState] = {GLOBAL: ModelState(trainable_vector(model), buffer_vector(model))}
        self.assignment: dict[int, str] = {}
        self.instructions: dict[int, dict] = {}
        self.algorithm = build_algorithm(config.algorithm, config.algorithm_options, config)
        self.aggregator = build_aggregator(config.aggregator, config.aggregator_options, self.layout, self.client_ids,
                                           config.local_epochs)
        self.aggregation_weights: dict[int, float] = {}
        self.declared = self.algorithm.declared_stats(num_classes, model.representation_dim, num_features)
        self.rng = np.random.default_rng(derive_seed(config.seed, -2))
        self.round_index = -1
        self.algorithm.setup_server(self)
        self._broadcast: Broadcast | None = None

    # ------------------------------------------------------------------ one round
    def run_round(self, round_index: int) -> RoundResult:
        """Trains the selected clients, aggregates, and evaluates when due."""
        started = time.perf_counter()
        put_before = getattr(self.pool, "broadcast_seconds", 0.0)
        self.round_index = round_index
        selected = self.algorithm.select(self, round_index, self.rng)
        answers = self.pool.train(self.broadcast(round_index), selected, self.config.round_timeout_s)
        trained = time.perf_counter()
        train_put = getattr(self.pool, "broadcast_seconds", 0.0) - put_before
        updates, failures = self._accept(answers)
        diagnostics = self._diagnostics(updates) if self.config.diagnostics and len(updates) > 1 else {}
        aggregated = len(updates) >= self.config.min_clients
        self.aggregation_weights = {}
        if aggregated:
            self.algorithm.aggregate(self, updates)
            self._broadcast = None
        merged = time.perf_counter()
        evaluations: list[ClientEvaluation] = []
        if self.evaluation_due(round_index):
            answers = self.pool.evaluate(self.broadcast(round_index + 1), self.client_ids, self.config.round_timeout_s)
            evaluations = sorted((a for a in answers if isinstance(a, ClientEvaluation)), key=lambda e: e.client_id)
            failures += [a for a in answers if isinstance(a, ClientFailure)]
        finished = time.perf_counter()
        return RoundResult(
            round=round_index, selected=list(selected), updates={u.client_id: u.metrics for u in updates},
            evaluations=evaluations, failures=failures, aggregated=aggregated, seconds=finished - started,
            timings={"train_seconds": trained - started, "evaluate_seconds": finished - merged,
                     "aggregate_seconds": merged - trained, "broadcast_seconds": train_put},
            diagnostics=diagnostics, aggregation_weights=dict(self.aggregation_weights),
            assignment=dict(self.assignment),
        )

    def _diagnostics(self, updates: Sequence[ClientUpdate]) -> dict[str, np.ndarray]:
        """FedIA Section 3.2 diagnostics over this round's accepted updates."""
        stacked = torch.stack([u.update for u in updates])
        weights = sample_weights(torch.tensor([u.num_samples for u in updates], dtype=torch.float64))
        found = round_diagnostics(stacked, weights, self.config.diagnostics_fraction)
        return {name: value.numpy() for name, value in found.items()} | {
            "client_ids": np.array([u.client_id for u in updates])}

    def evaluation_due(self, round_index: int) -> bool:
        last = round_index == self.config.rounds - 1
        return last or (round_index + 1) % self.config.eval_every == 0

    def broadcast(self, round_index: int) -> Broadcast:
        """The broadcast opening ``round_index``; built once per change of server state."""
        if self._broadcast is None or self._broadcast.round != round_index:
            self._broadcast = Broadcast(
                round=round_index, models=dict(self.models), assignment=dict(self.assignment),
                stats=self.algorithm.server_stats(self), instructions=dict(self.instructions),
            )
        return self._broadcast

    def _accept(self, answers) -> tuple[list[ClientUpdate], list[ClientFailure]]:
        updates, failures = [], []
        for answer in answers:
            if isinstance(answer, ClientFailure):
                failures.append(answer)
                continue
            try:
                check_update(answer, self.layout.size, self.models[answer.model_key].buffers.numel(), self.declared)
            except (PayloadError, KeyError) as error:
                failures.append(ClientFailure(answer.client_id, "payload", str(error)))
                continue
            if self.config.clip_norm is not None:
                clipped, scaled = clip_update(answer.update, self.config.clip_norm)
                answer = replace(answer, update=clipped, metrics=answer.metrics | {"clipped": float(scaled)})
            updates.append(answer)
        updates.sort(key=lambda u: u.client_id)
        return updates, failures

    # ------------------------------------------------------------------ checkpoints
    _STATELESS = ("config", "pool", "layout", "_broadcast")

    def state_bytes(self) -> bytes:
        """Everything a resumed server needs: server models and assignment, algorithm and aggregator
        objects with their state, the sampling RNG, and this process's torch RNG."""
        return to_bytes({"attributes": object_state(self, self._STATELESS), "torch_rng": torch.get_rng_state()})

    def load_state_bytes(self, blob: bytes) -> None:
        """Restores what :meth:`state_bytes` saved."""
        saved = from_bytes(blob)
        vars(self).update(saved["attributes"])
        torch.set_rng_state(saved["torch_rng"])
        self._broadcast = None

    # ------------------------------------------------------------------ aggregation helpers
    def aggregate_with_aggregator(self, updates: Sequence[ClientUpdate]) -> None:
        """Applies the aggregator per server model, and the sample-weighted mean to buffers; records
        the weight each client's update received in ``aggregation_weights``."""
        for key in sorted({u.model_key for u in updates}):
            group = [u for u in updates if u.model_key == key]
            counts = torch.tensor([u.num_samples for u in group], dtype=torch.float64)
            self.models[key] = self.combine(key, self.models[key], group, counts)
            weights = self.aggregator.last_weights
            if weights is not None:
                self.aggregation_weights |= {u.client_id: float(w) for u, w in zip(group, weights)}

    def combine(self, key: str, current: ModelState, group: Sequence[ClientUpdate], counts: torch.Tensor) -> ModelState:
        """Server model ``key`` after the aggregator folds ``group``'s updates (taken from
        ``current``) with weights proportional to ``counts``, plus the DP noise when configured;
        buffers become the ``counts``-weighted mean of the group's."""
        weights = sample_weights(counts)
        params = self.aggregator.aggregate(current.params, torch.stack([u.update for u in group]), counts,
                                           [u.client_id for u in group], self.config.lr)
        if self.config.noise_multiplier > 0:
            used = self.aggregator.last_weights
            largest = float(torch.as_tensor(used if used is not None else weights).max())
            std = self.config.noise_multiplier * self.config.clip_norm * largest
            seed = derive_seed(self.config.seed, -3, self.round_index, sorted(self.models).index(key))
            params = params - self.config.lr * aggregate_noise(params.numel(), std, seed, params.dtype)
        buffers = current.buffers
        if buffers.numel():
            buffers = weights.to(buffers.dtype) @ torch.stack([u.buffers for u in group])
        return ModelState(params.to(current.params.dtype), buffers)

    def global_weights(self) -> torch.Tensor:
        return self.models[GLOBAL].params

    def server_models(self) -> tuple[dict[int, str], dict[str, torch.Tensor]]:
        """The client -> model-key assignment and every server model's shared weights."""
        return dict(self.assignment), {key: state.params for key, state in self.models.items()}
