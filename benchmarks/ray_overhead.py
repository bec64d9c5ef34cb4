"""Ray backend vs in-process backend, wall time per round, measured in one run.

FedAvg, GCN, 5 local epochs, 20 rounds, on Twitch S1 and on Cora Louvain-10. Prints the mean
wall time per round of each backend (actor start-up excluded, reported separately) and the
ratio ray / in-process; below 1 means Ray is faster.

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


def time_rounds(config, data) -> tuple[float, list[float], dict[str, float]]:
    """Start-up seconds, per-round seconds, and the mean of each phase timing."""
    started = time.perf_counter()
    backend = open_backend(config, data)
    startup = time.perf_counter() - started
    rounds, phases = [], {}
    try:
        for round_index in range(config.rounds):
            begun = time.perf_counter()
            result = backend.run_round(round_index)
            rounds.append(time.perf_counter() - begun)
            for name, value in result.timings.items():
                phases.setdefault(name, []).append(value)
    finally:
        backend.close()
    return startup, rounds, {name: statistics.mean(values) for name, values in phases.items()}


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
            print(f"\n== {name}: {len(data.clients)} clients, {data.num_features} features", flush=True)
            per_round = {}
            for backend in ("local", "ray"):
                config = load_config(base | {"backend": backend})
                startup, rounds, phases = time_rounds(config, data)
                per_round[backend] = statistics.mean(rounds)
                phase_text = ", ".join(f"{k} {v:.2f}" for k, v in phases.items())
                print(f"{backend:>6}: start-up {startup:6.2f} s, per round {per_round[backend]:6.2f} s "
                      f"(min {min(rounds):.2f}, max {max(rounds):.2f}; {phase_text})", flush=True)
            print(f"ratio ray / in-process per round: {per_round['ray'] / per_round['local']:.2f}", flush=True)


if __name__ == "__main__":
    main()
