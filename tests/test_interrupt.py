"""Ctrl-C and SIGTERM end a run promptly: one line, exit status 130, the finished rounds summarised,
the run marked incomplete and checkpointed; ``fgl-ray run --resume`` continues it to the metrics of
an uninterrupted run, also after a hard kill (from the periodic checkpoint)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest


ENV = os.environ | {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
TINY = ["--algorithm", "fedavg", "--no-progress", "--synthetic", "{nodes_per_domain: 60, num_features: 8}", "--hidden",
        "8", "--torch-threads", "1"]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "fgl_ray.cli", *args]


def _start(tmp_path, *args: str, after_part: int = 3) -> subprocess.Popen:
    """Starts ``fgl-ray run`` and returns once it has written ``after_part`` metric parts."""
    process = subprocess.Popen(_cli("run", *TINY, "--output-dir", str(tmp_path), *args), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=ENV,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    while not list(tmp_path.glob(f"*/metrics.parquet/part-{after_part:06d}.parquet")) and time.time() < deadline:
        time.sleep(0.1)
    return process


def _interrupt_a_run(tmp_path, backend: str, signum: int):
    process = _start(tmp_path, "--backend", backend, "--rounds", "100000")
    assert process.poll() is None, process.communicate()
    sent = time.time()
    process.send_signal(signum)
    out, err = process.communicate(timeout=60)
    return process.returncode, time.time() - sent, out, err


def _metric_rows(run_dir):
    import pandas as pd

    frame = pd.read_parquet(run_dir / "metrics.parquet").drop(columns="run_id")
    frame = frame[~frame.metric.str.contains("seconds")]
    return frame.sort_values([c for c in frame.columns if c != "value"]).reset_index(drop=True)


@pytest.mark.parametrize(("backend", "signum"), [("local", signal.SIGINT), ("ray", signal.SIGTERM)])
def test_an_interrupted_run_keeps_its_finished_rounds_and_says_so(tmp_path, backend, signum):
    code, seconds, out, err = _interrupt_a_run(tmp_path, backend, signum)
    assert code == 130, err
    assert seconds < 30
    assert "Traceback" not in err and "SIGTERM received" not in err
    assert [line for line in err.splitlines() if line.startswith("fgl-ray:")] == err.strip().splitlines()[-1:]
    assert "interrupted after" in err and "of 100000 rounds" in err
    assert "continue it with: fgl-ray run --resume " in err
    (summary_file,) = tmp_path.glob("*/summary.json")
    coverage = json.loads(summary_file.read_text())["coverage"]
    assert coverage["interrupted"] and not coverage["complete"] and 3 <= coverage["rounds"] < 100000
    assert "fedavg+mean" in out                                                # the table of the finished rounds


def _resumed_equals_whole(tmp_path, run_dir, rounds: str, *backend: str) -> None:
    resumed = subprocess.run(_cli("run", "--resume", str(run_dir), *backend), capture_output=True, text=True, env=ENV,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    whole = subprocess.run(_cli("run", *TINY, "--output-dir", str(tmp_path / "whole"), "--run-name", "whole",
                                "--rounds", rounds, "--backend", "local"), capture_output=True, text=True, env=ENV,
                           timeout=300)
    assert whole.returncode == 0, whole.stderr
    import pandas as pd

    pd.testing.assert_frame_equal(_metric_rows(run_dir), _metric_rows(tmp_path / "whole" / "whole"))
    assert json.loads((run_dir / "summary.json").read_text())["coverage"]["complete"]


def test_a_sigterm_ray_run_resumes_in_process_to_the_uninterrupted_metrics(tmp_path):
    process = _start(tmp_path / "runs", "--backend", "ray", "--rounds", "150", "--run-name", "cut")
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    run_dir = tmp_path / "runs" / "cut"
    assert (run_dir / "checkpoint.pt").is_file()
    assert json.loads((run_dir / "summary.json").read_text())["checkpoint"]["next_round"] >= 3
    _resumed_equals_whole(tmp_path, run_dir, "150", "--backend", "local")


def test_a_killed_run_resumes_from_its_periodic_checkpoint(tmp_path):
    process = _start(tmp_path / "runs", "--backend", "local", "--rounds", "200", "--run-name", "cut",
                     "--checkpoint-every", "4", after_part=9)
    process.kill()                                                  # no handler runs: only the checkpoint is left
    process.communicate(timeout=60)
    run_dir = tmp_path / "runs" / "cut"
    assert (run_dir / "checkpoint.pt").is_file() and not (run_dir / "summary.json").exists()
    _resumed_equals_whole(tmp_path, run_dir, "200")


def test_resume_refuses_flags_that_change_the_run(tmp_path):
    run_dir = tmp_path / "cut"
    run_dir.mkdir()
    (run_dir / "manifest.json").write_text("{}")
    (run_dir / "checkpoint.pt").write_bytes(b"")
    refused = subprocess.run(_cli("run", "--resume", str(run_dir), "--lr", "0.5"), capture_output=True, text=True,
                             env=ENV, timeout=120)
    assert refused.returncode == 2
    assert "--resume continues a run as it was configured: drop --lr" in refused.stderr
