"""GPU placement with fake GPUs on a CPU machine, and no GPU requests without GPUs.

The fake-GPU Ray (``num_gpus=1``) cannot share a process with the session Ray, so it runs in a
subprocess (fake_gpu_probe.py) that plays a GPU node (``CUDA_VISIBLE_DEVICES=0``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import ray

from fgl_ray.runtime import open_backend

PROBE = Path(__file__).with_name("fake_gpu_probe.py")
REPO = Path(__file__).resolve().parents[2]
TINY = dict(
    dataset="synthetic",
    synthetic={"num_domains": 3, "nodes_per_domain": 90, "num_features": 8, "num_classes": 3},
    clients_per_domain=1, hidden=16, rounds=2, local_epochs=2, torch_threads=1,
)


@pytest.fixture(scope="module")
def fake_gpu_report(tmp_path_factory):
    values = TINY | {"output_dir": str(tmp_path_factory.mktemp("fake-gpu"))}
    env = os.environ | {"CUDA_VISIBLE_DEVICES": "0", "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
                        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, str(PROBE), json.dumps(values)], capture_output=True, text=True,
                          timeout=300, env=env, cwd=REPO)
    lines = [line for line in done.stdout.splitlines() if line.startswith("PROBE ")]
    assert done.returncode == 0 and lines, f"probe failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return json.loads(lines[-1].removeprefix("PROBE "))


def test_auto_schedules_gpu_fractions_and_trains_on_cpu_without_cuda(fake_gpu_report):
    auto = fake_gpu_report["settings"]["auto"]
    assert fake_gpu_report["cluster"]["GPU"] == 1.0
    assert auto["num_actors"] == 2 and auto["plan_gpus_per_actor"] == 0.5
    assert [r.get("GPU") for r in auto["required_resources"]] == [0.5, 0.5]
    for placement in auto["placements"]:
        assert placement["resources"]["GPU"] == 0.5
        assert placement["gpu_ids"] == ["0"] and placement["cuda_visible_devices"] == "0"
        assert placement["device"] == "cpu"           # CPU build of torch: no CUDA, so CPU
        assert placement["memory_fraction"] is None   # the cap applies only on cuda
    assert sorted(c for p in auto["placements"] for c in p["clients"]) == [0, 1, 2]


def test_zero_requests_no_gpu_and_hides_the_nodes_gpus(fake_gpu_report):
    # Ray 2.60 leaves CUDA_VISIBLE_DEVICES alone for num_gpus=0 workers: a plain actor sees the GPU.
    assert fake_gpu_report["control_cuda_visible_devices"] == "0"
    none = fake_gpu_report["settings"]["0"]
    assert all("GPU" not in r for r in none["required_resources"])
    for placement in none["placements"]:
        assert placement["gpu_ids"] == [] and "GPU" not in placement["resources"]
        assert placement["cuda_visible_devices"] == ""
        assert placement["device"] == "cpu"


def test_a_round_of_training_completes_on_fake_gpus(fake_gpu_report):
    round_ = fake_gpu_report["settings"]["auto"]["round"]
    assert round_ == {"trained": [0, 1, 2], "failures": 0, "aggregated": True, "evaluated": [0, 1, 2]}


def test_no_actor_asks_for_a_gpu_on_a_cluster_without_gpus(ray_session, tiny_config, tiny_data):
    assert ray.cluster_resources().get("GPU", 0) == 0
    handle = open_backend(tiny_config(backend="ray"), tiny_data)
    try:
        assert handle.plan.gpus_per_actor == 0.0
        assert "runtime_env" not in handle.plan.shape.options()
        placements = handle.placements()
        assert len(placements) == handle.plan.num_actors
        for placement in placements:
            assert "GPU" not in placement["resources"] and placement["gpu_ids"] == []
            assert placement["device"] == "cpu"
    finally:
        handle.close()


def test_fixed_fraction_without_gpus_fails_before_any_actor_starts(ray_session, tiny_config, tiny_data):
    with pytest.raises(ValueError, match="gpus_per_client=0.5.*wait forever"):
        open_backend(tiny_config(backend="ray", gpus_per_client=0.5), tiny_data)


def test_memory_is_capped_at_the_share_only_on_cuda(monkeypatch):
    import torch

    from actors.client import cap_gpu_memory

    calls = []
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, d=None: calls.append((f, d)))
    assert cap_gpu_memory(torch.device("cpu"), 0.5) is None
    assert cap_gpu_memory(torch.device("cuda", 0), 1.0) is None      # a whole GPU: nothing to cap
    assert cap_gpu_memory(torch.device("cuda", 0), 0.25) == 0.25
    assert calls == [(0.25, torch.device("cuda", 0))]


@pytest.mark.parametrize("gpu_ids, cuda, noset, expected", [
    ([], True, "", "cpu"),             # Ray gave no GPU: CPU even if torch sees one
    (["3"], False, "", "cpu"),         # a GPU share but no CUDA in torch: CPU
    (["3"], True, "", "cuda:0"),       # Ray narrowed CUDA_VISIBLE_DEVICES to GPU 3, seen as 0
    (["3"], True, "1", "cuda:3"),      # RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES: the real id
])
def test_assigned_device_follows_ray_and_torch(monkeypatch, gpu_ids, cuda, noset, expected):
    import torch

    from actors import client

    monkeypatch.setattr(client.ray, "get_gpu_ids", lambda: gpu_ids)
    monkeypatch.setattr(client.torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setenv("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES", noset)
    assert client.assigned_device() == torch.device(expected)
