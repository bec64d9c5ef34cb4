"""One rule for every name that becomes a folder: run names, ``--compare`` names, grid names and
grid point ids stay one folder inside the folder they are made in."""

from pathlib import Path

import pytest

from fgl_ray import cli
from fgl_ray.config import ConfigError, load_config
from fgl_ray.errors import FOLDER_NAME_RULE, as_folder_name, folder_name, output_problem
from fgl_ray.runtime.federation import default_run_id
from fgl_ray.tune.grid import GridError, GridPoint, build_grid

HOSTILE = ["..", ".", "", "a/b", "../../escape", "/etc", "/", "a\\b", "a\x00b", "line\nbreak", "tab\tname",
           "bell\x07", "x" * 256, "é" * 128, "a b", "~", "$HOME", "*"]
FINE = ["001", "fedia-rho_0.5", "run.v2", "a", "x" * 255, "é" * 127, "-leading-dash"]
SMALL = {"synthetic": {"num_domains": 2, "nodes_per_domain": 40, "num_features": 8}, "hidden": 8, "rounds": 1}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_name_that_is_not_one_plain_folder_is_refused_with_the_rule(name):
    with pytest.raises(ValueError, match="is not one folder name") as caught:
        folder_name(name, "run_name")
    assert FOLDER_NAME_RULE in str(caught.value)


@pytest.mark.parametrize("name", FINE)
def test_plain_folder_names_pass(name):
    assert folder_name(name, "run_name") == name


@pytest.mark.parametrize("name", HOSTILE + ["mm:/data/amazon", "fedavg-mean-mm:../x-louvain"])
def test_a_derived_name_is_made_into_one_folder_name(name):
    made = as_folder_name(name)
    assert folder_name(made, "derived") == made
    assert "/" not in made and ".." != made


@pytest.mark.parametrize("name", ["../../escape", "a/b", "/tmp/abs", "", "bad\x1bname"])
def test_the_config_refuses_a_run_name_that_leaves_the_output_folder(name, tmp_path):
    with pytest.raises(ConfigError, match="run_name .* is not one folder name"):
        load_config({"output_dir": str(tmp_path), "run_name": name})


def test_a_default_run_name_from_a_dataset_path_stays_one_folder(tmp_path):
    config = load_config({"output_dir": str(tmp_path)}).model_copy(update={"dataset": "mm:/data/../amazon"})
    name = default_run_id(config)
    assert folder_name(name, "default") == name and "mm_" in name


@pytest.mark.parametrize("names", ["fedavg,a/b", "fedavg,..", "fedavg,", "fedavg,/abs"])
def test_compare_names_follow_the_rule(names, monkeypatch, capsys):
    monkeypatch.setattr(cli, "_simulator", lambda *args: pytest.fail("Ray must not start on bad input"))
    assert cli.main(["run", "--compare", names]) == 2
    assert "--compare name" in capsys.readouterr().err


def test_compare_refuses_a_name_twice(monkeypatch, capsys):
    monkeypatch.setattr(cli, "_simulator", lambda *args: pytest.fail("Ray must not start on bad input"))
    assert cli.main(["run", "--compare", "fedavg,local,fedavg"]) == 2
    assert "--compare names fedavg more than once" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["../up", "a/b", "/abs", "ctl\x01"])
def test_an_explicit_grid_name_follows_the_rule(name):
    with pytest.raises(GridError, match="the grid's name .* is not one folder name"):
        build_grid({"name": name, "base": SMALL, "axes": {"lr": [0.1]}})


def test_a_grid_named_after_an_odd_file_stem_gets_a_plain_folder():
    grid = build_grid({"base": SMALL, "axes": {"lr": [0.1]}}, name="my grid (v2)")
    assert grid.output_dir.name == "my_grid__v2_" and folder_name(grid.output_dir.name, "grid") == grid.name


@pytest.mark.parametrize("point_id", ["../p000", "p/0", ""])
def test_a_grid_point_id_follows_the_rule(point_id):
    with pytest.raises(ValueError, match="grid point id"):
        GridPoint(point_id, {}, load_config(SMALL))


def test_every_generated_point_id_is_a_folder_name():
    axes = {"lr": [0.1, 0.2], "aggregator_options.rho": [0.1, 0.2]}
    grid = build_grid({"base": SMALL | {"aggregator": "fedia"}, "axes": axes})
    assert all(folder_name(point.id, "point") for point in grid.points)


def test_a_folder_that_cannot_be_created_is_named_with_the_reason(tmp_path):
    (tmp_path / "a-file").write_text("")
    assert output_problem(tmp_path / "a-file") == "is a file"
    assert "lies under the file" in output_problem(tmp_path / "a-file" / "runs")
    assert output_problem(tmp_path / "new" / "deeper") is None
    assert output_problem(tmp_path) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]               # the probe leaves nothing
    if Path("/proc/self").is_dir():                                                 # a pseudo file system
        assert "cannot be created in '/proc'" in output_problem(Path("/proc/nope"))


def test_a_read_only_output_folder_is_refused(tmp_path):
    import os

    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    try:
        assert "refuses new folders" in output_problem(locked)
        assert "cannot be created in" in output_problem(locked / "runs")
    finally:
        locked.chmod(0o755)


def test_a_resumed_folder_is_held_to_the_same_rule(tmp_path, monkeypatch, capsys):
    import json

    import torch

    from fgl_ray.runtime.checkpoint import CHECKPOINT_FILE

    monkeypatch.setattr(cli, "_simulator", lambda *args: pytest.fail("Ray must not start on bad input"))
    folder = tmp_path / "renamed by hand"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({"config": {"rounds": 2}}))
    torch.save({}, folder / CHECKPOINT_FILE)
    assert cli.main(["run", "--resume", str(folder)]) == 2
    assert "run_name 'renamed by hand' is not one folder name" in capsys.readouterr().err


def test_an_unknown_name_suggests_the_closest_and_points_out_look_alike_characters():
    from fgl_ray.registry import did_you_mean

    names = ["cora", "citeseer", "twitch"]
    assert did_you_mean("coar", names) == " (did you mean 'cora'?)"
    assert did_you_mean("\u0441ora", names) == " (did you mean 'cora'? the name holds the non-ASCII '\u0441')"
    assert did_you_mean("zzzzzz", names) == ""
    with pytest.raises(ConfigError, match="unknown algorithm 'fedavgg' \\(did you mean 'fedavg'\\?\\)"):
        load_config({"algorithm": "fedavgg"})


def test_report_reads_an_old_runs_task_whatever_its_folder_was_called():
    from fgl_ray.tune.report import headline_metric

    recorded = {"dataset": "synthetic-mm", "task": "link-prediction", "missing": "node:0.3", "model": "mm_gnn",
                "run_name": "x-fill=mean-s0", "output_dir": "/proc/gone"}
    assert headline_metric(recorded) == "auc"
