"""``RayClientPool`` against stand-in client workers (no model, no data): a worker that raises, one
whose process dies, and one that answers after the round timeout each fail only the clients they
host; the round goes on without waiting for the late one, Ray's restart brings the dead worker's
clients back (re-hosted under the run's lease), and a run whose ``actor_restarts`` are used up
keeps that worker's clients failed."""

from __future__ import annotations

import time

from fgl_ray.messages import GLOBAL, Broadcast, ClientEvaluation, ClientFailure, ModelState


def _stand_in_actor_class(ray):
    """Defined inside a function so that Ray ships the class by value to its workers."""

    class StandIn:
        """Answers ``run`` like a ``ClientActor``, except in round 0, where it does ``behaviour``."""

        def __init__(self, behaviour: str) -> None:
            self.behaviour = behaviour
            self.hosted = 0

        def host(self, lease):
            self.hosted += 1

        def hosted_times(self):
            return self.hosted

        def run(self, lease, method, broadcast, client_ids):
            import os

            if broadcast.round == 0:
                if self.behaviour == "raise":
                    raise RuntimeError("boom")
                if self.behaviour == "die":
                    os._exit(1)
                if self.behaviour == "late":
                    time.sleep(60)
            return [ClientEvaluation(cid, {}) for cid in client_ids]

        def ready(self) -> str:
            return "cpu"

    return ray.remote(num_cpus=0, max_restarts=1, max_task_retries=0)(StandIn)


def _broadcast(round_index: int) -> Broadcast:
    import torch

    return Broadcast(round=round_index, models={GLOBAL: ModelState(torch.zeros(1), torch.zeros(0))})


def _when_back(ray, actor, timeout_s=60.0):
    """How often ``actor`` was given clients, asked once Ray has restarted it."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return ray.get(actor.hosted_times.remote(), timeout=timeout_s)
        except ray.exceptions.ActorUnavailableError:
            assert time.monotonic() < deadline, "the worker never came back"
            time.sleep(0.2)


def _pool(actors, assignment, restarts):
    from actors.pool import RayClientPool

    return RayClientPool(actors, assignment, "lease", lambda worker: worker.host.remote("lease"), restarts)


def test_raising_dead_and_late_actors_fail_only_their_clients_and_a_restarted_actor_returns(request):
    ray = request.getfixturevalue("ray_session")
    actor = _stand_in_actor_class(ray)
    behaviours = {"fine": [0, 1], "raise": [2], "die": [3], "late": [4, 5]}
    actors = [actor.remote(name) for name in behaviours]
    ray.get([a.ready.remote() for a in actors])                     # every process is up before the clock runs
    pool = _pool(actors, list(behaviours.values()), restarts=1)
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
        assert ray.get(actors[2].hosted_times.remote()) == 1         # the restarted process got its clients again
    finally:
        for a in actors:
            ray.kill(a)


def test_a_run_without_restarts_left_keeps_the_dead_workers_clients_failed(request):
    ray = request.getfixturevalue("ray_session")
    actor = _stand_in_actor_class(ray)
    actors = [actor.remote("fine"), actor.remote("die")]
    ray.get([a.ready.remote() for a in actors])
    pool = _pool(actors, [[0], [1]], restarts=0)
    try:
        pool.evaluate(_broadcast(0), [0, 1], 30.0)
        later = pool.evaluate(_broadcast(1), [0, 1], 30.0)
        assert isinstance(later[0], ClientEvaluation) or isinstance(later[1], ClientEvaluation)
        failed = [a for a in later if isinstance(a, ClientFailure)]
        assert [(f.client_id, "actor_restarts" in f.reason) for f in failed] == [(1, True)]
        assert _when_back(ray, actors[1]) == 0       # Ray replaced the process, but this run did not take it back
    finally:
        for a in actors:
            ray.kill(a)
