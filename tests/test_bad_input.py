"""Every row of the README's bad-input table: refused with exit status 2 and the documented text,
in one short message without a traceback, before Ray starts or a run folder appears."""

import os
import re
import shlex
from pathlib import Path

import pytest
import torch

from fgl_ray import cli

REPO = Path(__file__).resolve().parents[1]
ROW = re.compile(r"^\| `fgl-ray (?P<argv>[^`]+)`(?P<note>[^|]*)\| `(?P<says>.+)` \|$")


def bad_inputs() -> list[tuple[str, str]]:
    text = (REPO / "README.md").read_text()
    table = text.split("<!-- bad-inputs:begin -->")[1].split("<!-- bad-inputs:end -->")[0]
    return [(m["argv"], m["says"]) for line in table.splitlines() if (m := ROW.match(line))]


def test_the_table_holds_at_least_thirty_inputs():
    assert len(bad_inputs()) >= 30


@pytest.fixture
def fixture_folder(tmp_path, monkeypatch):
    """The files the table's inputs name, in the working folder; ``tune_configs`` as in the repo."""
    (tmp_path / "bad.yaml").write_text("rounds: [1\n")
    (tmp_path / "a-folder").mkdir()
    (tmp_path / "a-file").write_text("")
    (tmp_path / "read-only").mkdir(mode=0o555)
    (tmp_path / "no-base.yaml").write_text("axes:\n  aggregator_options.rho: [0.1]\n")
    (tmp_path / "bad-grid.yaml").write_text("base: {rounds: 1\n")
    (tmp_path / "tune_configs").symlink_to(REPO / "tune_configs")
    monkeypatch.chdir(tmp_path)
    def no_ray(args, config):     # an in-process run may go on to build its data; Ray must never start
        if config.backend == "ray":
            pytest.fail("Ray must not start on bad input")

    monkeypatch.setattr(cli, "_simulator", no_ray)
    yield tmp_path
    os.chmod(tmp_path / "read-only", 0o755)


@pytest.mark.parametrize(("argv", "says"), bad_inputs())
def test_a_bad_input_is_refused_with_the_documented_message(argv, says, fixture_folder, capsys):
    if ("--gpus-per-client" in argv or "--device cuda" in argv) and torch.cuda.is_available():
        pytest.skip("this machine has a GPU, so a GPU share or device is valid here")
    if "/proc/" in argv and not Path("/proc/self").is_dir():
        pytest.skip("this machine has no /proc pseudo file system")
    before = set(fixture_folder.iterdir())
    with pytest.raises(SystemExit) as exit_:
        raise SystemExit(cli.main(shlex.split(argv)))
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    assert says in err
    assert "Traceback" not in err and len(err.splitlines()) <= 4
    assert set(fixture_folder.iterdir()) == before                         # no results folder appeared


@pytest.mark.parametrize(("flag", "typed"), [("--sparse-features", "off"), ("--run-name", "001"), ("--task", "node")])
def test_words_are_taken_as_typed(flag, typed):
    args = cli.build_parser().parse_args(["run", flag, typed])
    assert getattr(args, flag[2:].replace("-", "_")) == typed


@pytest.mark.parametrize("argv", [["run", "--lr", "nan"], ["run", "--rounds", "0", "--momentum", "-1"],
                                  ["run", "--config", "missing.yaml"]])
def test_a_bad_value_is_answered_before_torch_or_pyg_load(argv, tmp_path):
    import subprocess
    import sys

    probe = ("import sys; from fgl_ray import cli; code = cli.main(sys.argv[1:]); "
             "loaded = sorted({'torch', 'torch_geometric', 'ray'} & set(sys.modules)); "
             "print('LOADED', loaded); sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, cwd=tmp_path,
                          timeout=60)
    assert done.returncode == 2, done.stderr
    assert "LOADED []" in done.stdout


@pytest.mark.parametrize(("typed", "value"), [("1e9", 1e9), ("1e-3", 1e-3), ("3", 3), ("[1, 2]", [1, 2]),
                                              ("node:0.5", "node:0.5"), ("louvain", "louvain"), ("inf", "inf"),
                                              ("e5", "e5")])
def test_numbers_yaml_leaves_as_text_are_taken_as_numbers(typed, value):
    assert cli._parse_value(typed) == value


def test_an_integer_flag_takes_exponent_notation():
    args = cli.build_parser().parse_args(["run", "--batch-size", "1e3"])
    from fgl_ray.config import load_config

    assert load_config(cli._config_values(args)).batch_size == 1000
