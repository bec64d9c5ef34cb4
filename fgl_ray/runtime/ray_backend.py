"""Ray backend: a ``ServerActor`` that supervises ``ClientActor``s.

The broadcast is ``ray.put`` once per server state and every client call gets the same
reference; answers are gathered with ``ray.wait`` under the round timeout, and a client that
raises, dies or times out becomes a :class:`ClientFailure` instead of stopping the round.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator, Sequence

import ray
import torch

from fgl_ray.config import ExperimentConfig
from fgl_ray.data.types import FederatedGraphData
from fgl_ray.messages import Broadcast, ClientFailure
from fgl_ray.runtime.local_backend import describe_error
from fgl_ray.runtime.resources import plan_resources
from fgl_ray.runtime.server import RoundResult

LOCAL_RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


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
    try:
        yield
    finally:
        ray.shutdown()


class RayClientPool:
    """Calls client actors; one remote call per virtual client, all on one broadcast ref."""

    def __init__(self, actors: Sequence[ray.actor.ActorHandle], assignment: Sequence[Sequence[int]]) -> None:
        self.actor_of = {cid: actor for actor, hosted in zip(actors, assignment) for cid in hosted}
        self._last: tuple[Broadcast | None, ray.ObjectRef | None] = (None, None)

    def _ref(self, broadcast: Broadcast) -> ray.ObjectRef:
        if self._last[0] is not broadcast:
            self._last = (broadcast, ray.put(broadcast))
        return self._last[1]

    def _call(self, method: str, broadcast: Broadcast, client_ids: Sequence[int], timeout_s: float) -> list:
        ref = self._ref(broadcast)
        futures = {getattr(self.actor_of[cid], method).remote(ref, cid): cid for cid in client_ids}
        ready, pending = ray.wait(list(futures), num_returns=len(futures), timeout=timeout_s)
        answers = []
        for future in ready:
            try:
                answers.append(ray.get(future))
            except ray.exceptions.RayTaskError as error:
                answers.append(ClientFailure(futures[future], method, describe_error(error.cause or error)))
            except ray.exceptions.RayError as error:
                answers.append(ClientFailure(futures[future], method, describe_error(error)))
        for future in pending:
            ray.cancel(future)
            answers.append(ClientFailure(futures[future], method, f"timed out after {timeout_s:g} s"))
        return answers

    def train(self, broadcast, client_ids, timeout_s):
        return self._call("train", broadcast, client_ids, timeout_s)

    def evaluate(self, broadcast, client_ids, timeout_s):
        return self._call("evaluate", broadcast, client_ids, timeout_s)


class RayBackend:
    """Driver-side handle: puts each client's partition once and starts the server actor."""

    def __init__(self, config: ExperimentConfig, data: FederatedGraphData) -> None:
        from actors.server import ServerActor

        if not ray.is_initialized():
            raise RuntimeError("the Ray backend needs a running Ray session; wrap the run in ray_session()")
        self.graph_refs = {graph.client_id: ray.put(graph) for graph in data.clients}
        sizes = {graph.client_id: int(graph.data.num_nodes) for graph in data.clients}
        self.plan = plan_resources(config, sizes, ray.cluster_resources())
        self.server = ServerActor.options(num_cpus=self.plan.server_cpus).remote(
            config, self.graph_refs, data.num_features, data.num_classes, self.plan)

    def run_round(self, round_index: int) -> RoundResult:
        return ray.get(self.server.run_round.remote(round_index))

    def global_weights(self) -> torch.Tensor:
        return ray.get(self.server.global_weights.remote())

    def client_weights(self) -> dict[int, torch.Tensor]:
        return ray.get(self.server.client_weights.remote())

    def client_state(self, client_id: int, key: str):
        return ray.get(self.server.client_state.remote(client_id, key))

    def close(self) -> None:
        """Kills the server actor; its client actors die with it."""
        ray.kill(self.server)
