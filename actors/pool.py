"""The pool protocol: warm client workers lent to federations, and the calls one federation makes.

* :class:`WorkerPool`: the workers one process owns (a ``Simulator``'s, a Tune trial's), each lent
  to one federation at a time; an idle worker of the shape a run needs is reused, never a new one.
* :class:`RayClientPool`: the calls of one federation to the workers it borrowed: one remote call
  per worker and phase carrying the ids of its clients that take part, all on one broadcast ref;
  a worker that raises, dies or times out fails only the clients it hosts, and one that Ray
  restarts gets its clients back (rebuilt from their partitions, then the last checkpoint).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

import ray

from actors.client import ClientActor
from fgl_ray.messages import Broadcast, ClientFailure
from fgl_ray.runtime.resources import WorkerShape
from fgl_ray.runtime.host import describe_error

class WorkerPool:
    """Client workers owned by this process, each lent to one federation at a time.

    Args:
        placement_group: put the workers into this placement group's bundles (a Tune trial's).
        bundles: the bundle index of each worker, in order of creation (with ``placement_group``).
        max_restarts: how often Ray restarts a worker whose process died (-1: always; a run
            decides with its own ``actor_restarts`` whether it takes a restarted worker back).
    """

    def __init__(self, placement_group=None, bundles: Sequence[int] = (), max_restarts: int = -1) -> None:
        self.placement_group = placement_group
        self.bundles = list(bundles)
        self.max_restarts = max_restarts
        self.idle: list[tuple[WorkerShape, ray.actor.ActorHandle]] = []
        self.lent: dict[ray.actor.ActorHandle, WorkerShape] = {}
        self.created = 0

    def create(self, shape: WorkerShape) -> ray.actor.ActorHandle:
        """A new worker of ``shape`` (its process starts and imports in the background)."""
        options = shape.options() | {"max_restarts": self.max_restarts, "max_task_retries": 0}
        if self.placement_group is not None:
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            if self.created >= len(self.bundles):
                raise RuntimeError(f"this pool's placement group has bundles for {len(self.bundles)} workers")
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                self.placement_group, placement_group_bundle_index=self.bundles[self.created])
        self.created += 1
        return ClientActor.options(**options).remote()

    def start(self, count: int, shape: WorkerShape) -> None:
        """Starts workers of ``shape`` until ``count`` of them are idle (they import in the background)."""
        self._drop_other_shapes(shape)
        ready = sum(1 for s, _ in self.idle if s == shape)
        self.idle += [(shape, self.create(shape)) for _ in range(count - ready)]

    def _drop_other_shapes(self, shape: WorkerShape) -> None:
        """Idle workers of another shape hold resources a new shape may need: they go."""
        stale = [worker for s, worker in self.idle if s != shape]
        self.idle = [(s, worker) for s, worker in self.idle if s == shape]
        for worker in stale:
            ray.kill(worker)

    def lend(self, count: int, shape: WorkerShape) -> list[ray.actor.ActorHandle]:
        """``count`` workers of ``shape``: idle ones first, new ones for the rest."""
        self.start(count, shape)
        taken = [worker for s, worker in self.idle if s == shape][:count]
        self.idle = [(s, worker) for s, worker in self.idle if worker not in taken]
        self.lent.update({worker: shape for worker in taken})
        return taken

    def give_back(self, workers: Sequence[ray.actor.ActorHandle]) -> None:
        """Returns lent workers; they wait for the next federation."""
        for worker in workers:
            shape = self.lent.pop(worker, None)
            if shape is not None:
                self.idle.append((shape, worker))

    def __len__(self) -> int:
        return len(self.idle) + len(self.lent)

    def close(self) -> None:
        """Ends every worker's process."""
        for worker in [w for _, w in self.idle] + list(self.lent):
            ray.kill(worker)
        self.idle, self.lent = [], {}


class RayClientPool:
    """Calls the workers of one federation (lease ``lease``); see the module docstring.

    Args:
        workers: the borrowed workers, hosting ``assignment[i]`` on ``workers[i]``.
        lease: the token the workers host this federation under.
        rehost: starts re-hosting this federation's clients on a restarted worker (returns the ref).
        restarts: how many restarts of one worker this run takes back (``actor_restarts``); a worker
            that dies more often stays failed for the rest of the run.
    """

    def __init__(self, workers: Sequence[ray.actor.ActorHandle], assignment: Sequence[Sequence[int]], lease: str,
                 rehost: Callable[[ray.actor.ActorHandle], ray.ObjectRef], restarts: int) -> None:
        self.actor_of = {cid: worker for worker, hosted in zip(workers, assignment) for cid in hosted}
        self.workers = list(workers)
        self.lease = lease
        self.rehost = rehost
        self.restarts = restarts
        self.deaths: dict[ray.actor.ActorHandle, int] = {}
        self.lost: set[ray.actor.ActorHandle] = set()
        self._last: tuple[Broadcast | None, ray.ObjectRef | None] = (None, None)
        self.restarting: set[ray.actor.ActorHandle] = set()
        #: the clients' states of the last checkpoint, loaded into a worker Ray restarts
        self.saved: dict[int, bytes] = {}
        #: seconds spent putting broadcasts into the object store, all rounds together
        self.broadcast_seconds = 0.0

    def checkpoint(self) -> dict[int, bytes]:
        """Every client's state, kept for restarted workers too."""
        self.saved = {}
        for states in ray.get([worker.states.remote(self.lease) for worker in self.workers]):
            self.saved.update(states)
        return dict(self.saved)

    def restore(self, states: Mapping[int, bytes]) -> None:
        """Loads checkpointed client states into the workers hosting them."""
        self.saved = dict(states)
        ray.get([worker.restore.remote(self.lease, self._hosted_states(worker)) for worker in self.workers])

    def weights(self) -> dict[int, Any]:
        merged: dict[int, Any] = {}
        for weights in ray.get([worker.weights.remote(self.lease) for worker in self.workers]):
            merged.update(weights)
        return merged

    def client_state(self, client_id: int, key: str):
        return ray.get(self.actor_of[client_id].client_state.remote(self.lease, client_id, key))

    def _hosted_states(self, worker: ray.actor.ActorHandle) -> dict[int, bytes]:
        return {cid: blob for cid, blob in self.saved.items() if self.actor_of[cid] is worker}

    def _ref(self, broadcast: Broadcast) -> ray.ObjectRef:
        if self._last[0] is not broadcast:
            started = time.perf_counter()
            self._last = (broadcast, ray.put(broadcast))
            self.broadcast_seconds += time.perf_counter() - started
        return self._last[1]

    def _died(self, worker: ray.actor.ActorHandle) -> None:
        self.deaths[worker] = self.deaths.get(worker, 0) + 1
        if self.deaths[worker] > self.restarts:
            self.lost.add(worker)
            self.restarting.discard(worker)
        else:
            self.restarting.add(worker)

    def _await_restarts(self, timeout_s: float) -> None:
        """Waits, at most ``timeout_s``, for the workers that died in an earlier call while Ray restarts
        them; each is given its clients again (rebuilt from the partition refs, then loaded from the
        last checkpoint when there is one)."""
        deadline = time.monotonic() + timeout_s
        for worker in list(self.restarting):
            while True:
                try:
                    ray.get(worker.ready.remote(), timeout=max(0.1, deadline - time.monotonic()))
                    ray.get(self.rehost(worker))
                    if states := self._hosted_states(worker):
                        ray.get(worker.restore.remote(self.lease, states))
                    break
                except ray.exceptions.ActorDiedError:
                    self.lost.add(worker)
                    break
                except (ray.exceptions.ActorUnavailableError, ray.exceptions.GetTimeoutError):
                    if time.monotonic() >= deadline:
                        return
                    time.sleep(0.2)
            self.restarting.discard(worker)

    def _call(self, method: str, broadcast: Broadcast, client_ids: Sequence[int], timeout_s: float) -> list:
        self._await_restarts(timeout_s)
        ref = self._ref(broadcast)
        hosted: dict[ray.actor.ActorHandle, list[int]] = {}
        answers: list = []
        for cid in client_ids:
            worker = self.actor_of[cid]
            if worker in self.lost or worker in self.restarting:
                reason = "its client actor died and the run's actor_restarts allow no further restart" \
                    if worker in self.lost else "its client actor is still restarting"
                answers.append(ClientFailure(cid, method, reason))
                continue
            hosted.setdefault(worker, []).append(cid)
        futures = {worker.run.remote(self.lease, method, ref, ids): (worker, ids) for worker, ids in hosted.items()}
        ready, pending = ray.wait(list(futures), num_returns=len(futures), timeout=timeout_s)
        for future in ready:
            worker, ids = futures[future]
            try:
                answers += ray.get(future)
            except ray.exceptions.RayTaskError as error:  # the worker's call itself failed: all its clients
                answers += [ClientFailure(cid, method, describe_error(error.cause or error)) for cid in ids]
            except ray.exceptions.RayError as error:      # the worker's process died (Ray restarts it)
                self._died(worker)
                answers += [ClientFailure(cid, method, describe_error(error)) for cid in ids]
        for future in pending:
            ray.cancel(future)
            answers += [ClientFailure(cid, method, f"timed out after {timeout_s:g} s") for cid in futures[future][1]]
        return answers

    def train(self, broadcast, client_ids, timeout_s):
        return self._call("train", broadcast, client_ids, timeout_s)

    def evaluate(self, broadcast, client_ids, timeout_s):
        return self._call("evaluate", broadcast, client_ids, timeout_s)

    def release(self) -> None:
        """Asks every worker to drop this federation's clients (without waiting)."""
        for worker in self.workers:
            worker.release.remote(self.lease)
