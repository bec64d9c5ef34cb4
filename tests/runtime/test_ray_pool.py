"""``RayClientPool`` against stand-in client actors (no model, no data): an actor that raises, one
whose process dies, and one that answers after the round timeout each fail only the clients they
host; the round goes on without waiting for the late one, and Ray's restart brings the dead
actor's clients back."""

from __future__ import annotations

import time

from fgl_ray.messages import GLOBAL, Broadcast, ClientEvaluation, ClientFailure, ModelState


def _stand_in_actor_class(ray):
    """Defined inside a function so that Ray ships the class by value to its workers."""

    class StandIn:
        """Answers ``run`` like a ``ClientActor``, except in round 0, where it does ``behaviour``."""

        def __init__(self, behaviour: str) -> None:
            self.behaviour = behaviour

        def run(self, method, broadcast, client_ids):
            import os

            if broadcast.round == 0:
                if self.behaviour == "raise":
                    raise RuntimeError("boom")
                if self.behaviour == "die":
                    os._exit(1)
                if self.behaviour == "late":
                    time.sleep(60)
            return [ClientEvaluation(cid, {}) for cid in client_ids]

        def device(self) -> str:
            return "cpu"

    return ray.remote(num_cpus=0, max_restarts=1, max_task_retries=0)(StandIn)


def _broadcast(round_index: int) -> Broadcast:
    import torch

    return Broadcast(round=round_index, models={GLOBAL: ModelState(torch.zeros(1), torch.zeros(0))})


def test_raising_dead_and_late_actors_fail_only_their_clients_and_a_restarted_actor_returns(request):
    ray = request.getfixturevalue("ray_session")
    from fgl_ray.runtime.ray_backend import RayClientPool

    actor = _stand_in_actor_class(ray)
    behaviours = {"fine": [0, 1], "raise": [2], "die": [3], "late": [4, 5]}
    actors = [actor.remote(name) for name in behaviours]
    ray.get([a.device.remote() for a in actors])                    # every process is up before the clock runs
    pool = RayClientPool(actors, list(behaviours.values()))
    timeout = 3.0
    try:
        started = time.monotonic()
        answers = pool.evaluate(_broadcast(0), [0, 1, 2, 3, 4, 5], timeout)
        waited = time.monotonic() - started
        assert waited < 30, "the round must not wait for the late actor"
        by_client = {a.client_id: a for a in answers}
        assert sorted(by_client) == [0, 1, 2, 3, 4, 5]                # one answer per asked client
        assert all(isinstance(by_client[c], ClientEvaluation) for c in (0, 1))
        failures = {c: a for c, a in by_client.items() if isinstance(a, ClientFailure)}
        assert sorted(failures) == [2, 3, 4, 5] and {f.phase for f in failures.values()} == {"evaluate"}
        assert failures[2].reason == "RuntimeError: boom"
        assert all(failures[c].reason == f"timed out after {timeout:g} s" for c in (4, 5))
        assert "timed out" not in failures[3].reason and "boom" not in failures[3].reason
        assert pool.restarting == {actors[2]}                        # the dead one, only
        later = pool.evaluate(_broadcast(1), [0, 1, 2, 3], 60.0)   # waits for Ray's restart
        assert sorted(a.client_id for a in later) == [0, 1, 2, 3]
        assert all(isinstance(a, ClientEvaluation) for a in later)
        assert pool.restarting == set()
    finally:
        for a in actors:
            ray.kill(a)

