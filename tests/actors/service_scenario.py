"""Runs in its own process (tests/actors/test_service.py): the worker pool as a service, driven
through the command line only, on a Ray cluster of its own (``ray.cluster_utils.Cluster``, one
head with 2 CPUs: the other tests share a Ray of the test process).

1. ``fgl-ray run`` on the cluster before any pool exists: its own workers (the fresh reference).
2. ``fgl-ray pool start --workers 4``, then runs A, B and A again borrow from it in turn.
3. A and B at once.
4. A run whose client 0 kills its worker's process in round 1 (one client per worker).
5. ``fgl-ray pool status`` and ``fgl-ray pool stop``.

Usage: ``python service_scenario.py <folder>``; prints one JSON line prefixed ``SCENARIO``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from ray.cluster_utils import Cluster  # noqa: E402

BASE = ["--synthetic", "{num_domains: 3, nodes_per_domain: 90, num_features: 8, num_classes: 3}",
        "--clients-per-domain", "1", "--hidden", "16", "--rounds", "3", "--local-epochs", "2", "--torch-threads", "1",
        "--clients-per-actor", "2", "--no-progress"]
RUNS = {"A": ["--algorithm", "fedavg"], "B": ["--algorithm", "moon"],
        "K": ["--algorithm", "fedavg", "--faults", "[{kind: kill, clients: [0], rounds: [1]}]", "--clients-per-actor", "1",
              "--rounds", "4"]}


def command(address: str, *argv: str) -> list[str]:
    return [sys.executable, "-m", "fgl_ray.cli", *argv, "--address", address]


def start_run(address: str, folder: Path, name: str, run: str) -> subprocess.Popen:
    return subprocess.Popen(command(address, "run", *BASE, *RUNS[run], "--output-dir", str(folder),
                                    "--run-name", name),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(process: subprocess.Popen, name: str, folder: Path) -> dict:
    out, _ = process.communicate(timeout=600)
    run_dir = folder / name
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").is_file() else {}
    placements = json.loads((run_dir / "placements.json").read_text()) if (run_dir / "placements.json").is_file() else []
    return {"code": process.returncode, "out": out[-3000:], "run_dir": str(run_dir),
            "workers": sorted(p["actor_id"] for p in placements), "startup": summary.get("startup"),
            "complete": summary.get("coverage", {}).get("complete")}


def run(address: str, folder: Path, name: str, which: str) -> dict:
    return finish(start_run(address, folder, name, which), name, folder)


def cli(address: str, *argv: str) -> dict:
    done = subprocess.run(command(address, *argv), capture_output=True, text=True, timeout=600)
    return {"code": done.returncode, "out": done.stdout + done.stderr}


def main() -> int:
    folder = Path(sys.argv[1])
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    address = cluster.address
    report: dict = {}
    try:
        report["fresh_A"] = run(address, folder, "fresh-A", "A")
        report["start"] = cli(address, "pool", "start", "--workers", "4")
        report["turn_A"] = run(address, folder, "turn-A", "A")
        report["turn_B"] = run(address, folder, "turn-B", "B")
        report["turn_A2"] = run(address, folder, "turn-A2", "A")
        both = {"A": start_run(address, folder, "both-A", "A"), "B": start_run(address, folder, "both-B", "B")}
        started = time.time()
        report["both_A"] = finish(both["A"], "both-A", folder)
        report["both_B"] = finish(both["B"], "both-B", folder)
        report["both_seconds"] = time.time() - started
        report["kill"] = run(address, folder, "kill", "K")
        report["status"] = cli(address, "pool", "status")
        report["stop"] = cli(address, "pool", "stop")
        report["after_stop"] = cli(address, "pool", "status")
    finally:
        cluster.shutdown()
    print("SCENARIO " + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
