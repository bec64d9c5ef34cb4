"""One virtual client: its private data (as its task holds it), model, optimizer and algorithm state."""

from __future__ import annotations

import os
import time

import torch

from fgl_ray.algorithms import ClientContext, build_algorithm
from fgl_ray.algorithms.base import backbone_options
from fgl_ray.config import ExperimentConfig
from fgl_ray.data.types import ClientGraph
from fgl_ray.messages import Broadcast, ClientEvaluation, ClientUpdate
from fgl_ray.models import build_model
from fgl_ray.params import buffer_vector, trainable_vector
from fgl_ray.runtime.checkpoint import from_bytes, object_state, to_bytes
from fgl_ray.runtime.seeding import derive_seed
from fgl_ray.tasks import build_task


#: The seed stream of a client's evaluation (neighbour-sampled batches), apart from its training's.
EVALUATION_STREAM = 7


class SimulatedClientFailure(RuntimeError):
    """Raised by a client that the config's ``failures`` plan makes fail this round."""


def build_config_model(config: ExperimentConfig, num_features: int, num_classes: int) -> torch.nn.Module:
    """The backbone the config names, with its options and those its algorithm sets for it."""
    return build_model(config.model, num_features, num_classes, config.hidden, config.num_layers, config.dropout,
                       **backbone_options(config))


def build_optimizer(config: ExperimentConfig, model: torch.nn.Module) -> torch.optim.Optimizer:
    """The local optimizer named by the config."""
    params = [p for p in model.parameters() if p.requires_grad]
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=config.lr, weight_decay=config.weight_decay)
    return torch.optim.SGD(params, lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay)


class ClientRuntime:
    """Hosts one client wherever it lives (an actor or the driver process)."""

    def __init__(self, graph: ClientGraph, config: ExperimentConfig, num_features: int, num_classes: int,
                 device: torch.device | str = "cpu") -> None:
        self.client_id = graph.client_id
        self.domain = graph.domain
        self.config = config
        device = torch.device(device)
        self.task = build_task(config)
        # parameters a model does not share keep this initialisation: seed it by client, not by process
        torch.manual_seed(derive_seed(config.seed, -3, graph.client_id))
        model = build_config_model(config, *self.task.model_dims(graph.data, num_features, num_classes)).to(device)
        self.algorithm = build_algorithm(config.algorithm, config.algorithm_options, config)
        self.ctx = ClientContext(
            client_id=graph.client_id, data=self.task.prepare(graph, model, device), model=model,
            optimizer=build_optimizer(config, model), config=config, num_classes=num_classes, device=device,
            task=self.task,
        )
        self.algorithm.setup_client(self.ctx)
        self.trained = False

    def train(self, broadcast: Broadcast) -> ClientUpdate:
        """Receives the server model, trains locally and returns the update.

        With ``optimizer_state: reset`` (default) the local optimizer starts every round with
        fresh state (no momentum buffers or Adam moments from the client's previous round), so
        the update depends only on the received model, the data and the seed.
        """
        faults = [f for f in self.config.faults if f.applies(broadcast.round, self.client_id)]
        if self.client_id in self.config.failures.get(broadcast.round, ()) or any(f.kind == "raise" for f in faults):
            raise SimulatedClientFailure(f"client {self.client_id} fails in round {broadcast.round} (simulated fault)")
        started = time.perf_counter()
        for fault in faults:
            if fault.kind == "delay":
                time.sleep(fault.seconds)
            elif fault.kind == "kill":   # the client actor's process ends (validated: Ray backend only)
                os._exit(1)
        torch.manual_seed(derive_seed(self.config.seed, broadcast.round, self.client_id))
        if self.config.optimizer_state == "reset":
            self.ctx.optimizer = build_optimizer(self.config, self.ctx.model)
        self.algorithm.receive(self.ctx, broadcast)
        before = trainable_vector(self.ctx.model)
        metrics = self.algorithm.local_train(self.ctx)
        after = trainable_vector(self.ctx.model)
        metrics["seconds"] = time.perf_counter() - started
        self.trained = True
        update = ((before - after) / self.config.lr).cpu()
        for fault in faults:
            if fault.kind == "scale":
                update = update * fault.factor
            elif fault.kind == "nan":
                update = torch.full_like(update, float("nan"))
        return ClientUpdate(
            client_id=self.client_id,
            model_key=broadcast.model_key(self.client_id),
            num_samples=self.algorithm.num_samples(self.ctx),
            update=update,
            buffers=buffer_vector(self.ctx.model),
            stats={k: v.detach().cpu() for k, v in self.algorithm.upload(self.ctx).items()},
            metrics=metrics,
        )

    def evaluate(self, broadcast: Broadcast) -> ClientEvaluation:
        """The task's statistics on every split of the model this client would use now.

        ``evaluate: global`` loads the broadcast (aggregated) model first; ``local`` scores the
        client's model as its last local training left it (the broadcast model before it ever trained).
        """
        if self.config.evaluate == "global" or not self.trained:
            self.algorithm.receive(self.ctx, broadcast)
        with torch.random.fork_rng(devices=[]):   # sampled evaluation draws from its own seed, no one else's
            torch.manual_seed(derive_seed(self.config.seed, broadcast.round, self.client_id, EVALUATION_STREAM))
            stats = self.task.evaluate(lambda batch: self.algorithm.predict(self.ctx, batch), self.ctx.data,
                                       self.ctx.num_classes)
        return ClientEvaluation(client_id=self.client_id, stats=stats,
                                metrics=self.algorithm.evaluation_metrics(self.ctx))

    def state_bytes(self) -> bytes:
        """This client's persistent state: model, optimizer, algorithm state (its object and
        ``ctx.state``), the last server statistics; its data is rebuilt from the partition."""
        ctx = self.ctx
        return to_bytes({"model": ctx.model.state_dict(), "optimizer": ctx.optimizer.state_dict(),
                         "state": ctx.state, "server_stats": ctx.server_stats, "trained": self.trained,
                         "algorithm": object_state(self.algorithm, ("config",))})

    def load_state_bytes(self, blob: bytes) -> None:
        """Restores what :meth:`state_bytes` saved."""
        saved = from_bytes(blob, self.ctx.device)
        self.ctx.model.load_state_dict(saved["model"])
        self.ctx.optimizer.load_state_dict(saved["optimizer"])
        self.ctx.state, self.ctx.server_stats = saved["state"], saved["server_stats"]
        self.trained = saved["trained"]
        vars(self.algorithm).update(saved["algorithm"])

    def weights(self) -> torch.Tensor:
        """The client model's current trainable weights (flat, on CPU)."""
        return trainable_vector(self.ctx.model).cpu()
