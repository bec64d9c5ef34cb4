"""The smoke grid end to end on local Ray: concurrent trials in their placement groups, tables,
heatmap, resume without rerunning finished trials, and ``fgl-ray report`` without Ray.

One grid run serves every test here (a trial's first federation starts its client worker,
seconds apiece; Tune hands the next trials the same actor and workers): the first pass makes two
trials fail on purpose, ``resume=True`` then restarts only those two.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest

from fgl_ray import cli
from fgl_ray.results.summary import SUMMARY_NAME
from fgl_ray.tune.grid import load_grid
from fgl_ray.tune.resources import FIRST_CLIENT_BUNDLE, trial_bundles
from fgl_ray.tune.tables import CURVES_TABLE, GRID_JSON, RUNS_DIRNAME, TRIAL_RECORD, TRIALS_TABLE, max_overlap

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "tune_configs" / "smoke.yaml"
#: The last two points (Tune runs baseline, p000, ... in order, two at a time), so that p001, third,
#: always starts on an actor a finished trial hands on, and keeps its record (a trial rerun by
#: ``resume`` rewrites its own); with p001 failing, which trials were reused hung on timing.
FAIL_FIRST = ("p002", "p003")
#: A trial whose actors do not fit its bundles waits forever; stop the grid instead of hanging.
BUDGET_S = 900


def failing(point_ids):
    """Subclasses the trainable so that the first of the given points raises before borrowing any
    worker and the others crash after their round 1 (after its checkpoint and its report)."""
    def wrap(trainable):
        class Failing(trainable):
            def _begin(self, tune_config):
                point_id = tune_config["point"]["id"]
                if point_id == point_ids[0]:
                    raise RuntimeError(f"injected failure of {point_id}")
                super()._begin(tune_config)
                self.crashes = point_id in point_ids

            def step(self):
                values = super().step()
                if self.crashes and values["round"] == 1:
                    raise RuntimeError(f"injected crash of {self.record['id']} after round 1")
                return values

        Failing.__name__ = Failing.__qualname__ = trainable.__name__    # Tune restores a trainable by its name
        return Failing
    return wrap


def _record(folder: Path, point_id: str) -> dict:
    return json.loads((folder / RUNS_DIRNAME / point_id / TRIAL_RECORD).read_text())


@pytest.fixture(scope="module")
def smoke_run(ray_session, tmp_path_factory):
    import ray

    from fgl_ray.tune.runner import run_grid

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the wrapper lives in this test module
    folder = tmp_path_factory.mktemp("smoke-grid")
    grid = load_grid(SMOKE, output_dir=folder)
    first = run_grid(grid, verbose=0, time_budget_s=BUDGET_S, wrap_trainable=failing(FAIL_FIRST))
    finished = {pid: (_record(folder, pid), (folder / RUNS_DIRNAME / pid / SUMMARY_NAME).stat().st_mtime_ns)
                for pid in first.executed}
    second = run_grid(load_grid(SMOKE, output_dir=folder), resume=True, verbose=0, time_budget_s=BUDGET_S)
    return {"grid": grid, "folder": folder, "first": first, "second": second, "finished": finished}


def test_first_pass_errors_only_the_injected_trials(smoke_run):
    first, grid = smoke_run["first"], smoke_run["grid"]
    assert sorted(first.errored) == sorted(FAIL_FIRST)
    assert sorted(first.executed) == sorted(p.id for p in grid.points if p.id not in FAIL_FIRST)


def test_resume_reruns_only_the_unfinished_trials(smoke_run):
    folder, second = smoke_run["folder"], smoke_run["second"]
    assert sorted(second.executed) == sorted(FAIL_FIRST)
    assert set(second.statuses.values()) == {"TERMINATED"}
    for point_id, (record, mtime) in smoke_run["finished"].items():
        assert _record(folder, point_id)["started_at"] == record["started_at"]
        assert (folder / RUNS_DIRNAME / point_id / SUMMARY_NAME).stat().st_mtime_ns == mtime


def test_a_trial_that_crashed_resumes_from_its_checkpoint(smoke_run):
    folder = smoke_run["folder"]
    started, crashed = FAIL_FIRST
    assert _record(folder, started)["resumed_from"] is None                # it had never run: from round 0
    assert _record(folder, crashed)["resumed_from"] == 2                   # checkpointed after round 1
    rows = pd.read_parquet(folder / RUNS_DIRNAME / crashed / "metrics.parquet")
    rounds = rows[(rows.split == "test") & (rows.metric == "accuracy") & (rows.client_id == "server") &
                  (rows.domain == "all")]
    assert sorted(rounds["round"]) == sorted(set(rounds["round"])) and set(rounds["round"]) >= {0, 1, 2}
    assert json.loads((folder / RUNS_DIRNAME / crashed / SUMMARY_NAME).read_text())["coverage"]["complete"]


def test_two_trials_ran_at_once_on_two_cpus(smoke_run):
    folder = smoke_run["folder"]
    for executed in (smoke_run["first"].executed, smoke_run["second"].executed):
        intervals = [(_record(folder, p)["started_at"], _record(folder, p)["ended_at"]) for p in executed]
        assert max_overlap(intervals) >= 2
        starts, ends = zip(*intervals)
        assert sorted(starts)[1] < min(ends)  # the second trial started before the first one ended
    assert smoke_run["second"].cpus_per_trial * 2 <= 2.0


def test_actors_fill_the_trials_own_bundles(smoke_run):
    folder, grid, second = smoke_run["folder"], smoke_run["grid"], smoke_run["second"]
    for point in grid.points:
        record = _record(folder, point.id)
        num_clients = sum(len(hosted) for hosted in record["plan"]["assignment"])
        expected = trial_bundles(point.config, num_clients, second.cpus_per_trial)
        assert [b["CPU"] for b in record["bundles"]] == pytest.approx([b["CPU"] for b in expected])
        # after round 0 every CPU of every bundle is taken: the trial's actor (the server) and
        # each client worker run inside the trial's placement group
        assert all(free["CPU"] == pytest.approx(0.0, abs=1e-6) for free in record["bundle_free"])
        assert len(record["bundles"]) - FIRST_CLIENT_BUNDLE == len(record["plan"]["assignment"])


def test_tables_hold_every_trial_and_every_round(smoke_run):
    folder, grid = smoke_run["folder"], smoke_run["grid"]
    trials = pd.read_parquet(folder / TRIALS_TABLE)
    assert sorted(trials["trial_id"]) == sorted(p.id for p in grid.points)
    assert set(trials["status"]) == {"TERMINATED"}
    assert trials["score"].between(0, 1).all() and trials["baseline"].sum() == 1
    for axis in grid.axis_paths:
        values = dict(zip(trials["trial_id"], trials[axis]))
        assert all(values[p.id] == p.axes[axis] for p in grid.trials)
    summaries = {p.id: json.loads((folder / RUNS_DIRNAME / p.id / SUMMARY_NAME).read_text()) for p in grid.points}
    assert all(math.isclose(row.score, summaries[row.trial_id]["avg_over_domains"]["accuracy"]["mean"])
               for row in trials.itertuples())
    curves = pd.read_parquet(folder / CURVES_TABLE)
    rounds = grid.points[0].config.rounds
    test_avg = curves[(curves.split == "test") & (curves.domain == "avg_over_domains") & (curves.metric == "accuracy")]
    assert test_avg.groupby("trial_id")["round"].apply(sorted).map(tuple).to_dict() == {
        p.id: tuple(range(rounds)) for p in grid.points}
    assert {"trial_id", "round", "metric", "value", *grid.axis_paths} <= set(curves.columns)


def test_heatmap_and_tensorboard_files(smoke_run):
    folder, second = smoke_run["folder"], smoke_run["second"]
    assert [p.name for p in second.heatmaps] == ["heatmap.png"]
    assert second.heatmaps[0].stat().st_size > 0
    events = list((folder / "tune").rglob("events.out.tfevents.*"))
    assert len(events) >= len(smoke_run["grid"].points)


def test_trial_reports_reached_tune(smoke_run):
    folder, grid = smoke_run["folder"], smoke_run["grid"]
    rounds = grid.points[0].config.rounds
    trials = pd.read_parquet(folder / TRIALS_TABLE).set_index("trial_id")
    for point in grid.points:
        tune_dir = Path(trials.loc[point.id, "tune_dir"])
        assert tune_dir.parent == folder / "tune" and tune_dir.name.startswith(point.id)
        results = [json.loads(line) for line in (tune_dir / "result.json").read_text().splitlines()]
        first = _record(folder, point.id)["resumed_from"] or 0   # a resumed trial reports the rounds it ran
        assert [r["round"] for r in results] == list(range(first, rounds))
        assert {"test/accuracy/avg", "test/accuracy/all", "val/accuracy/all", "lastk/accuracy/avg/mean",
                "score"} <= set(results[-1])


def test_rerun_without_resume_is_refused(smoke_run):
    from fgl_ray.tune.grid import GridError
    from fgl_ray.tune.runner import run_grid

    with pytest.raises(GridError, match="--resume"):
        run_grid(load_grid(SMOKE, output_dir=smoke_run["folder"]), verbose=0)


def test_resume_with_a_changed_grid_is_refused(smoke_run):
    from fgl_ray.tune.grid import GridError
    from fgl_ray.tune.runner import run_grid

    changed = load_grid(SMOKE, output_dir=smoke_run["folder"], set_values={"rounds": 2})
    with pytest.raises(GridError, match="differs from the one stored"):
        run_grid(changed, resume=True, verbose=0)


def test_report_redraws_the_heatmap_from_stored_tables_without_ray(smoke_run, tmp_path, monkeypatch, capsys):
    import ray

    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("report must not start Ray"))
    copy = tmp_path / "grid"
    copy.mkdir()
    for name in (GRID_JSON, TRIALS_TABLE):  # the tables only: no runs, no Tune state
        shutil.copy(smoke_run["folder"] / name, copy / name)
    assert cli.main(["report", str(copy)]) == 0
    out = capsys.readouterr().out
    assert (copy / "heatmap.png").stat().st_size > 0
    assert "baseline" in out and "heatmap.png" in out


def test_report_redraws_a_single_run(smoke_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(smoke_run["folder"] / RUNS_DIRNAME / "p000", run)
    (run / "learning_curves.png").unlink()
    (run / SUMMARY_NAME).unlink()
    assert cli.main(["report", str(run)]) == 0
    assert (run / "learning_curves.png").stat().st_size > 0 and (run / SUMMARY_NAME).is_file()
    assert "AVG" in capsys.readouterr().out


def test_resume_into_a_folder_without_a_grid_is_refused(tmp_path):
    from fgl_ray.tune.grid import GridError
    from fgl_ray.tune.runner import run_grid

    with pytest.raises(GridError, match="holds no grid to resume"):
        run_grid(load_grid(SMOKE, output_dir=tmp_path / "elsewhere"), resume=True, verbose=0)
    assert not (tmp_path / "elsewhere").exists() or not any((tmp_path / "elsewhere").iterdir())


def _scores(run_dir: Path) -> pd.DataFrame:
    frame = pd.read_parquet(run_dir / "metrics.parquet").drop(columns="run_id")
    frame = frame[~frame.metric.str.contains("seconds")]
    return frame.sort_values([c for c in frame.columns if c != "value"]).reset_index(drop=True)


def test_later_trials_reuse_warm_workers_and_get_a_fresh_runs_metrics(smoke_run, tmp_path):
    from fgl_ray.runtime import run_experiment

    folder, grid = smoke_run["folder"], smoke_run["grid"]
    records = {point.id: _record(folder, point.id) for point in grid.points}
    reused = [point for point in grid.points if records[point.id]["reused_workers"]
              and records[point.id]["resumed_from"] is None]
    assert reused, "no trial ran on a reused trial actor and its workers"
    for point in reused:
        fresh = run_experiment(point.config.model_copy(update={"backend": "local", "output_dir": tmp_path,
                                                               "run_name": point.id}), progress=False)
        pd.testing.assert_frame_equal(_scores(folder / RUNS_DIRNAME / point.id), _scores(fresh.run_dir),
                                      check_exact=True)
        assert records[point.id]["startup"]["phases"]["workers"] < 1.0     # its workers were up already


def test_a_one_cpu_auto_trial_hosts_its_clients_and_gets_a_fresh_runs_metrics(ray_session, tmp_path):
    """On 2 CPUs with clients_per_actor auto, each trial runs its clients in its own actor (no
    worker beside it on its core), reused actors included, with the metrics of a fresh run."""
    from fgl_ray.runtime import run_experiment
    from fgl_ray.tune.runner import run_grid

    folder = tmp_path / "grid"
    grid = load_grid(SMOKE, set_values={"clients_per_actor": "auto", "rounds": 2, "last_k": 1}, output_dir=folder)
    outcome = run_grid(grid, verbose=0, time_budget_s=BUDGET_S)
    assert sorted(outcome.executed) == sorted(point.id for point in grid.points)
    records = {point.id: _record(folder, point.id) for point in grid.points}
    assert all(record.get("clients_in_trial") and "plan" not in record for record in records.values())
    assert any(record["reused_actor"] for record in records.values())
    assert all(group == [{"CPU": outcome.cpus_per_trial}] for group in json.loads((folder / "grid.json").read_text())
               ["bundles"].values())
    for point in grid.points:
        fresh = run_experiment(point.config.model_copy(update={"backend": "local", "output_dir": tmp_path / "fresh",
                                                               "run_name": point.id}), progress=False)
        pd.testing.assert_frame_equal(_scores(folder / RUNS_DIRNAME / point.id), _scores(fresh.run_dir),
                                      check_exact=True)
