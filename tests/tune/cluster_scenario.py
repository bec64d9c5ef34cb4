"""Runs in its own process (tests/tune/test_cluster.py): grids on a 3-node Ray cluster on this machine.

``ray.cluster_utils.Cluster`` starts a head node (2 CPUs), a CPU worker (2 CPUs) and a GPU
worker (2 CPUs, 2 fake GPUs: Ray schedules GPU shares, torch sees no CUDA and trains on CPU).
One process holds one Ray, and the other tests share a single-node one, hence the subprocess.

1. A CPU grid of four trials (2 CPUs each, checkpoint every 2 rounds, ``max_failures: 2``,
   its folder given as a ``file://`` URI). A
   watcher removes the CPU worker as soon as a trial whose client actors run there has saved a
   checkpoint: Tune retries that trial on another node and it resumes from its checkpoint.
2. A GPU grid of two trials (``gpus_per_trial: 1``): their client actors must land on the GPU worker.

Usage: ``python cluster_scenario.py <folder>``; prints one JSON line prefixed ``SCENARIO``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray  # noqa: E402
import yaml  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from fgl_ray.tune.grid import load_grid  # noqa: E402
from fgl_ray.tune.runner import run_grid  # noqa: E402

BASE = {"dataset": "synthetic", "synthetic": {"num_domains": 2, "nodes_per_domain": 60, "num_features": 8,
                                              "num_classes": 3},
        "clients_per_domain": 1, "clients_per_actor": 1, "hidden": 8, "rounds": 40, "local_epochs": 1, "last_k": 2,
        "torch_threads": 1, "algorithm": "fedavg", "checkpoint_every": 2}


def write_grid(folder: Path, name: str, axes: dict, **fields) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "base": BASE | fields.pop("base", {}), "axes": axes,
                                    "baseline": None, **fields}))
    return path


def remove_when_checkpointed(cluster: Cluster, node, runs: Path, stop: threading.Event, removed: dict) -> None:
    """Removes ``node`` once a trial with client actors on it has a checkpoint; records which."""
    while not stop.is_set():
        for run_dir in runs.glob("*"):
            placements = run_dir / "placements.json"
            if not ((run_dir / "checkpoint.pt").is_file() and placements.is_file()):
                continue
            try:
                nodes = {p["node_id"] for p in json.loads(placements.read_text())}
            except json.JSONDecodeError:      # being written
                continue
            if nodes == {node.node_id}:
                cluster.remove_node(node, allow_graceful=False)
                removed.update(trial=run_dir.name, at=time.time())
                return
        time.sleep(0.05)


def trials(folder: Path) -> dict[str, dict]:
    report = {}
    for run_dir in sorted((folder / "runs").iterdir()):
        record = json.loads((run_dir / "trial.json").read_text())
        summary = json.loads((run_dir / "summary.json").read_text())
        report[run_dir.name] = {
            "resumed_from": record.get("resumed_from"),
            "client_nodes": sorted({p["node_id"] for p in json.loads((run_dir / "placements.json").read_text())}),
            "gpu_ids": [p["gpu_ids"] for p in json.loads((run_dir / "placements.json").read_text())],
            "complete": summary["coverage"]["complete"], "rounds": summary["coverage"]["rounds"],
            "run_dir_in_grid": Path(record["run_dir"]).resolve().parent == (folder / "runs").resolve(),
        }
    return report


def main() -> int:
    folder = Path(sys.argv[1])
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    cpu_node = cluster.add_node(num_cpus=2)
    gpu_node = cluster.add_node(num_cpus=2, num_gpus=2)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, configure_logging=False, log_to_driver=False)
    report: dict = {"nodes": {"head": cluster.head_node.node_id, "cpu": cpu_node.node_id, "gpu": gpu_node.node_id}}
    try:
        gpu_grid = load_grid(write_grid(folder, "gpu", {"lr": [0.01, 0.02]}, cpus_per_trial=1, gpus_per_trial=1,
                                        base={"rounds": 4}), output_dir=folder / "gpu")
        outcome = run_grid(gpu_grid, verbose=0, time_budget_s=600)
        report["gpu"] = {"statuses": outcome.statuses, "trials": trials(folder / "gpu")}

        cpu_grid = load_grid(write_grid(folder, "cpu", {"lr": [0.01, 0.02, 0.03, 0.04]}, cpus_per_trial=2,
                                        max_failures=2, base={"gpus_per_client": 0}),
                             output_dir=(folder / "cpu").as_uri())     # a file:// URI, as on a shared filesystem
        stop, removed = threading.Event(), {}
        watcher = threading.Thread(target=remove_when_checkpointed,
                                   args=(cluster, cpu_node, folder / "cpu" / "runs", stop, removed), daemon=True)
        watcher.start()
        outcome = run_grid(cpu_grid, verbose=0, time_budget_s=600)
        stop.set()
        report["cpu"] = {"statuses": outcome.statuses, "removed": removed, "trials": trials(folder / "cpu")}
    finally:
        ray.shutdown()
        cluster.shutdown()
    print("SCENARIO " + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
