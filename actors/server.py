"""``ServerActor``: owns the client actors (supervisor pattern) and runs the rounds."""

from __future__ import annotations

import ray
import torch

from actors.client import ClientActor
from fgl_ray.config import ExperimentConfig
from fgl_ray.runtime.ray_backend import RayClientPool
from fgl_ray.runtime.resources import ResourcePlan
from fgl_ray.runtime.server import RoundResult, ServerRuntime


@ray.remote
class ServerActor:
    """Starts one ``ClientActor`` per group in ``plan.assignment``; they die with it."""

    def __init__(self, config: ExperimentConfig, graph_refs: dict[int, ray.ObjectRef], num_features: int,
                 num_classes: int, plan: ResourcePlan) -> None:
        if config.torch_threads:
            torch.set_num_threads(config.torch_threads)
        self.actors = [
            ClientActor.options(**plan.client_options(), max_restarts=config.actor_restarts, max_task_retries=0).remote(
                config, [graph_refs[c] for c in hosted], num_features, num_classes, plan.threads_per_actor)
            for hosted in plan.assignment
        ]
        self.pool = RayClientPool(self.actors, plan.assignment)
        self.server = ServerRuntime(config, self.pool, sorted(graph_refs), num_features, num_classes)

    def run_round(self, round_index: int) -> RoundResult:
        return self.server.run_round(round_index)

    def global_weights(self) -> torch.Tensor:
        return self.server.global_weights()

    def server_models(self) -> tuple[dict[int, str], dict[str, torch.Tensor]]:
        return self.server.server_models()

    def checkpoint(self) -> tuple[bytes, dict[int, bytes]]:
        """The server's state and every client's, gathered from the client actors."""
        return self.server.state_bytes(), self.pool.checkpoint()

    def restore(self, server: bytes, clients: dict[int, bytes]) -> None:
        self.pool.restore(clients)
        self.server.load_state_bytes(server)

    def client_state(self, client_id: int, key: str):
        """One entry of a client's persistent state, read inside the actor that hosts it."""
        return ray.get(self.pool.actor_of[client_id].client_state.remote(client_id, key))

    def placements(self) -> list[dict]:
        """Each client actor's ``placement()``: device, GPU ids, resources, CUDA visibility."""
        return ray.get([actor.placement.remote() for actor in self.actors])

    def client_weights(self) -> dict[int, torch.Tensor]:
        """Weights held inside every client actor right now."""
        merged: dict[int, torch.Tensor] = {}
        for weights in ray.get([actor.weights.remote() for actor in self.actors]):
            merged.update(weights)
        return merged
