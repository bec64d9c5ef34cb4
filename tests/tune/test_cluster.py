"""Grids on a real 3-node Ray cluster (``ray.cluster_utils.Cluster``, one node with fake GPUs):
trials spread over the nodes, GPU client actors only on the GPU node, and a trial whose node is
lost mid-grid is retried elsewhere and resumes from its checkpoint (tests/tune/cluster_scenario.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCENARIO = Path(__file__).with_name("cluster_scenario.py")


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cluster")
    done = subprocess.run([sys.executable, str(SCENARIO), str(folder)], capture_output=True, text=True, timeout=900)
    lines = [line for line in done.stdout.splitlines() if line.startswith("SCENARIO ")]
    assert done.returncode == 0 and lines, done.stderr[-4000:]
    return json.loads(lines[-1].removeprefix("SCENARIO "))


def test_gpu_client_actors_run_only_on_the_gpu_node(scenario):
    gpu = scenario["gpu"]
    assert set(gpu["statuses"].values()) == {"TERMINATED"}
    for trial in gpu["trials"].values():
        assert trial["client_nodes"] == [scenario["nodes"]["gpu"]]
        assert all(ids for ids in trial["gpu_ids"])                    # each actor holds a GPU share
        assert trial["complete"]


def test_trials_spread_over_the_nodes(scenario):
    nodes = {node for trial in scenario["cpu"]["trials"].values() for node in trial["client_nodes"]}
    assert len(nodes) >= 2


def test_a_trial_on_a_lost_node_is_retried_elsewhere_from_its_checkpoint(scenario):
    cpu = scenario["cpu"]
    assert set(cpu["statuses"].values()) == {"TERMINATED"}
    lost = cpu["trials"][cpu["removed"]["trial"]]
    assert lost["resumed_from"] and lost["resumed_from"] > 0                  # not from round 0
    assert scenario["nodes"]["cpu"] not in lost["client_nodes"]               # finished on another node
    assert lost["complete"] and lost["rounds"] == 40


def test_every_trial_leaves_its_results_under_the_grid_folder(scenario):
    for grid in ("gpu", "cpu"):
        assert all(trial["run_dir_in_grid"] and trial["complete"] for trial in scenario[grid]["trials"].values())
