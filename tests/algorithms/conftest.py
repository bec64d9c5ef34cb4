"""Tiny hand-built federations for the algorithm tests (no dataset, no Ray; milliseconds)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch_geometric.data import Data

from fgl_ray.algorithms import Algorithm, ClientContext, build_algorithm
from fgl_ray.config import load_config
from fgl_ray.data.types import ClientGraph, FederatedGraphData
from fgl_ray.messages import GLOBAL, Broadcast, ClientUpdate, ModelState, check_update
from fgl_ray.params import buffer_vector, trainable_vector
from fgl_ray.tasks import build_task

NUM_FEATURES = 6
NUM_CLASSES = 3
HIDDEN = 8
#: Classes present in each client's graph: client 2 lacks class 0.
CLIENT_CLASSES = {0: (0, 1, 2), 1: (0, 1, 2), 2: (1, 2)}


def ring_graph(client_id: int, classes=(0, 1, 2), n: int = 24) -> ClientGraph:
    """Random features, a ring (both directions), every class in ``classes`` among the training nodes."""
    gen = torch.Generator().manual_seed(100 + client_id)
    x = torch.randn(n, NUM_FEATURES, generator=gen)
    src = torch.arange(n)
    dst = (src + 1) % n
    edge_index = torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], dim=1)
    pool = torch.tensor(classes)
    order = torch.randperm(n, generator=gen)
    y = torch.empty(n, dtype=torch.long)
    y[order] = pool[torch.arange(n) % len(pool)]
    masks = {name: torch.zeros(n, dtype=torch.bool) for name in ("train", "val", "test")}
    masks["train"][order[: n // 2]] = True          # order[:n//2] cycles through every class of the pool
    masks["val"][order[n // 2: 3 * n // 4]] = True
    masks["test"][order[3 * n // 4:]] = True
    data = Data(x=x, edge_index=edge_index, y=y, train_mask=masks["train"], val_mask=masks["val"],
                test_mask=masks["test"])
    return ClientGraph(client_id=client_id, domain=f"d{client_id}", data=data)


@pytest.fixture
def tiny_data() -> FederatedGraphData:
    """Three clients; client 2 has no node of class 0."""
    clients = [ring_graph(cid, classes) for cid, classes in CLIENT_CLASSES.items()]
    return FederatedGraphData(clients=clients, domains=[c.domain for c in clients], num_features=NUM_FEATURES,
                              num_classes=NUM_CLASSES)


@pytest.fixture
def make_config(tmp_path):
    """A validated config for the tiny federation; ``make_config(algorithm, **changes)``."""
    def make(algorithm: str = "fedavg", **changes):
        values = dict(dataset="synthetic", hidden=HIDDEN, rounds=3, local_epochs=2, torch_threads=1, lr=0.05,
                      backend="local", output_dir=tmp_path, algorithm=algorithm)
        return load_config(values | changes)
    return make


@pytest.fixture
def make_context():
    """``make_context(config, graph)`` -> ``(algorithm, ctx)`` built as ``ClientRuntime`` builds them."""
    def make(config, graph: ClientGraph | None = None, seed: int = 0):
        from fgl_ray.runtime.client import build_config_model

        graph = graph or ring_graph(0)
        torch.manual_seed(seed)
        model = build_config_model(config, NUM_FEATURES, NUM_CLASSES)
        algorithm = build_algorithm(config.algorithm, config.algorithm_options, config)
        ctx = ClientContext(client_id=graph.client_id, data=graph.data, model=model,
                            optimizer=torch.optim.SGD(model.parameters(), lr=config.lr), config=config,
                            num_classes=NUM_CLASSES, device=torch.device("cpu"), task=build_task(config))
        algorithm.setup_client(ctx)
        return algorithm, ctx
    return make


@pytest.fixture
def uploads_by_size(make_context):
    """``uploads_by_size(config)`` -> the statistics one client uploads on a 24- and a 240-node ring,
    each checked against the algorithm's declared shapes (which must not depend on the node count)."""
    def uploads(config) -> list[dict[str, torch.Tensor]]:
        found = []
        for n in (24, 240):
            algorithm, ctx = make_context(config, ring_graph(0, n=n))
            stats = algorithm.upload(ctx)
            declared = algorithm.declared_stats(NUM_CLASSES, config.hidden, NUM_FEATURES)
            check_update(ClientUpdate(0, GLOBAL, 1, torch.zeros(1), torch.zeros(0), stats), 1, 0, declared)
            found.append(stats)
        return found
    return uploads


def broadcast_of(model: torch.nn.Module, round_index: int = 0, stats=None) -> Broadcast:
    """A broadcast carrying ``model``'s current weights as the global model."""
    return Broadcast(round=round_index, models={GLOBAL: ModelState(trainable_vector(model), buffer_vector(model))},
                     stats=stats or {})


def loss_and_grad(model: torch.nn.Module, loss: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss value and its gradient as one flat vector (zero where a parameter gets none)."""
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, params, allow_unused=True, retain_graph=True)
    flat = torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, params)])
    return loss.detach(), flat


@pytest.fixture(name="ring_graph")
def _ring_graph_fixture():
    return ring_graph


@pytest.fixture(name="broadcast_of")
def _broadcast_of_fixture():
    return broadcast_of


@pytest.fixture
def run_local():
    """``run_local(config, data, rounds)`` -> the in-process backend after ``rounds`` rounds."""
    def run(config, data, rounds: int):
        from fgl_ray.runtime.local_backend import LocalBackend

        backend = LocalBackend(config, data)
        for round_index in range(rounds):
            result = backend.run_round(round_index)
            assert not result.failures, result.failures
        return backend
    return run


@pytest.fixture
def make_client():
    """``make_client(config, graph)`` -> a :class:`ClientRuntime` (the host-side client object)."""
    def make(config, graph: ClientGraph):
        from fgl_ray.runtime.client import ClientRuntime

        torch.manual_seed(0)
        return ClientRuntime(graph, config, NUM_FEATURES, NUM_CLASSES)
    return make


@pytest.fixture
def fedavg_after(make_config, tiny_data, run_local):
    """``fedavg_after(rounds)`` -> the in-process FedAvg backend after ``rounds`` rounds on the tiny
    federation with ``make_config``'s defaults: the reference of every "reduces to FedAvg" run."""
    def run(rounds: int):
        return run_local(make_config("fedavg"), tiny_data, rounds)
    return run


@dataclass
class AnchorCase:
    """An algorithm's client context beside FedAvg's hooks, both without dropout, for the tests that
    the algorithm's extra term vanishes (at the anchor, before prototypes exist, with ``mu = 0``)."""

    algorithm: Algorithm
    ctx: ClientContext
    plain: Algorithm

    def forward(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The representations and logits of the client's graph under its current model."""
        data = self.ctx.data
        z = self.ctx.model.encode(data.x, data.edge_index)
        return z, self.ctx.model.classify(z, data.edge_index)

    def plain_loss(self, logits: torch.Tensor) -> torch.Tensor:
        """FedAvg's loss (the task's cross-entropy) of ``logits``."""
        return self.plain.loss(self.ctx, self.ctx.data, logits)

    def assert_vanishes(self, loss: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """``loss`` equals FedAvg's loss of ``logits`` exactly, and its gradient equals FedAvg's;
        returns FedAvg's loss value."""
        got = loss_and_grad(self.ctx.model, loss)
        want = loss_and_grad(self.ctx.model, self.plain_loss(logits))
        assert torch.equal(got[0], want[0])
        torch.testing.assert_close(got[1], want[1])
        return want[0]


@pytest.fixture
def anchor_case(make_config, make_context):
    """``anchor_case(algorithm, **changes)`` -> an :class:`AnchorCase` (dropout off in both configs)."""
    def make(algorithm: str, **changes) -> AnchorCase:
        own, ctx = make_context(make_config(algorithm, dropout=0.0, **changes))
        plain, _ = make_context(make_config("fedavg", dropout=0.0))
        return AnchorCase(own, ctx, plain)
    return make
