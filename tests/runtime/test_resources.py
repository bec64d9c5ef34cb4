import pytest

from fgl_ray.config import ConfigError, load_config
from fgl_ray.runtime.resources import WORKER_BYTES, balance, memory_cap, plan_resources

SIZES = {i: size for i, size in enumerate([900, 100, 100, 500, 480, 20, 300, 300, 50, 50, 10, 700])}


def _config(**values):
    return load_config(values)


def test_no_gpu_requested_on_a_cluster_without_gpus():
    plan = plan_resources(_config(), SIZES, {"CPU": 2.0})
    assert plan.gpus_per_actor == 0.0
    assert plan.num_actors == 2
    assert plan.num_actors * plan.cpus_per_actor <= 2.0


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


# ---------------------------------------------------------------- GPUs (gpus_per_client)

def _fits(plan, nodes):
    """Whether every client actor can be placed on ``nodes`` at once."""
    free = [dict(node) for node in nodes]
    for _ in range(plan.num_actors):
        for node in free:
            if (node.get("CPU", 0) >= plan.cpus_per_actor - 1e-9
                    and node.get("GPU", 0) >= plan.gpus_per_actor - 1e-9):
                node["CPU"] -= plan.cpus_per_actor
                node["GPU"] = node.get("GPU", 0) - plan.gpus_per_actor
                break
        else:
            return False
    return True


@pytest.mark.parametrize("cluster, actors, share", [
    ({"CPU": 2.0, "GPU": 1.0}, 2, 0.5),
    ({"CPU": 4.0, "GPU": 1.0}, 4, 0.25),
    ({"CPU": 3.0, "GPU": 1.0}, 3, 0.3333),
    ({"CPU": 2.0, "GPU": 4.0}, 2, 1.0),
])
def test_auto_gives_each_actor_min_one_or_gpus_over_actors(cluster, actors, share):
    plan = plan_resources(_config(), SIZES, cluster)
    assert plan.num_actors == actors
    assert plan.gpus_per_actor == pytest.approx(share, abs=1e-9)
    assert plan.num_actors * plan.gpus_per_actor <= cluster["GPU"]
    assert plan.shape.options()["num_gpus"] == plan.gpus_per_actor
    assert "runtime_env" not in plan.shape.options()


def test_auto_asks_for_no_gpu_and_hides_nothing_without_gpus():
    plan = plan_resources(_config(gpus_per_client="auto"), SIZES, {"CPU": 2.0})
    assert plan.gpus_per_actor == 0.0
    assert plan.shape.options() == {"num_cpus": plan.cpus_per_actor, "num_gpus": 0.0}


def test_fixed_fraction_is_used_as_is():
    plan = plan_resources(_config(gpus_per_client=0.25), SIZES, {"CPU": 2.0, "GPU": 1.0})
    assert plan.num_actors == 2 and plan.gpus_per_actor == 0.25


def test_fixed_fraction_limits_the_default_number_of_actors_to_what_the_gpus_hold():
    plan = plan_resources(_config(gpus_per_client=0.5), SIZES, {"CPU": 8.0, "GPU": 1.0})
    assert plan.num_actors == 2 and plan.gpus_per_actor == 0.5
    assert sorted(c for group in plan.assignment for c in group) == sorted(SIZES)


def test_fixed_fraction_that_cannot_fit_clients_per_actor_fails_naming_the_fix():
    with pytest.raises(ValueError, match=r"gpus_per_client=0.5 .* 12 client actors .*clients_per_actor"):
        plan_resources(_config(gpus_per_client=0.5, clients_per_actor=1), SIZES, {"CPU": 8.0, "GPU": 1.0})


def test_fixed_fraction_without_gpus_fails_before_any_actor_is_created():
    with pytest.raises(ValueError) as error:
        plan_resources(_config(gpus_per_client=0.5), SIZES, {"CPU": 2.0})
    message = str(error.value)
    for needle in ("gpus_per_client=0.5", "0 GPUs", "wait forever", "gpus_per_client to auto or 0"):
        assert needle in message


def test_zero_asks_for_no_gpu_and_hides_the_clusters_gpus():
    plan = plan_resources(_config(gpus_per_client=0), SIZES, {"CPU": 2.0, "GPU": 2.0})
    assert plan.gpus_per_actor == 0.0
    assert plan.shape.options()["num_gpus"] == 0.0
    assert plan.shape.options()["runtime_env"] == {"env_vars": {"CUDA_VISIBLE_DEVICES": ""}}


def test_auto_never_starts_more_workers_than_the_memory_holds():
    sizes = {i: 1 for i in range(32)}
    roomy = plan_resources(_config(), sizes, {"CPU": 16.0, "memory": 64 * 2**30})
    assert roomy.num_actors == 16                                     # one per CPU
    tight = plan_resources(_config(), sizes, {"CPU": 16.0, "memory": 5 * WORKER_BYTES})
    assert tight.num_actors == 5
    data = 2**30                                                      # three copies of 1 GiB of client data
    crowded = plan_resources(_config(), sizes, {"CPU": 16.0, "memory": 3 * data + 5 * WORKER_BYTES}, data_bytes=data)
    assert crowded.num_actors == 5 == memory_cap(3 * data + 5 * WORKER_BYTES, data)
    assert memory_cap(WORKER_BYTES / 2, 0) == 1                         # at least one, always
    fixed = plan_resources(_config(clients_per_actor=2), sizes, {"CPU": 16.0, "memory": 5 * WORKER_BYTES})
    assert fixed.num_actors == 16                                     # an explicit clients_per_actor is obeyed


@pytest.mark.parametrize("value", [1.5, -0.1, "half", True])
def test_bad_gpus_per_client_names_the_field(value):
    with pytest.raises(ConfigError, match="gpus_per_client"):
        _config(gpus_per_client=value)


HEAD = {"CPU": 8.0}                      # m5.2xlarge-like head, no GPU
SMALL_GPU = {"CPU": 4.0, "GPU": 1.0}     # g5.xlarge
BIG_GPU = {"CPU": 48.0, "GPU": 4.0}      # g5.12xlarge


def _total(nodes):
    return {key: sum(n.get(key, 0.0) for n in nodes) for key in ("CPU", "GPU")}


@pytest.mark.parametrize("nodes", [[HEAD, SMALL_GPU], [HEAD, SMALL_GPU, BIG_GPU], [HEAD, BIG_GPU, BIG_GPU],
                                   [SMALL_GPU, SMALL_GPU, SMALL_GPU]])
@pytest.mark.parametrize("clients", [3, 12, 60])
def test_auto_shares_fit_heterogeneous_gpu_nodes(nodes, clients):
    sizes = {i: 10 + i for i in range(clients)}
    plan = plan_resources(_config(), sizes, _total(nodes), nodes)
    assert plan.gpus_per_actor > 0
    gpu_cpus = sum(n["CPU"] for n in nodes if n.get("GPU"))
    assert plan.num_actors == min(clients, int(gpu_cpus))  # the CPU-only head hosts no client actor
    assert _fits(plan, [n for n in nodes if n.get("GPU")])


def test_totals_alone_would_overcommit_a_mixed_cluster():
    nodes = [HEAD, SMALL_GPU, BIG_GPU]
    sizes = {i: 1 for i in range(60)}
    naive = plan_resources(_config(), sizes, _total(nodes))
    assert not _fits(naive, nodes)
    assert _fits(plan_resources(_config(), sizes, _total(nodes), nodes), nodes)


def test_cpu_only_spread_over_nodes_fits_every_actor():
    nodes = [{"CPU": 4.0}, {"CPU": 4.0}, {"CPU": 2.0}]
    plan = plan_resources(_config(), {i: 1 for i in range(20)}, _total(nodes), nodes)
    assert plan.num_actors == 10 and plan.gpus_per_actor == 0.0
    assert _fits(plan, nodes)


def test_fixed_fraction_fits_per_node():
    nodes = [HEAD, SMALL_GPU, SMALL_GPU]
    plan = plan_resources(_config(gpus_per_client=0.4), {i: 1 for i in range(12)}, _total(nodes), nodes)
    assert plan.num_actors == 4 and plan.gpus_per_actor == 0.4   # two per 1-GPU node
    assert _fits(plan, nodes)
