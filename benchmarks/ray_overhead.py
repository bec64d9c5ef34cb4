"""Ray backend vs in-process backend, wall time per round, measured in one run.

FedAvg, GCN, 5 local epochs, 20 rounds, on Twitch S1 and on Cora Louvain-10. Round 0 (which
includes starting the actors) is reported apart; the per-round mean is over the other rounds.
For each backend it also prints where a round's time goes: the clients' own compute summed
over clients, the critical path (the busiest worker's compute: every client in-process, the
most loaded actor on Ray), and the rest (broadcast, transfer, aggregation, evaluation).

    FGL_DATA_DIR=../shared/datasets python benchmarks/ray_overhead.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from fgl_ray.config import load_config
from fgl_ray.data import build_federated_data
from fgl_ray.runtime import open_backend
from fgl_ray.runtime.ray_backend import ray_session

SETTINGS = {
    "twitch-S1": {"dataset": "twitch", "partition": "twitch-S1"},
    "cora-louvain-10": {"dataset": "cora", "partition": "louvain", "num_clients": 10},
}


def measure(config, data) -> dict[str, float]:
    """Round-0 seconds, mean later-round seconds, and the mean breakdown of later rounds."""
    backend = open_backend(config, data)
    groups = backend.plan.assignment if hasattr(backend, "plan") else [tuple(g.client_id for g in data.clients)]
    walls, compute, critical, evaluate = [], [], [], []
    try:
        for round_index in range(config.rounds):
            begun = time.perf_counter()
            result = backend.run_round(round_index)
            walls.append(time.perf_counter() - begun)
            seconds = {cid: metrics["seconds"] for cid, metrics in result.updates.items()}
            compute.append(sum(seconds.values()))
            critical.append(max(sum(seconds.get(c, 0.0) for c in group) for group in groups))
            evaluate.append(result.timings["evaluate_seconds"])
    finally:
        backend.close()
    later = slice(1, None)
    return {
        "first": walls[0], "per_round": statistics.mean(walls[later]),
        "client_compute": statistics.mean(compute[later]), "critical_path": statistics.mean(critical[later]),
        "evaluate": statistics.mean(evaluate[later]), "workers": len(groups),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--settings", nargs="*", default=list(SETTINGS))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out, ray_session():
        for name in args.settings:
            base = {"algorithm": "fedavg", "model": "gcn", "local_epochs": 5, "rounds": args.rounds,
                    "output_dir": out} | SETTINGS[name]
            data = build_federated_data(load_config(base))
            print(f"\n== {name}: {len(data.clients)} clients, {data.num_features} features, {args.rounds} rounds",
                  flush=True)
            found = {}
            for backend in ("local", "ray"):
                found[backend] = m = measure(load_config(base | {"backend": backend}), data)
                print(f"{backend:>6}: round 0 {m['first']:5.2f} s | later rounds {m['per_round']:5.2f} s = "
                      f"critical path {m['critical_path']:5.2f} s over {m['workers']} worker(s) "
                      f"(client compute summed {m['client_compute']:5.2f} s) + rest "
                      f"{m['per_round'] - m['critical_path']:5.2f} s (evaluation {m['evaluate']:4.2f} s)", flush=True)
            print(f"ratio ray / in-process per round: {found['ray']['per_round'] / found['local']['per_round']:.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
