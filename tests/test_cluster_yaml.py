"""cluster.yaml passes the Ray cluster launcher's own checks, offline, and broken copies fail them.

``ray up`` runs ``prepare_config`` (merge the AWS provider defaults, setup commands, node-type
worker counts) and then ``validate_config`` (ray-schema.json plus cross-field checks) before it
contacts AWS; the same two functions run here, with no network and no credentials.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

jsonschema = pytest.importorskip("jsonschema")
from ray.autoscaler._private.util import prepare_config, validate_config  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CLUSTER_YAML = REPO / "cluster.yaml"


def launcher_checks(config: dict) -> dict:
    """What ``ray up`` checks before touching the cloud; returns the prepared config."""
    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)
    return prepared


@pytest.fixture(scope="module")
def cluster() -> dict:
    return yaml.safe_load(CLUSTER_YAML.read_text())


def test_cluster_yaml_passes_rays_validation(cluster):
    prepared = launcher_checks(cluster)
    assert prepared["provider"]["type"] == "aws"
    assert prepared["head_node_type"] in prepared["available_node_types"]


def test_head_is_cpu_and_workers_have_gpus(cluster):
    types = cluster["available_node_types"]
    head = types[cluster["head_node_type"]]
    assert "GPU" not in head["resources"]
    gpu_types = {name: t for name, t in types.items() if t["resources"].get("GPU", 0) > 0}
    assert {t["node_config"]["InstanceType"] for t in gpu_types.values()} >= {"g5.xlarge", "g5.12xlarge"}
    # gpus_per_client: auto reads the GPUs present when a run starts, so one GPU node is always up.
    assert any(t["min_workers"] >= 1 for t in gpu_types.values())
    assert sum(t.get("min_workers", 0) for t in types.values()) <= cluster["max_workers"]


def test_setup_installs_fgl_ray_with_a_cuda_torch_on_gpu_nodes(cluster):
    setup = "\n".join(cluster["setup_commands"])
    assert "pip install -e ~/fgl-ray" in setup
    assert "torch==2.13.0" in setup and "nvidia-smi" in setup and "whl/cpu" in setup
    assert "FGL_DATA_DIR" in setup
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        start = " ".join(cluster[key])
        assert "RAY_USAGE_STATS_ENABLED=0" in start and "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=1" in start


def test_file_mounts_point_at_the_repository_and_the_datasets(cluster):
    mounts = cluster["file_mounts"]
    assert (REPO / mounts["~/fgl-ray"]).resolve() == REPO
    datasets = (REPO / mounts["~/datasets"]).resolve()
    if not datasets.is_dir():
        pytest.skip(f"{datasets} is absent here; `ray up` needs it to exist")


def _misspelt_top_level_key(config):
    config["max_worker"] = config.pop("max_workers")


def _node_type_without_node_config(config):
    del config["available_node_types"]["gpu.g5.xlarge"]["node_config"]


def _negative_max_workers(config):
    config["max_workers"] = -1


def _fractional_gpu_resource(config):
    config["available_node_types"]["gpu.g5.xlarge"]["resources"]["GPU"] = 0.5


def _unknown_head_node_type(config):
    config["head_node_type"] = "head.gpu"


def _min_workers_above_max_workers(config):
    config["max_workers"] = 0


def _unknown_node_type_field(config):
    config["available_node_types"]["gpu.g5.xlarge"]["min_worker"] = 1


@pytest.mark.parametrize("breakage, message", [
    (_misspelt_top_level_key, "'max_worker' was unexpected"),
    (_node_type_without_node_config, "'node_config' is a required property"),
    (_negative_max_workers, "-1 is less than the minimum of 0"),
    (_fractional_gpu_resource, "0.5 is not of type 'integer'"),
    (_unknown_head_node_type, "must be one of `available_node_types`"),
    (_min_workers_above_max_workers, "smaller than the sum of `min_workers`"),
    (_unknown_node_type_field, "'min_worker' was unexpected"),
])
def test_broken_copies_fail_rays_validation(cluster, breakage, message):
    broken = copy.deepcopy(cluster)
    breakage(broken)
    with pytest.raises((jsonschema.ValidationError, ValueError)) as error:
        launcher_checks(broken)
    assert message in str(error.value)
