import pytest

from fgl_ray.config import load_config
from fgl_ray.runtime.resources import SERVER_CPUS, balance, plan_resources

SIZES = {i: size for i, size in enumerate([900, 100, 100, 500, 480, 20, 300, 300, 50, 50, 10, 700])}


def _config(**values):
    return load_config(values)


def test_no_gpu_requested_on_a_cluster_without_gpus():
    plan = plan_resources(_config(), SIZES, {"CPU": 2.0})
    assert plan.gpus_per_actor == 0.0
    assert plan.num_actors == 2
    assert plan.num_actors * plan.cpus_per_actor + SERVER_CPUS <= 2.0


def test_gpu_share_only_when_the_cluster_has_gpus():
    plan = plan_resources(_config(), SIZES, {"CPU": 4.0, "GPU": 1.0})
    assert 0 < plan.gpus_per_actor <= 1.0
    assert plan.num_actors * plan.gpus_per_actor <= 1.0


def test_clients_per_actor_sets_the_number_of_actors():
    plan = plan_resources(_config(clients_per_actor=5), SIZES, {"CPU": 2.0})
    assert plan.num_actors == 3
    assert max(len(hosted) for hosted in plan.assignment) <= 5


def test_balance_covers_every_client_once_and_beats_contiguous_blocks():
    assignment = balance(SIZES, 2)
    hosted = sorted(c for group in assignment for c in group)
    assert hosted == sorted(SIZES)
    load = max(sum(SIZES[c] for c in group) for group in assignment)
    ids = sorted(SIZES)
    blocks = [ids[:6], ids[6:]]
    assert load <= max(sum(SIZES[c] for c in block) for block in blocks)


def test_a_cluster_without_cpus_is_refused():
    with pytest.raises(ValueError, match="CPUs"):
        plan_resources(_config(), SIZES, {"CPU": 0.0})
