"""Ray backend vs in-process backend per round, and beside the peers on their workloads, in one run.

Settings (FedAvg throughout):

* ``twitch-s1``: GCN, 5 local epochs; local work dominates. Target: Ray at least 1.5x faster per
  round than in-process on 2 cores.
* ``cora-louvain-10``: OpenFGL's workload (GCN hidden 64, Adam, 3 local epochs). OpenFGL (one
  process) ran it at 0.11 s per round on a quiet 2-core machine; target: Ray at or below half.
* ``flower-mlp``: Flower's simulation workload: 10 clients, a 305k-parameter MLP (784-384-10),
  one local step. Flower adds about 0.38 s per round over a plain loop; target: Ray at most
  20 ms per round over in-process.
* ``synthetic-10`` / ``synthetic-1000``: one ~210k-node synthetic graph in 10 and in 1,000
  clients (``fraction_fit`` 0.1 at 1,000). Target: framework overhead at most 2 ms per client per
  round.

Each backend runs the setting's rounds on the same data; round 0 (which also starts the actors)
is left out of the means. A round's time splits into the critical path (the clients' own compute
on the busiest worker: every client in-process, the most loaded actor on Ray), evaluation, and
the rest: broadcast, dispatch, transfer, deserialisation, aggregation and bookkeeping. The rest
divided by the clients that trained is the framework overhead per client per round.

    FGL_DATA_DIR=../shared/datasets python benchmarks/ray_overhead.py [--rounds 20] [--settings ...] [--record]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import NEEDS_FILES, WORKLOADS  # noqa: E402

from fgl_ray.config import load_config  # noqa: E402
from fgl_ray.data import build_federated_data  # noqa: E402
from fgl_ray.runtime import open_backend  # noqa: E402
from fgl_ray.runtime.ray_backend import ray_session  # noqa: E402

SCALE_GRAPH = {"partition": "random", "synthetic": {"nodes_per_domain": 70000}, "model": "gcn"}
SETTINGS = {
    "twitch-s1": WORKLOADS["twitch-s1"],
    "cora-louvain-10": WORKLOADS["cora-louvain-10"],
    "flower-mlp": {"partition": "random", "num_clients": 10, "model": "mlp", "hidden": 384, "num_layers": 2,
                   "local_epochs": 1, "synthetic": {"num_features": 784, "num_classes": 10, "nodes_per_domain": 2000}},
    "synthetic-10": SCALE_GRAPH | {"num_clients": 10, "local_epochs": 1},
    "synthetic-1000": SCALE_GRAPH | {"num_clients": 1000, "fraction_fit": 0.1, "local_epochs": 1},
}
OPENFGL_CORA_S = 0.11
FLOWER_ADDED_S = 0.38
TARGETS = {"per_client_overhead_s": 0.002, "twitch_speedup": 1.5, "flower_added_s": 0.020}


def measure(config, data) -> dict[str, float]:
    """Round-0 seconds and the means over later rounds of: the round, its critical path, the clients'
    compute summed, evaluation, and the clients that trained."""
    backend = open_backend(config, data)
    groups = backend.plan.assignment if hasattr(backend, "plan") else [tuple(g.client_id for g in data.clients)]
    rows = []
    try:
        for round_index in range(config.rounds):
            begun = time.perf_counter()
            result = backend.run_round(round_index)
            wall = time.perf_counter() - begun
            seconds = {cid: metrics["seconds"] for cid, metrics in result.updates.items()}
            rows.append({"round": wall, "compute": sum(seconds.values()), "clients": len(seconds),
                         "critical": max(sum(seconds.get(c, 0.0) for c in group) for group in groups),
                         "evaluate": result.timings["evaluate_seconds"]})
    finally:
        backend.close()
    found = {key: statistics.mean(row[key] for row in rows[1:]) for key in rows[0]}
    found["rest"] = found["round"] - found["critical"] - found["evaluate"]
    return found | {"first": rows[0]["round"], "workers": len(groups)}


def describe(backend: str, m: dict) -> str:
    return (f"{backend:>6}: round 0 {m['first']:6.3f} s | later rounds {m['round']:6.3f} s = critical path "
            f"{m['critical']:6.3f} s over {m['workers']} worker(s) (compute summed {m['compute']:6.3f} s) + evaluation "
            f"{m['evaluate']:6.3f} s + rest {m['rest']:6.3f} s = {1000 * m['rest'] / m['clients']:5.2f} ms per client "
            f"({m['clients']:.0f} trained)")


def verdicts(name: str, local: dict, ray: dict) -> list[str]:
    """The targets this setting checks, each with its figure."""
    def mark(ok: bool) -> str:
        return "met" if ok else "MISSED"

    lines = [f"ratio Ray / in-process per round: {ray['round'] / local['round']:.2f}"]
    per_client = ray["rest"] / ray["clients"]
    if name.startswith("synthetic"):
        lines.append(f"framework overhead on Ray: {1000 * per_client:.2f} ms per client per round "
                     f"(target <= {1000 * TARGETS['per_client_overhead_s']:.0f} ms: "
                     f"{mark(per_client <= TARGETS['per_client_overhead_s'])})")
    if name == "twitch-s1":
        speedup = local["round"] / ray["round"]
        lines.append(f"Ray {speedup:.2f}x faster per round than in-process (target >= {TARGETS['twitch_speedup']}x: "
                     f"{mark(speedup >= TARGETS['twitch_speedup'])})")
    if name == "cora-louvain-10":
        lines.append(f"OpenFGL {OPENFGL_CORA_S:.3f} s/round (quoted) | fgl-ray Ray {ray['round']:.3f} s/round, "
                     f"in-process {local['round']:.3f} s/round; target Ray <= {OPENFGL_CORA_S / 2:.3f}: "
                     f"{mark(ray['round'] <= OPENFGL_CORA_S / 2)}")
    if name == "flower-mlp":
        added = ray["round"] - local["round"]
        lines.append(f"added over in-process: Flower {1000 * FLOWER_ADDED_S:.0f} ms/round (quoted) | fgl-ray Ray "
                     f"{1000 * added:.1f} ms/round (target <= {1000 * TARGETS['flower_added_s']:.0f} ms: "
                     f"{mark(added <= TARGETS['flower_added_s'])})")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--settings", nargs="*", choices=list(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--record", action="store_true", help="write the output into benchmarks/RESULTS.md")
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    lines: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    with tempfile.TemporaryDirectory() as out, ray_session():
        for name in args.settings:
            if name in NEEDS_FILES and not os.environ.get("FGL_DATA_DIR"):
                say(f"== {name}: skipped (set FGL_DATA_DIR to the shared datasets)")
                continue
            base = {"algorithm": "fedavg"} | SETTINGS[name] | {"rounds": args.rounds, "output_dir": out}
            data = build_federated_data(load_config(base))
            say(f"== {name}: {len(data.clients)} clients, {data.num_features} features, {args.rounds} rounds")
            found = {}
            for backend in ("local", "ray"):
                found[backend] = measure(load_config(base | {"backend": backend}), data)
                say(describe(backend, found[backend]))
            for line in verdicts(name, found["local"], found["ray"]):
                say(line)
    if args.record:
        from fedia_common import record_output

        record_output("ray_overhead", lines, env="FGL_DATA_DIR=../shared/datasets ")


if __name__ == "__main__":
    main()
