"""The algorithm contract: client-side and server-side hooks.

Client hooks run inside whichever process hosts the client (an actor, or the driver for the
in-process backend) and keep per-client state in ``ctx.state``. Server hooks run in the
server and keep their state on the ``server`` object they receive. The defaults implement
FedAvg, so an algorithm overrides only what it changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Sequence

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict
from torch import Tensor

from fgl_ray.messages import Broadcast, ClientUpdate
from fgl_ray.models import GraphModel
from fgl_ray.params import load_buffer_vector, load_trainable_vector
from fgl_ray.registry import Registry

if TYPE_CHECKING:
    from fgl_ray.config import ExperimentConfig
    from fgl_ray.runtime.server import ServerRuntime
    from fgl_ray.tasks import Task

ALGORITHMS: Registry[type["Algorithm"]] = Registry("algorithm")
#: The single-graph node backbones (an algorithm that rewires or augments the input graph takes these).
NODE_BACKBONES = ("gcn", "sage", "pmlp_gcn", "mlp")


@dataclass
class ClientContext:
    """Everything one virtual client owns; ``state`` persists across rounds.

    ``data`` is whatever ``task`` iterates (a node-labelled graph, a set of graphs, ...);
    ``num_classes`` is the federation's label count (statistics have that width).
    """

    client_id: int
    data: Any
    model: GraphModel
    optimizer: torch.optim.Optimizer
    config: "ExperimentConfig"
    num_classes: int
    device: torch.device
    task: "Task"
    state: dict[str, Any] = field(default_factory=dict)
    server_stats: dict[str, Tensor] = field(default_factory=dict)


class Algorithm:
    """Base class of every algorithm; subclasses set ``Options`` and override hooks.

    Hooks see the client's data only through its task (``ctx.task``): batches, the forward
    pass, which rows count and their labels. So an algorithm runs on every task it declares.
    """

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)

    #: The tasks this algorithm supports; the config refuses other pairs before Ray starts.
    tasks: ClassVar[tuple[str, ...]] = ("node-classification", "graph-classification", "link-prediction",
                                        "modality-matching", "modality-retrieval")
    #: The backbones it needs (``None``: any that serves the task).
    models: ClassVar[tuple[str, ...] | None] = None
    #: The dataset a run takes when it names none (``None``: the config's default).
    default_dataset: ClassVar[str | None] = None
    #: Why it needs each client's whole graph in one piece (``None``: it trains on whatever batches the
    #: task yields, so ``node_batching: neighbor`` serves it); the config refuses sampling with this reason.
    whole_graph: ClassVar[str | None] = None
    #: Keeps several server models (one per cluster of clients).
    clustered: ClassVar[bool] = False
    #: Backbone options its reading needs, per backbone (a config's own ``model_options`` win).
    model_defaults: ClassVar[dict[str, dict[str, Any]]] = {}

    #: Clients keep their own model between rounds instead of loading the server's (an
    #: algorithm whose options decide it sets the attribute per instance).
    personalized: bool = False

    def __init__(self, options: BaseModel, config: "ExperimentConfig") -> None:
        self.options = options
        self.config = config

    @classmethod
    def backbone_for(cls, usual: str) -> str:
        """The backbone a run takes when it names none: ``usual`` (the config's or a protocol's
        default) where this algorithm accepts it, else the first it needs."""
        return usual if cls.models is None or usual in cls.models else cls.models[0]

    @classmethod
    def never_split_advice(cls, options: dict) -> str:
        """What a clustered run that never split should check (logged at its end)."""
        return "its split criteria may not fit this data"

    @classmethod
    def check_task(cls, options: dict, task: str) -> None:
        """Raises ``ValueError`` for options the task cannot honour (run before Ray starts)."""

    # ------------------------------------------------------------------ client side
    def setup_client(self, ctx: ClientContext) -> None:
        """Runs once when the client is created (cache graph preprocessing here)."""

    def receive(self, ctx: ClientContext, broadcast: Broadcast) -> None:
        """Loads the server model assigned to this client and keeps the server statistics."""
        if not (self.personalized and ctx.state.get("initialised")):
            state = broadcast.model_for(ctx.client_id)
            load_trainable_vector(ctx.model, state.params)
            load_buffer_vector(ctx.model, state.buffers)
            ctx.state["initialised"] = True
        ctx.server_stats = dict(broadcast.stats)

    def local_train(self, ctx: ClientContext) -> dict[str, float]:
        """``local_epochs`` epochs over the task's training batches, one optimizer step on
        :meth:`objective` per batch; returns train metrics (the last loss, and the steps taken)."""
        ctx.model.train()
        task = ctx.task
        loss = torch.zeros(())
        steps = 0
        for _ in range(self.config.local_epochs):
            for batch in task.train_batches(ctx.data):
                ctx.optimizer.zero_grad(set_to_none=True)
                z = task.encode(ctx.model, batch)
                loss = self.objective(ctx, batch, z, task.classify(ctx.model, z, batch))
                loss.backward()
                ctx.optimizer.step()
                steps += 1
        return {"loss": float(loss.detach()), "steps": float(steps)}

    def objective(self, ctx: ClientContext, batch: Any, z: Tensor, logits: Tensor) -> Tensor:
        """The loss of one local step from the representations ``z`` and the ``logits`` of
        ``batch``; representation methods (prototypes, contrast) override this, the rest :meth:`loss`."""
        return self.loss(ctx, batch, logits)

    def loss(self, ctx: ClientContext, batch: Any, logits: Tensor) -> Tensor:
        """The local objective; the default is the task's supervised loss."""
        return ctx.task.loss(logits, batch)

    @torch.no_grad()
    def predict(self, ctx: ClientContext, batch: Any) -> Tensor:
        """Logits of ``batch`` used for evaluation."""
        ctx.model.eval()
        return ctx.task.classify(ctx.model, ctx.task.encode(ctx.model, batch), batch)

    def evaluation_metrics(self, ctx: ClientContext) -> dict[str, dict[str, float]]:
        """The algorithm's own diagnostics of the evaluated model, split -> name -> value (written
        as the client's rows beside the task's scores; none by default)."""
        return {}

    def num_samples(self, ctx: ClientContext) -> int:
        """The sample count sent with the update (the aggregation weight): training samples."""
        return ctx.task.num_samples(ctx.data)

    def upload(self, ctx: ClientContext) -> dict[str, Tensor]:
        """Statistics sent with the update; must match :meth:`declared_stats`."""
        return {}

    def declared_stats(self, num_classes: int, hidden: int, num_features: int) -> dict[str, tuple[int, ...]]:
        """Name -> shape of every statistic a client may upload (never node-count dependent); the
        arguments are the federation's class count, the backbone's representation width and the
        input feature width."""
        return {}

    # ------------------------------------------------------------------ server side
    def setup_server(self, server: "ServerRuntime") -> None:
        """Runs once when the server is created."""

    def select(self, server: "ServerRuntime", round_index: int, rng: np.random.Generator) -> list[int]:
        """The clients that train this round: a ``fraction_fit`` sample, at least one."""
        ids = server.client_ids
        count = max(1, int(round(self.config.fraction_fit * len(ids))))
        if count >= len(ids):
            return list(ids)
        return sorted(int(i) for i in rng.choice(ids, size=count, replace=False))

    def aggregate(self, server: "ServerRuntime", updates: Sequence[ClientUpdate]) -> None:
        """Folds the updates into the server models with the configured aggregator."""
        server.aggregate_with_aggregator(updates)

    def server_stats(self, server: "ServerRuntime") -> dict[str, Tensor]:
        """Statistics broadcast to clients next round."""
        return {}


def build_algorithm(name: str, options: dict, config: "ExperimentConfig") -> Algorithm:
    """Builds the registered algorithm ``name`` with validated ``options``."""
    cls = ALGORITHMS.get(name)
    return cls(cls.Options(**options), config)


#: :attr:`Algorithm.model_defaults` of the methods whose authors' backbones pass messages in
#: training: ``pmlp_gcn``, which trains as an MLP in its paper, propagates for them.
PMLP_PROPAGATES_IN_TRAINING: dict[str, dict[str, Any]] = {"pmlp_gcn": {"propagate_in_training": True}}


def backbone_options(config: "ExperimentConfig", dictated: dict | None = None) -> dict:
    """The backbone options a run of ``config`` takes: those its data ``dictated`` that the backbone
    accepts, then its algorithm's :attr:`Algorithm.model_defaults` for that backbone, then the config's own."""
    from fgl_ray.models.base import model_options

    accepted = model_options(config.model)
    from_data = {k: v for k, v in (dictated or {}).items() if k in accepted}
    return from_data | ALGORITHMS.get(config.algorithm).model_defaults.get(config.model, {}) | dict(config.model_options)
