"""The warm simulator: runs on reused client workers give exactly a fresh worker's metrics, the
start-up breakdown adds up to the time the run took to finish round 0, and a federation of a
thousand clients runs on two workers."""

from __future__ import annotations

import json
import time

import pandas as pd
import pytest

from fgl_ray import cli
from fgl_ray.config import load_config
from fgl_ray.data import build_federated_data
from fgl_ray.results import read_metrics
from fgl_ray.runtime import Simulator, run_experiment
from fgl_ray.runtime.timing import PHASES, StartupClock


def _scores(run_dir) -> pd.DataFrame:
    """Every metric row but wall-clock timings, in a fixed order."""
    frame = read_metrics(run_dir).drop(columns="run_id")
    frame = frame[~frame.metric.str.contains("seconds")]
    return frame.sort_values([c for c in frame.columns if c != "value"]).reset_index(drop=True)


def _workers(run_dir) -> list[str]:
    return sorted(p["actor_id"] for p in json.loads((run_dir / "placements.json").read_text()))


def test_moon_then_fedavg_on_the_same_workers_equals_a_fresh_fedavg(ray_session, tiny_config, tiny_data):
    with Simulator(progress=False) as simulator:
        moon = simulator.run(tiny_config(backend="ray", algorithm="moon", run_name="moon", rounds=3), tiny_data)
        warm = simulator.run(tiny_config(backend="ray", algorithm="fedavg", run_name="warm", rounds=3), tiny_data)
        again = simulator.run(tiny_config(backend="ray", algorithm="fedavg", run_name="again", rounds=3), tiny_data)
    fresh = run_experiment(tiny_config(backend="ray", algorithm="fedavg", run_name="fresh", rounds=3), tiny_data,
                           progress=False)
    assert _workers(moon.run_dir) == _workers(warm.run_dir) == _workers(again.run_dir)   # the same processes
    assert _workers(fresh.run_dir) != _workers(warm.run_dir)
    pd.testing.assert_frame_equal(_scores(warm.run_dir), _scores(fresh.run_dir), check_exact=True)
    pd.testing.assert_frame_equal(_scores(again.run_dir), _scores(fresh.run_dir), check_exact=True)
    assert not _scores(moon.run_dir).equals(_scores(warm.run_dir))                    # MOON did train otherwise
    assert warm.metrics.equals(read_metrics(warm.run_dir))


def test_a_warm_run_skips_the_start_up_and_its_parts_add_up_to_the_time_to_round_0(ray_session, tiny_config,
                                                                                  tiny_data):
    ended = {}

    def stamp(result, rows):
        ended.setdefault(result.round, time.time())

    with Simulator(progress=False) as simulator:
        simulator.run(tiny_config(backend="ray", run_name="cold"), tiny_data)
        launched = time.time()
        warm = simulator.run(tiny_config(backend="ray", run_name="warm"), tiny_data, on_round=stamp,
                             clock=StartupClock(launched))
    startup = warm.summary["startup"]
    assert list(startup["phases"]) == list(PHASES)
    measured = ended[0] - launched
    assert startup["total"] == pytest.approx(sum(startup["phases"].values()))
    assert startup["total"] == pytest.approx(measured, rel=0.05, abs=0.05)     # the rows are written in between
    assert startup["phases"]["workers"] < 0.5 and startup["phases"]["ray"] < 0.5       # nothing started again
    rows = warm.metrics
    parts = rows[rows.split == "startup"].set_index("metric")["value"]
    assert parts["total_seconds"] == pytest.approx(startup["total"])
    timing = rows[rows.split == "timing"]
    assert sorted(timing["round"].unique()) == [0, 1]                                 # every round, the last too
    assert set(warm.summary["round_timing"]) >= {"client_slowest_seconds", "aggregate_seconds", "round_seconds"}


def test_compare_runs_every_federation_on_one_simulator(ray_session, tmp_path, capsys):
    flags = ["--rounds", "2", "--no-progress", "--synthetic", "{nodes_per_domain: 60, num_features: 8}", "--hidden", "8",
             "--torch-threads", "1", "--run-name", "cmp"]
    assert cli.main(["run", "--backend", "ray", "--compare", "moon,fedavg", "--output-dir", str(tmp_path / "ray"),
                     *flags]) == 0
    out = capsys.readouterr().out
    assert "moon+mean: start-up" in out and "fedavg+mean: start-up" in out
    runs = {name: tmp_path / "ray" / f"cmp-{name}" for name in ("moon", "fedavg")}
    assert _workers(runs["moon"]) == _workers(runs["fedavg"])
    assert cli.main(["run", "--backend", "local", "--algorithm", "fedavg", "--output-dir", str(tmp_path / "alone"),
                     *flags]) == 0
    pd.testing.assert_frame_equal(_scores(runs["fedavg"]), _scores(tmp_path / "alone" / "cmp"), check_exact=True)


def test_a_thousand_clients_run_two_rounds_on_two_workers(ray_session, tmp_path):
    config = load_config({
        "dataset": "synthetic", "partition": "random", "num_clients": 1000, "fraction_fit": 0.1, "rounds": 2,
        "synthetic": {"num_domains": 2, "nodes_per_domain": 4000, "num_features": 8, "num_classes": 3},
        "hidden": 8, "local_epochs": 1, "torch_threads": 1, "backend": "ray", "output_dir": tmp_path})
    data = build_federated_data(config)
    assert len(data.clients) == 1000
    result = run_experiment(config, data, progress=False)
    rows = result.metrics
    trained = rows[(rows.split == "train") & (rows.metric == "seconds")].groupby("round").client_id.nunique()
    assert trained.to_dict() == {0: 100, 1: 100}
    tested = rows[(rows.split == "test") & (rows.metric == "accuracy") & (rows.client_id != "server")]
    assert tested.groupby("round").client_id.nunique().to_dict() == {0: 1000, 1: 1000}
    assert len(json.loads((result.run_dir / "placements.json").read_text())) == 2
    assert result.summary["coverage"]["complete"]
