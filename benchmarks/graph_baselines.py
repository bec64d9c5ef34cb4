"""Every node-classification method in the box on Cora and CiteSeer cut by Louvain into 10 clients
(issue 31), generic and graph-specific, under OpenFGL's protocol.

    FGL_DATA_DIR=../shared/datasets python benchmarks/graph_baselines.py [--seeds 3]
        [--datasets cora citeseer] [--methods fedavg fedgta fedavg@sage] [--finished-only]
        [--set optimizer=sgd lr=0.1 local_epochs=4]

The protocol is OpenFGL's (its paper's appendix A.5-A.7 where it says, its library's defaults where
it does not): GCN with 2 layers, hidden 64, dropout 0.5 (a method built on another backbone runs on it,
with the same width and depth: FedSage+ on GraphSAGE, FedSPA on ACM-GCN); Adam, lr 1e-2, weight decay 5e-4; 3 local
epochs; 100 rounds; each client's nodes split 20/40/40 by class. Every method runs with its own
defaults (OpenFGL tunes each with Optuna; nothing is tuned here). Cells: test accuracy in %, the
last-20-round mean of the pooled accuracy (all clients' test nodes together) and of the clients'
average, mean ± std over seeds (data seed 0, training seeds 0..N-1). Each finished run's means go to
``benchmarks/ledger/graph_baselines.jsonl`` so that a fresh checkout recomposes the table
(``--finished-only``). The table replaces section ``graph-baselines`` of ``benchmarks/RESULTS.md``.

OpenFGL's published numbers for this setting are not in the table: the copy of their paper this
project could read ends before its experiments (their main table uses Metis; Louvain is in Sec. 4.2).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import yaml


sys.path.insert(0, str(Path(__file__).resolve().parent))

from fedia_common import (RunLedger, complete_run, finished_summary, percent_over_seeds,  # noqa: E402
                          replace_section)

from fgl_ray.algorithms import ALGORITHMS  # noqa: E402
from fgl_ray.config import load_config  # noqa: E402
from fgl_ray.data import build_federated_data  # noqa: E402
from fgl_ray.errors import as_folder_name  # noqa: E402

PROTOCOL = {"partition": "louvain", "num_clients": 10, "model": "gcn", "num_layers": 2, "hidden": 64,
            "dropout": 0.5, "optimizer": "adam", "lr": 1e-2, "weight_decay": 5e-4, "local_epochs": 3,
            "rounds": 100, "split": (0.2, 0.4, 0.4), "split_mode": "stratified", "last_k": 20, "data_seed": 0}
DATASETS = ("cora", "citeseer")
LEDGER = Path(__file__).with_name("ledger") / "graph_baselines.jsonl"
COLUMNS = (("pooled", "all"), ("client avg", "avg_over_clients"))


def node_methods() -> list[str]:
    """The registered algorithms that classify the nodes of a plain graph (not only multimodal ones),
    and FedAvg on each other backbone a method is built on (``fedavg@sage`` is FedSage+'s FedSage)."""
    names = [name for name in ALGORITHMS.names()
             if "node-classification" in ALGORITHMS.get(name).tasks and backbone(name) != "mm_gnn"]
    return names + sorted({f"fedavg@{backbone(name)}" for name in names if backbone(name) != "gcn"})


def backbone(method: str) -> str:
    """``method``'s backbone: named after ``@``, else the protocol's GCN, or the backbone the algorithm is
    built on (FedSage+'s GraphSAGE, FedSPA's ACM-GCN)."""
    if "@" in method:
        return method.split("@")[1]
    return ALGORITHMS.get(method).backbone_for("gcn")


def run(dataset: str, method: str, seed: int, args, data_cache: dict) -> dict[str, float] | None:
    """One federation's last-20 means (pooled and client-average accuracy); None if not run."""
    algorithm = method.split("@")[0]
    changed = "".join(f"-{key}{value}" for key, value in args.set.items())
    values = PROTOCOL | args.set | {
        "model": backbone(method), "dataset": dataset, "algorithm": algorithm, "seed": seed, "backend": "local",
        "torch_threads": args.torch_threads, "output_dir": str(args.out), "overwrite": True,
        "run_name": as_folder_name(f"{dataset}-louvain10{changed}-{method.replace('@', '-')}-s{seed}")}
    if args.data_dir:
        values["data_dir"] = str(args.data_dir)
    config = load_config(values)
    ledger = RunLedger(args.ledger)
    means = ledger.lookup(config)
    if means is None and (summary := finished_summary(config)):
        means = {name: summary[key]["accuracy"]["mean"] for name, key in COLUMNS}
    if means is None and args.finished_only:
        return None
    if means is None:
        if dataset not in data_cache:
            data_cache[dataset] = build_federated_data(config)
        started = time.perf_counter()
        summary = complete_run(config, data_cache[dataset]).summary
        means = {name: summary[key]["accuracy"]["mean"] for name, key in COLUMNS}
        print(f"{config.run_name}: {means} ({time.perf_counter() - started:.0f} s)", flush=True)
    ledger.record(config, means)
    return means


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--methods", nargs="+", default=None,
                        help="algorithms, algorithm@backbone for another backbone (default: every node method)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=Path("results/benchmarks/graph-baselines"))
    parser.add_argument("--ledger", type=Path, default=LEDGER)
    parser.add_argument("--finished-only", action="store_true", help="tabulate recorded runs only; run nothing")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                        help="change the protocol (e.g. optimizer=sgd lr=0.1); the table goes to its own section")
    args = parser.parse_args()
    args.set = {key: yaml.safe_load(value) for key, value in (item.split("=", 1) for item in args.set)}
    methods = args.methods or node_methods()
    cache: dict = {}
    header = "| method | " + " | ".join(f"{d} {name}" for d in args.datasets for name, _ in COLUMNS) + " |"
    lines = [header, "|---|" + "---|" * (len(args.datasets) * len(COLUMNS))]
    for method in methods:
        results = {d: [run(d, method, seed, args, cache) for seed in range(args.seeds)] for d in args.datasets}
        cells = [percent_over_seeds([None if r is None else r[name] for r in results[d]]) for d in args.datasets for name, _ in COLUMNS]
        label = method if backbone(method) == "gcn" else f"{method.split('@')[0]} ({backbone(method)})"
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    command = shlex.join(["python", "benchmarks/graph_baselines.py", *sys.argv[1:]])
    body = (f"Command: `FGL_DATA_DIR=../shared/datasets {command}` (Louvain, 10 clients; GCN 2x64, Adam lr 1e-2, "
            f"wd 5e-4, 3 local epochs, 100 rounds, 20/40/40 stratified per client; test accuracy in %, last-20-round "
            f"mean, mean±std over {args.seeds} seed(s); (n): seeds recorded when fewer"
            + ("; changed from that protocol: " + ", ".join(f"{key} = {value}" for key, value in args.set.items())
               if args.set else "") + ")\n\n" + "\n".join(lines) + "\n")
    replace_section("graph-baselines" + "".join(f"-{k}={v}" for k, v in args.set.items()), body)
    print(body)


if __name__ == "__main__":
    main()
