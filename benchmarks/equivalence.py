"""Checks that a refactor moves no node-classification result: dump every metric row of a fixed
set of short runs, before and after, and compare them exactly.

    FGL_DATA_DIR=../shared/datasets python benchmarks/equivalence.py dump before.parquet   # on the old code
    FGL_DATA_DIR=../shared/datasets python benchmarks/equivalence.py dump after.parquet    # on the new code
    python benchmarks/equivalence.py compare before.parquet after.parquet

The runs cover every node algorithm with the mean aggregator on the synthetic default, FedIA and
FedAdam, prototype exchange without weight sharing, partial participation on GraphSAGE, Cora and
Cora-LT over Louvain clients, local evaluation and kept optimizer state; all in-process with one
torch thread (thread counts change float reductions). Timing rows are left out.
"""

from __future__ import annotations

import argparse
import sys
import tempfile

import pandas as pd

from fgl_ray.config import load_config
from fgl_ray.results import read_metrics
from fgl_ray.runtime import run_experiment

RUNS = [dict(algorithm=name, rounds=4) for name in
        ("fedavg", "local", "fedprox", "moon", "feddyn", "fedproto", "fedproc", "fedlc", "fedepd")] + [
    dict(algorithm="fedavg", aggregator="fedia", rounds=4, diagnostics=True),
    dict(algorithm="fedprox", aggregator="fedadam", rounds=4, model="pmlp_gcn"),
    dict(algorithm="fedproto", algorithm_options={"share_weights": False}, rounds=3),
    dict(algorithm="fedavg", rounds=3, fraction_fit=0.5, model="sage"),
    *(dict(dataset="cora", partition="louvain", num_clients=10, algorithm=name, rounds=3)
      for name in ("fedavg", "fedepd", "moon", "fedproto")),
    dict(dataset="cora-lt", partition="louvain", num_clients=10, algorithm="fedlc", rounds=3, optimizer="adam", lr=0.01),
    dict(algorithm="fedavg", rounds=3, evaluate="local"),
    dict(algorithm="moon", rounds=3, optimizer_state="keep", optimizer="adam", lr=0.01),
]
KEY = ["run", "round", "client_id", "domain", "split", "metric"]


def dump(path: str) -> None:
    frames = []
    with tempfile.TemporaryDirectory() as folder:
        for index, values in enumerate(RUNS):
            config = load_config(values | dict(backend="local", torch_threads=1, output_dir=folder, run_name=f"r{index}"))
            metrics = read_metrics(run_experiment(config, progress=False).run_dir)
            frames.append(metrics[~metrics.metric.str.contains("seconds")].drop(columns="run_id").assign(run=index))
            print(index, values, flush=True)
    pd.concat(frames).to_parquet(path)


def compare(before: str, after: str) -> int:
    merged = pd.read_parquet(before).merge(pd.read_parquet(after), on=KEY, how="outer", suffixes=("_before", "_after"),
                                           indicator=True)
    both = merged[merged._merge == "both"]
    same = (both.value_before == both.value_after) | (both.value_before.isna() & both.value_after.isna())
    only = merged[merged._merge != "both"].groupby(["_merge", "split", "metric"]).size()
    print(f"{len(both)} rows in both, {int((~same).sum())} with different values; rows in one only:\n{only}")
    return int((~same).any())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("dump").add_argument("path")
    both = commands.add_parser("compare")
    both.add_argument("before")
    both.add_argument("after")
    args = parser.parse_args()
    if args.command == "dump":
        dump(args.path)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
