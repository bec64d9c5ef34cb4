"""Shared by the runtime benchmarks: the workloads, timing a ``fgl-ray run`` command, and the memory
of a process tree.

Memory is summed over a process and all its descendants (the driver, a local Ray's host and
system processes, the client workers), sampled every ``interval_s``; both the resident set
(RSS: a page shared by several processes counts once per process, so the sum overstates what the
machine holds) and the proportional set (PSS: a shared page is split over its sharers, so the sum
is the memory the processes really take) are kept, with their peaks.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]

#: ``fgl-ray run`` flags of each workload: the default job (embedded synthetic data, FedAvg, 20
#: rounds), Twitch S1 (six language domains, GCN, 5 local epochs) and OpenFGL's Cora Louvain-10
#: (GCN hidden 64, Adam lr 0.01, 3 local epochs, split 0.2/0.4/0.4).
WORKLOADS = {
    "default": {"algorithm": "fedavg", "rounds": 20},
    "twitch-s1": {"dataset": "twitch", "partition": "twitch-S1", "algorithm": "fedavg", "model": "gcn",
                  "local_epochs": 5, "rounds": 20},
    "cora-louvain-10": {"dataset": "cora", "partition": "louvain", "num_clients": 10, "algorithm": "fedavg",
                        "model": "gcn", "hidden": 64, "optimizer": "adam", "lr": 0.01, "local_epochs": 3,
                        "split": [0.2, 0.4, 0.4], "rounds": 20},
}
NEEDS_FILES = {"twitch-s1", "cora-louvain-10"}


def flags(values: dict) -> list[str]:
    """Config values as ``fgl-ray run`` flags."""
    argv = []
    for name, value in values.items():
        argv += ["--" + name.replace("_", "-"), json.dumps(value) if isinstance(value, (list, dict)) else str(value)]
    return argv


def cli_run(values: dict, output: Path, *extra: str, env: dict | None = None, memory: bool = False) -> dict:
    """Runs ``fgl-ray run`` with ``values``: its wall time (process start to exit), run folders and
    summaries; with ``memory``, also the peak summed RSS and PSS of the command and every process it
    started (sampling reads every process's smaps: off where wall time is the figure)."""
    command = [sys.executable, "-m", "fgl_ray.cli", "run", *flags(values), "--no-progress", "--output-dir",
               str(output), "--overwrite", "true", *extra]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=os.environ | (env or {}))
    sampler = MemorySampler(process.pid) if memory else None
    with sampler or contextlib.nullcontext():
        stdout, stderr = process.communicate(timeout=3600)
    wall = time.perf_counter() - started
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({process.returncode}):\n{stdout[-2000:]}\n{stderr[-3000:]}")
    run_dirs = [Path(line.removeprefix("results: ").strip()) for line in stdout.splitlines()
                if line.startswith("results: ")]
    summaries = [json.loads((run_dir / "summary.json").read_text()) for run_dir in run_dirs]
    peaks = {"peak_rss": sampler.peak_rss, "peak_pss": sampler.peak_pss} if sampler else {}
    return {"wall": wall, "run_dirs": run_dirs, "summaries": summaries, "out": stdout} | peaks


def median(values) -> float:
    return float(statistics.median(values))


class MemorySampler:
    """Peak summed RSS and PSS of ``pid`` and its descendants, sampled in a background thread."""

    def __init__(self, pid: int | None = None, interval_s: float = 0.25) -> None:
        self.root = psutil.Process(pid or os.getpid())
        self.interval_s = interval_s
        self.peak_rss = self.peak_pss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> tuple[int, int]:
        rss = pss = 0
        try:
            processes = [self.root, *self.root.children(recursive=True)]
        except psutil.NoSuchProcess:   # the root ended
            return 0, 0
        for process in processes:
            try:
                info = process.memory_full_info()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            rss, pss = rss + info.rss, pss + info.pss
        self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)
        return rss, pss

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> "MemorySampler":
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def gigabytes(value: float) -> str:
    return f"{value / 1e9:.2f} GB"
