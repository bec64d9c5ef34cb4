"""Scale: one ~210k-node synthetic graph split into 10, 100 and 1,000 clients, measured in one run.

FedAvg + GCN (``--partition random``; ``fraction_fit`` 0.1 at 1,000 clients, every client
otherwise), each a ``fgl-ray run`` process on Ray and in-process: seconds per round (the mean of
the rounds after round 0) and peak memory summed over the command and every process it starts
(driver, the local Ray's host and system processes, client workers), as RSS and as PSS (shared
pages split over their sharers: what the processes really take). Then Cora Louvain-10 on Ray.

Targets (issue 29, 2-core machine): summed memory on Ray under 1.5 GB at 1,000 clients and for
Cora Louvain-10; seconds per round at 1,000 clients within 1.5x of 10 clients.

    FGL_DATA_DIR=../shared/datasets python benchmarks/scale.py [--rounds 6] [--clients 10 100 1000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import WORKLOADS, cli_run, gigabytes  # noqa: E402

GRAPH = {"partition": "random", "synthetic": {"nodes_per_domain": 70000}, "algorithm": "fedavg", "model": "gcn"}
MEMORY_TARGET = 1.5e9


def measure(values: dict, out: Path) -> dict:
    done = cli_run(values, out, memory=True)
    return {"round": done["summaries"][0]["round_timing"]["round_seconds"], "rss": done["peak_rss"],
            "pss": done["peak_pss"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--clients", type=int, nargs="*", default=[10, 100, 1000])
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for clients in args.clients:
            for backend in ("ray", "local"):
                values = GRAPH | {"num_clients": clients, "fraction_fit": 0.1 if clients >= 1000 else 1.0,
                                  "rounds": args.rounds, "backend": backend}
                got = results[clients, backend] = measure(values, Path(tmp) / f"{clients}-{backend}")
                print(f"{clients:>5} clients {backend:>5}: {got['round']:6.3f} s/round, peak RSS {gigabytes(got['rss'])}, "
                      f"PSS {gigabytes(got['pss'])}", flush=True)
        smallest, largest = min(args.clients), max(args.clients)
        if (largest, "ray") in results and largest >= 1000:
            pss = results[largest, "ray"]["pss"]
            print(f"memory on Ray at {largest} clients: PSS {gigabytes(pss)}, target < {gigabytes(MEMORY_TARGET)}: "
                  f"{'met' if pss < MEMORY_TARGET else 'MISSED'}")
        if smallest != largest:
            for backend in ("ray", "local"):
                ratio = results[largest, backend]["round"] / results[smallest, backend]["round"]
                print(f"{backend}: s/round at {largest} over {smallest} clients {ratio:.2f}x (target <= 1.5x on Ray)")
        if not os.environ.get("FGL_DATA_DIR"):
            print("Cora Louvain-10 skipped: set FGL_DATA_DIR to the datasets folder (../shared/datasets)")
        else:
            cora = measure(WORKLOADS["cora-louvain-10"] | {"rounds": args.rounds, "backend": "ray"}, Path(tmp) / "cora")
            print(f"Cora Louvain-10 on Ray: {cora['round']:.3f} s/round, peak RSS {gigabytes(cora['rss'])}, PSS "
                  f"{gigabytes(cora['pss'])}, target < {gigabytes(MEMORY_TARGET)}: {'met' if cora['pss'] < MEMORY_TARGET else 'MISSED'}")


if __name__ == "__main__":
    main()
