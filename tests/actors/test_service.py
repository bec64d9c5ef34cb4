"""The worker pool as a service (tests/actors/service_scenario.py): CLI runs connected to a cluster
borrow its warm workers, in turn and at once, and get exactly the metrics of a run on fresh workers;
a worker killed mid-run is replaced and the run completes; ``pool status`` and ``pool stop``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from fgl_ray.results import read_metrics

SCENARIO = Path(__file__).with_name("service_scenario.py")


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    folder = tmp_path_factory.mktemp("service")
    done = subprocess.run([sys.executable, str(SCENARIO), str(folder)], capture_output=True, text=True, timeout=1200)
    lines = [line for line in done.stdout.splitlines() if line.startswith("SCENARIO ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(lines[-1].removeprefix("SCENARIO "))
    for name, entry in report.items():
        if isinstance(entry, dict) and "code" in entry and name != "after_stop":
            assert entry["code"] == 0, f"{name}: {entry['out']}"
    return report


def _scores(run_dir: str) -> pd.DataFrame:
    frame = read_metrics(Path(run_dir)).drop(columns="run_id")
    frame = frame[~frame.metric.str.contains("seconds")]
    return frame.sort_values([c for c in frame.columns if c != "value"]).reset_index(drop=True)


def test_runs_borrowing_in_turn_get_a_fresh_runs_metrics(scenario):
    fresh = _scores(scenario["fresh_A"]["run_dir"])
    for name in ("turn_A", "turn_A2"):
        pd.testing.assert_frame_equal(_scores(scenario[name]["run_dir"]), fresh, check_exact=True)
    assert "started 4 warm client workers" in scenario["start"]["out"]


def test_pool_workers_are_reused_across_runs(scenario):
    pool = set(scenario["turn_A"]["workers"]) | set(scenario["turn_B"]["workers"])
    assert scenario["fresh_A"]["workers"] and not set(scenario["fresh_A"]["workers"]) & pool   # own, before the pool
    later = set(scenario["turn_A2"]["workers"]) | set(scenario["both_A"]["workers"]) | set(scenario["both_B"]["workers"])
    assert len(pool | later) <= 4                                                  # nothing but the pool's four


def test_two_runs_at_once_get_disjoint_workers_and_their_alone_metrics(scenario):
    both_a, both_b = scenario["both_A"], scenario["both_B"]
    assert len(both_a["workers"]) == len(both_b["workers"]) == 2
    assert not set(both_a["workers"]) & set(both_b["workers"])
    assert "waiting for a free worker" not in both_a["out"] + both_b["out"]
    pd.testing.assert_frame_equal(_scores(both_a["run_dir"]), _scores(scenario["fresh_A"]["run_dir"]), check_exact=True)
    pd.testing.assert_frame_equal(_scores(both_b["run_dir"]), _scores(scenario["turn_B"]["run_dir"]), check_exact=True)


def test_a_pool_worker_killed_mid_run_is_replaced_and_the_run_completes(scenario):
    kill = scenario["kill"]
    assert kill["complete"]
    failures = [json.loads(line) for line in (Path(kill["run_dir"]) / "failures.jsonl").read_text().splitlines()]
    assert {(f["round"], f["client_id"]) for f in failures} >= {(1, 0)}
    rows = read_metrics(Path(kill["run_dir"]))
    trained = rows[(rows.split == "train") & (rows.metric == "seconds")].groupby("round").client_id.nunique()
    assert trained[2] == trained[3] == 3                                           # client 0 is back
    assert "pool: 4 workers" in scenario["status"]["out"] and "4 idle" in scenario["status"]["out"]


def test_a_warm_pool_run_reaches_round_0_without_starting_workers(scenario):
    phases = scenario["turn_A2"]["startup"]["phases"]
    assert phases["workers"] < 1.0 and phases["setup"] < 1.0


def test_stop_ends_the_pool(scenario):
    assert "stopped the pool" in scenario["stop"]["out"]
    assert scenario["after_stop"]["code"] == 1 and "no pool runs" in scenario["after_stop"]["out"]
