"""Placement-group sizing: a trial's bundles hold every actor it starts (no Ray needed)."""

from __future__ import annotations

import math

import pytest

from fgl_ray.config import load_config
from fgl_ray.tune.resources import (DRIVER_BUNDLE, DRIVER_CPUS, FIRST_CLIENT_BUNDLE, auto_cpus_per_trial,
                                    bundle_totals, clients_in_trial, trial_bundles, trial_plan)

SIZES = {i: size for i, size in enumerate([900, 100, 100, 500, 480, 20, 300, 300, 50, 50, 10, 700])}


def _config(**values):
    return load_config({"dataset": "synthetic"} | values)


def actor_requests(config, sizes, cpus, gpus=0.0):
    """What the trial starts, as Ray requests: its own actor (the server), one per client worker."""
    plan = trial_plan(config, sizes, cpus, gpus)
    if clients_in_trial(config, plan):
        return [{"CPU": cpus}]
    clients = [{"CPU": plan.cpus_per_actor, "GPU": plan.gpus_per_actor} for _ in plan.assignment]
    return [{"CPU": DRIVER_CPUS}, *clients]


def place(requests, bundles):
    """First-fit of every request into the bundles' remaining capacity; None when one does not fit."""
    free = [dict(b) for b in bundles]
    where = []
    for request in requests:
        for index, room in enumerate(free):
            if all(room.get(k, 0.0) + 1e-9 >= v for k, v in request.items() if v > 0):
                for k, v in request.items():
                    room[k] = room.get(k, 0.0) - v
                where.append(index)
                break
        else:
            return None
    return where


CASES = [
    ({}, SIZES, 1.0, 0.0),
    ({}, SIZES, 3.0, 0.0),
    ({"clients_per_actor": 1}, SIZES, 2.0, 0.0),
    ({"clients_per_actor": 5}, SIZES, 1.0, 0.0),
    ({"clients_per_actor": 2}, 3, 0.5, 0.0),
    ({}, SIZES, 4.0, 1.0),
    ({"clients_per_actor": 4}, SIZES, 2.0, 2.0),
]


@pytest.mark.parametrize("options, sizes, cpus, gpus", CASES)
def test_bundles_cover_every_actor_the_trial_starts(options, sizes, cpus, gpus):
    config = _config(**options)
    bundles = trial_bundles(config, sizes, cpus, gpus)
    requests = actor_requests(config, sizes, cpus, gpus)
    totals = bundle_totals(bundles)
    assert totals["CPU"] >= sum(r["CPU"] for r in requests) - 1e-9
    assert totals["CPU"] <= cpus + 1e-9 and totals.get("GPU", 0.0) <= gpus + 1e-9
    assert place(requests, bundles) is not None
    # the layout the trainable relies on: the trial's actor, then one bundle per client worker
    assert requests[0]["CPU"] <= bundles[DRIVER_BUNDLE]["CPU"]
    assert len(bundles) - FIRST_CLIENT_BUNDLE == len(requests) - 1
    for request, bundle in zip(requests[1:], bundles[FIRST_CLIENT_BUNDLE:]):   # each worker in its own bundle
        assert all(bundle.get(k, 0.0) + 1e-9 >= v for k, v in request.items() if v > 0)


@pytest.mark.parametrize("options, sizes, cpus, gpus", CASES)
def test_client_bundles_fit_one_client_actor_each(options, sizes, cpus, gpus):
    """Each worker is put into its own bundle: none may be larger than one worker needs."""
    config = _config(**options)
    plan = trial_plan(config, sizes, cpus, gpus)
    for bundle in trial_bundles(config, sizes, cpus, gpus)[FIRST_CLIENT_BUNDLE:]:
        assert bundle["CPU"] < 2 * plan.cpus_per_actor


def test_plan_hosts_every_client_once():
    plan = trial_plan(_config(clients_per_actor=5), SIZES, 2.0)
    assert sorted(c for group in plan.assignment for c in group) == sorted(SIZES)
    assert plan.num_actors == math.ceil(len(SIZES) / 5)


def test_default_is_one_client_actor_per_whole_cpu_left():
    for cpus in (1.0, 2.0, 3.5):
        plan = trial_plan(_config(), SIZES, cpus)
        assert plan.num_actors == max(1, math.floor(cpus - DRIVER_CPUS))


def test_too_few_cpus_fail_with_the_fix():
    with pytest.raises(ValueError, match="cpus_per_trial"):
        trial_plan(_config(), SIZES, 0.1)
    with pytest.raises(ValueError, match="raise clients_per_actor"):
        trial_plan(_config(clients_per_actor=1), SIZES, 0.5)


def test_fixed_gpu_share_must_fit_the_trial():
    config = _config(clients_per_actor=6, gpus_per_client=0.5)
    assert trial_plan(config, SIZES, 2.0, gpus_per_trial=1.0).gpus_per_actor == 0.5
    with pytest.raises(ValueError, match="gpus_per_trial"):
        trial_plan(config, SIZES, 2.0, gpus_per_trial=0.5)


@pytest.mark.parametrize("cpus", [1.0, 1.5, 2.0])
def test_an_auto_trial_of_under_two_cpus_hosts_its_clients_in_its_own_actor(cpus):
    config = _config()
    assert clients_in_trial(config, trial_plan(config, SIZES, cpus)) is (cpus - DRIVER_CPUS < 2)
    if cpus < 2:
        assert trial_bundles(config, SIZES, cpus) == [{"CPU": cpus}]


def test_a_fixed_worker_count_or_a_gpu_share_keeps_client_workers():
    for config, gpus in ((_config(clients_per_actor=len(SIZES)), 0.0), (_config(), 1.0)):
        plan = trial_plan(config, SIZES, 1.0, gpus)
        assert plan.num_actors == 1 and not clients_in_trial(config, plan)
        assert len(trial_bundles(config, SIZES, 1.0, gpus)) == 1 + FIRST_CLIENT_BUNDLE


def test_local_backend_trial_is_one_bundle():
    assert trial_bundles(_config(backend="local"), SIZES, 1.5) == [{"CPU": 1.5}]


@pytest.mark.parametrize("cluster, trials, limit", [(2.0, 5, None), (2.0, 1, None), (16.0, 52, None),
                                                     (16.0, 4, None), (8.0, 20, 2)])
def test_auto_cpus_let_the_expected_number_of_trials_run_at_once(cluster, trials, limit):
    cpus = auto_cpus_per_trial(cluster, trials, limit)
    concurrent = min(trials, math.floor(cluster), limit or trials)
    total = bundle_totals(trial_bundles(_config(), SIZES, cpus))["CPU"]
    assert concurrent * total <= cluster + 1e-9
    assert (concurrent + 1) * cpus > cluster  # no CPU left idle for another trial


def test_two_trials_fit_on_two_cpus():
    cpus = auto_cpus_per_trial(2.0, 5)
    config = _config(clients_per_actor=2)
    assert 2 * bundle_totals(trial_bundles(config, 2, cpus))["CPU"] <= 2.0 + 1e-9
