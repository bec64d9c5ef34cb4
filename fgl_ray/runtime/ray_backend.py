"""Ray backend: a ``ServerActor`` that supervises ``ClientActor``s.

The broadcast is ``ray.put`` once per server state and every actor call gets the same
reference; each actor gets one call per phase for all its participating clients; answers are
gathered with ``ray.wait`` under the round timeout, and a client that raises, dies or times out
becomes a :class:`ClientFailure` instead of stopping the round (a whole actor that dies or times
out fails all the clients it hosts).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import signal
import threading
import time
from typing import Iterator, Mapping, Optional, Sequence, Union

import ray
import torch

from fgl_ray.config import ExperimentConfig
from fgl_ray.data.types import FederatedGraphData
from fgl_ray.interrupts import interrupt_on_sigterm
from fgl_ray.messages import Broadcast, ClientFailure
from fgl_ray.runtime.local_backend import describe_error
from fgl_ray.runtime.resources import ResourcePlan, plan_resources
from fgl_ray.runtime.server import RoundResult

LOCAL_RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}

#: (plan, server bundle index) fixed by :func:`use_plan` for the backends created inside it.
_FIXED_PLAN: contextvars.ContextVar[tuple[Optional[ResourcePlan], Optional[int]]] = contextvars.ContextVar(
    "fgl_ray_fixed_plan", default=(None, None))


@contextlib.contextmanager
def use_plan(plan: ResourcePlan, server_bundle: int | None = None) -> Iterator[None]:
    """Ray backends created inside this block use ``plan`` instead of planning from the cluster.

    A Tune trial sizes its placement group from ``plan``. With ``server_bundle``, the server
    actor is scheduled into that bundle of the caller's placement group and the client actors it
    starts are captured by the same group (they fill the bundles sized for them).
    """
    token = _FIXED_PLAN.set((plan, server_bundle))
    try:
        yield
    finally:
        _FIXED_PLAN.reset(token)


def _bundle_options(server_bundle: int | None) -> dict:
    if server_bundle is None:
        return {}
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    group = ray.util.get_current_placement_group()
    if group is None:
        raise RuntimeError("a server bundle was given, but the caller runs outside any placement group")
    return {"scheduling_strategy": PlacementGroupSchedulingStrategy(
        group, placement_group_bundle_index=server_bundle, placement_group_capture_child_tasks=True)}


def _check_plan(plan: ResourcePlan, client_ids: Sequence[int]) -> ResourcePlan:
    hosted = sorted(c for group in plan.assignment for c in group)
    if hosted != sorted(client_ids):
        raise ValueError(f"the resource plan hosts clients {hosted}, but the data has clients {sorted(client_ids)}")
    return plan


@contextlib.contextmanager
def ray_session(num_cpus: int | None = None, address: str | None = None) -> Iterator[None]:
    """Uses the running Ray session, or starts one and always shuts it down afterwards."""
    if ray.is_initialized():
        yield
        return
    for key, value in LOCAL_RAY_ENV.items():
        os.environ.setdefault(key, value)
    ray.init(address=address, num_cpus=num_cpus, include_dashboard=False, log_to_driver=True,
             configure_logging=False)
    previous = None
    if threading.current_thread() is threading.main_thread():   # Ray's own handler dumps and kills
        previous = signal.signal(signal.SIGTERM, interrupt_on_sigterm)
    try:
        yield
    finally:
        ray.shutdown()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


class RayClientPool:
    """Calls client actors: one remote call per actor and phase, carrying the ids of its clients
    that take part, all on one broadcast ref."""

    def __init__(self, actors: Sequence[ray.actor.ActorHandle], assignment: Sequence[Sequence[int]]) -> None:
        self.actor_of = {cid: actor for actor, hosted in zip(actors, assignment) for cid in hosted}
        self.actors = list(actors)
        self._last: tuple[Broadcast | None, ray.ObjectRef | None] = (None, None)
        self.restarting: set[ray.actor.ActorHandle] = set()
        #: the clients' states of the last checkpoint, loaded into an actor Ray restarts
        self.saved: dict[int, bytes] = {}

    def checkpoint(self) -> dict[int, bytes]:
        """Every client's state, kept for restarted actors too."""
        self.saved = {}
        for states in ray.get([actor.states.remote() for actor in self.actors]):
            self.saved.update(states)
        return dict(self.saved)

    def restore(self, states: Mapping[int, bytes]) -> None:
        """Loads checkpointed client states into the actors hosting them."""
        self.saved = dict(states)
        ray.get([actor.restore.remote(self._hosted_states(actor)) for actor in self.actors])

    def _hosted_states(self, actor: ray.actor.ActorHandle) -> dict[int, bytes]:
        return {cid: blob for cid, blob in self.saved.items() if self.actor_of[cid] is actor}

    def _ref(self, broadcast: Broadcast) -> ray.ObjectRef:
        if self._last[0] is not broadcast:
            self._last = (broadcast, ray.put(broadcast))
        return self._last[1]

    def _await_restarts(self, timeout_s: float) -> None:
        """Waits, at most ``timeout_s``, for the actors that died in an earlier call while Ray restarts
        them (their clients rebuilt from the partition refs, then loaded from the last checkpoint when
        there is one); one out of restarts stays failed."""
        deadline = time.monotonic() + timeout_s
        for actor in list(self.restarting):
            while True:
                try:
                    ray.get(actor.device.remote(), timeout=max(0.1, deadline - time.monotonic()))
                    if states := self._hosted_states(actor):
                        ray.get(actor.restore.remote(states))
                    break
                except ray.exceptions.ActorDiedError:
                    break
                except (ray.exceptions.ActorUnavailableError, ray.exceptions.GetTimeoutError):
                    if time.monotonic() >= deadline:
                        return
                    time.sleep(0.2)
            self.restarting.discard(actor)

    def _call(self, method: str, broadcast: Broadcast, client_ids: Sequence[int], timeout_s: float) -> list:
        self._await_restarts(timeout_s)
        ref = self._ref(broadcast)
        hosted: dict[ray.actor.ActorHandle, list[int]] = {}
        for cid in client_ids:
            hosted.setdefault(self.actor_of[cid], []).append(cid)
        futures = {actor.run.remote(method, ref, ids): (actor, ids) for actor, ids in hosted.items()}
        ready, pending = ray.wait(list(futures), num_returns=len(futures), timeout=timeout_s)
        answers = []
        for future in ready:
            actor, ids = futures[future]
            try:
                answers += ray.get(future)
            except ray.exceptions.RayTaskError as error:  # the actor's call itself failed: all its clients
                answers += [ClientFailure(cid, method, describe_error(error.cause or error)) for cid in ids]
            except ray.exceptions.RayError as error:      # the actor's process died (Ray may restart it)
                self.restarting.add(actor)
                answers += [ClientFailure(cid, method, describe_error(error)) for cid in ids]
        for future in pending:
            ray.cancel(future)
            answers += [ClientFailure(cid, method, f"timed out after {timeout_s:g} s") for cid in futures[future][1]]
        return answers

    def train(self, broadcast, client_ids, timeout_s):
        return self._call("train", broadcast, client_ids, timeout_s)

    def evaluate(self, broadcast, client_ids, timeout_s):
        return self._call("evaluate", broadcast, client_ids, timeout_s)


class RayBackend:
    """Driver-side handle: puts each client's partition once and starts the server actor."""

    def __init__(self, config: ExperimentConfig, data: FederatedGraphData,
                 resources: Union[ResourcePlan, Mapping[str, float], None] = None,
                 server_bundle: int | None = None) -> None:
        """Args: ``resources``: a fixed plan, or the resources to plan from (default: those of
        :func:`use_plan`, else the whole cluster); ``server_bundle``: see :func:`use_plan`."""
        from actors.server import ServerActor

        if not ray.is_initialized():
            raise RuntimeError("the Ray backend needs a running Ray session; wrap the run in ray_session()")
        self.graph_refs = {graph.client_id: ray.put(graph) for graph in data.clients}
        sizes = {graph.client_id: int(graph.data.num_nodes) for graph in data.clients}
        if resources is None:
            resources, server_bundle = _FIXED_PLAN.get()
        if isinstance(resources, ResourcePlan):
            self.plan = _check_plan(resources, list(sizes))
        elif resources is not None:
            self.plan = plan_resources(config, sizes, resources)
        else:
            nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
            self.plan = plan_resources(config, sizes, ray.cluster_resources(), nodes)
        self.server = ServerActor.options(**self.plan.server_options(), **_bundle_options(server_bundle)).remote(
            config, self.graph_refs, data.num_features, data.num_classes, self.plan)

    def run_round(self, round_index: int) -> RoundResult:
        return ray.get(self.server.run_round.remote(round_index))

    def global_weights(self) -> torch.Tensor:
        return ray.get(self.server.global_weights.remote())

    def server_models(self) -> tuple[dict[int, str], dict[str, torch.Tensor]]:
        """The client -> model-key assignment and the shared weights of every server model."""
        return ray.get(self.server.server_models.remote())

    def client_weights(self) -> dict[int, torch.Tensor]:
        return ray.get(self.server.client_weights.remote())

    def client_state(self, client_id: int, key: str):
        return ray.get(self.server.client_state.remote(client_id, key))

    def placements(self) -> list[dict]:
        """Each client actor's node, device, GPU ids, resources and clients."""
        return ray.get(self.server.placements.remote())

    def checkpoint(self) -> tuple[bytes, dict[int, bytes]]:
        """The server's and every client's state (see :mod:`fgl_ray.runtime.checkpoint`)."""
        return ray.get(self.server.checkpoint.remote())

    def restore(self, server: bytes, clients: Mapping[int, bytes]) -> None:
        ray.get(self.server.restore.remote(server, dict(clients)))

    def close(self) -> None:
        """Kills the server actor; its client actors die with it."""
        ray.kill(self.server)
