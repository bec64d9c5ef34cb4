"""Ctrl-C and SIGTERM end a run promptly: one line, exit status 130, the finished rounds summarised
and the run marked incomplete."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest


def _interrupt_a_run(tmp_path, backend: str, signum: int):
    command = [sys.executable, "-m", "fgl_ray.cli", "run", "--backend", backend, "--rounds", "100000",
               "--algorithm", "fedavg", "--no-progress", "--output-dir", str(tmp_path), "--synthetic",
               "{nodes_per_domain: 60, num_features: 8}", "--hidden", "8", "--torch-threads", "1"]
    env = os.environ | {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    while not list(tmp_path.glob("*/metrics.parquet/part-000003.parquet")) and time.time() < deadline:
        time.sleep(0.2)
    assert process.poll() is None, process.communicate()
    sent = time.time()
    process.send_signal(signum)
    out, err = process.communicate(timeout=60)
    return process.returncode, time.time() - sent, out, err


@pytest.mark.parametrize(("backend", "signum"), [("local", signal.SIGINT), ("ray", signal.SIGTERM)])
def test_an_interrupted_run_keeps_its_finished_rounds_and_says_so(tmp_path, backend, signum):
    code, seconds, out, err = _interrupt_a_run(tmp_path, backend, signum)
    assert code == 130, err
    assert seconds < 30
    assert "Traceback" not in err and "SIGTERM received" not in err
    assert [line for line in err.splitlines() if line.startswith("fgl-ray:")] == err.strip().splitlines()[-1:]
    assert "interrupted after" in err and "of 100000 rounds" in err
    (summary_file,) = tmp_path.glob("*/summary.json")
    coverage = json.loads(summary_file.read_text())["coverage"]
    assert coverage["interrupted"] and not coverage["complete"] and 3 <= coverage["rounds"] < 100000
    assert "fedavg+mean" in out                                                # the table of the finished rounds
