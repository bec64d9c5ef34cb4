"""FedMGS reproduction: four readouts x missing rates x client counts, baselines, ablations, cost.

    python benchmarks/fedmgs.py main [--seeds 3]            # synthetic-mm, every task, rate and K
    python benchmarks/fedmgs.py ablation [--seeds 3]        # K = 5, rate 0.5, every task
    FGL_DATA_DIR=../shared/datasets python benchmarks/fedmgs.py two-view [--seeds 3] [--tasks link-prediction]
    python benchmarks/fedmgs.py cost                       # seconds per round and bytes uploaded
    FGL_DATA_DIR=../shared/datasets python benchmarks/fedmgs.py readings [--dataset cora-mm] [--seeds 1]
    python benchmarks/fedmgs.py main --methods "FedMGS (graph readout)" ...   # some rows only

The setting of the paper (Section 6.1): Louvain into 5 or 10 clients, 100 rounds, 10 local epochs,
Adam (lr 1e-3; the paper gives none), the ``mm_gnn`` backbone for every method; client-level
missingness for node classification and retrieval, node-level for link prediction and matching
(Table 1), at rates 0.3 / 0.5 / 0.7. Methods: FedMGS; FedAvg on the same backbone with zero-filled
missing inputs, with mean-filled ones (the client's own mean) and with the federation's mean
(``fedavg_fill``: the only mean under client-level missingness); FedProto on it; FedAvg zero-filled with
``readout_context: graph`` (the GCN output also reaches its readout: the strongest baseline here,
see RESULTS.md); and FedGTA on the same backbone (the paper's FedGTA-MM; node classification
only). Metrics: accuracy, link-prediction AUC, matching AUC, retrieval Recall@5 (pooled over
clients, test split, averaged over the last 20 rounds of a run), mean ± std over seeds (data seed 0, training seeds 0..N-1). Every finished run's
means go to ``benchmarks/ledger/fedmgs.jsonl``, which ``--reuse`` and ``--finished-only`` read
when the run's folder is not there (a fresh checkout). The generator's
settings are its defaults, fixed before any FedMGS run (``fgl_ray/data/multimodal.py``).
Sections of ``benchmarks/RESULTS.md``: ``fedmgs-main``, ``fedmgs-ablation``, ``fedmgs-two-view``,
``fedmgs-cost``, ``fedmgs-readings``.

``readings``: FedMGS under each reading of the paper's open choices (issue 30), node
classification, K = 5, rate 0.5, on one dataset: the training query, the estimate that queries the
banks, the context of L_rec, the sign of beta; beside the headline, the diagnostics that show a
train/test asymmetry (accuracy on training nodes, test accuracy on nodes missing a modality and on
complete ones, and the calibrated eta of a missing modality on training and test nodes, each the
mean over clients at the last round) and the seconds per round.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fedia_common import (RunLedger, complete_run, finished_summary, percent_over_seeds,  # noqa: E402
                          replace_section)

from fgl_ray.algorithms import ALGORITHMS  # noqa: E402
from fgl_ray.config import load_config  # noqa: E402
from fgl_ray.data import build_federated_data  # noqa: E402
from fgl_ray.errors import as_folder_name  # noqa: E402
from fgl_ray.results import read_metrics  # noqa: E402
from fgl_ray.runtime import open_backend  # noqa: E402
from fgl_ray.tasks import TASKS  # noqa: E402

TASK_MISSING = {"node-classification": "client", "link-prediction": "node", "modality-matching": "node",
                "modality-retrieval": "client"}
RATES = (0.3, 0.5, 0.7)
CLIENTS = (5, 10)
METHODS = {
    "FedMGS": ("fedmgs", {}, {}),
    "FedAvg (zero-filled)": ("fedavg", {}, {}),
    "FedAvg (mean-filled)": ("fedavg", {}, {"fill": "mean"}),
    "FedAvg (federated mean fill)": ("fedavg_fill", {}, {}),
    "FedProto": ("fedproto", {}, {}),
    "FedAvg (zero-filled, graph readout)": ("fedavg", {}, {"readout_context": "graph"}),
    "FedMGS (graph readout)": ("fedmgs", {}, {"readout_context": "graph"}),
    "FedGTA-MM": ("fedgta", {}, {}),          # node classification only (— in the other tasks' tables)
}
ABLATIONS = {
    "FedMGS": {},
    "w/o availability-aware encoding": {"availability_gate": False},
    "w/o prototype-guided synthesis": {"prototype_synthesis": False},
    "w/o reliability fusion": {"reliability_fusion": False},
}
#: FedMGS's readings, every choice spelled out (a row keeps its meaning when a default changes):
#: the training nodes' query, the estimate that queries the banks, L_rec's context, Eq. 7's beta.
READINGS = {
    f"{query} query · {estimate} estimate · L_rec {context} · β {beta}": {
        "query": query, "unlabelled_query": estimate, "reconstruction_context": context, "beta": beta}
    for query, estimate, context, beta in (
        ("label", "prototypes", "observed", "free"),           # the literal reading, the default before issue 30
        ("label", "classifier", "masked", "free"),
        ("predicted", "prototypes", "masked", "free"),
        ("predicted", "classifier", "observed", "free"),
        ("predicted", "classifier", "masked", "free"),
        ("predicted", "classifier", "masked", "softplus"),
    )
}
TWO_VIEW_TASKS = ("node-classification", "link-prediction")
LEDGER = Path(__file__).with_name("ledger") / "fedmgs.jsonl"


def run(dataset: str, task: str, rate: float, clients: int, algorithm: str, options: dict, model_options: dict,
        seed: int, args, data_cache: dict) -> dict[str, float] | None:
    """One federation's pooled test metrics, last-20 means (None: not run, ``--finished-only``, or a
    method that does not serve ``task``)."""
    if task not in ALGORITHMS.get(algorithm).tasks:
        return None
    model_options = ({"readout_context": args.readout_context} if args.readout_context else {}) | model_options
    if model_options.get("fill") == "mean" and TASK_MISSING[task] == "client":
        # a client has all or none of a modality's rows, so its own mean fills nothing: the zero-filled run
        model_options = {k: v for k, v in model_options.items() if k != "fill"}
    values = {"dataset": dataset, "task": task, "missing": f"{TASK_MISSING[task]}:{rate}", "num_clients": clients,
              "algorithm": algorithm, "algorithm_options": options, "model_options": model_options, "seed": seed,
              "rounds": args.rounds, "backend": "local", "torch_threads": args.torch_threads,
              "output_dir": str(args.out), "last_k": min(20, args.rounds), "overwrite": True,
              "run_name": experiment_name(dataset, task, rate, clients, algorithm, options, model_options, seed)}
    if args.data_dir:
        values["data_dir"] = str(args.data_dir)
    config = load_config(values)
    ledger = RunLedger(args.ledger)
    means = None
    if args.reuse or args.finished_only:
        means = ledger.lookup(config)
        if means is None and (summary := finished_summary(config)):
            means = last_means(summary)
    if means is None and args.finished_only:
        return None
    if means is None:
        key = (dataset, task, rate, clients)
        if key not in data_cache:
            data_cache[key] = build_federated_data(config)
        started = time.perf_counter()
        means = last_means(complete_run(config, data_cache[key]).summary)
        print(f"{values['run_name']}: {means[TASKS.get(task).headline]:.4f} "
              f"({time.perf_counter() - started:.0f} s)", flush=True)
    ledger.record(config, means)
    return means


def experiment_name(dataset: str, task: str, rate: float, clients: int, algorithm: str, options: dict,
                    model_options: dict, seed: int) -> str:
    """The run folder's name: the setting, the algorithm and the options it sets."""
    settings = '-'.join(f'{k}={v}' for k, v in {**options, **model_options}.items()) or 'default'
    return as_folder_name(f"{dataset}-{task}-{TASK_MISSING[task]}{rate}-k{clients}-{algorithm}-{settings}-s{seed}")


def last_means(summary: dict) -> dict[str, float]:
    return {metric: entry["mean"] for metric, entry in summary["all"].items()}


def mean_of(values: list[float | None]) -> float:
    done = [v for v in values if v is not None]
    return float(np.mean(done)) if done else float("nan")


def grid_tables(dataset: str, task: str, methods: dict, rates, clients, args, data_cache,
                others: str = "best baseline") -> str:
    """The task's headline table; for the cross-modal tasks also the same metric over complete nodes
    only (a synthesised modality is built from the node's other one, which flatters matching)."""
    columns = [(k, r) for k in clients for r in rates]
    results = {label: {c: [run(dataset, task, c[1], c[0], *spec, seed, args, data_cache) for seed in range(args.seeds)]
                       for c in columns} for label, spec in methods.items()}
    headline = TASKS.get(task).headline
    metrics = [headline] + ([f"{headline}_complete"] if task in ("modality-matching", "modality-retrieval") else [])
    tables = []
    for metric in metrics:
        picked = {label: {c: [None if r is None else r[metric] for r in runs] for c, runs in by_column.items()}
                  for label, by_column in results.items()}
        header = (f"| {dataset}: {task} ({metric}, {TASK_MISSING[task]}-level) | "
                  + " | ".join(f"K={k} ρ={r}" for k, r in columns) + " |\n|---|" + "---|" * len(columns) + "\n")
        lines = [f"| {label} | " + " | ".join(percent_over_seeds(picked[label][c]) for c in columns) + " |"
                 for label in picked]
        if "FedMGS" in picked and len(picked) > 1:
            margins = []
            for c in columns:
                baselines = [mean_of(picked[label][c]) for label in picked if not label.startswith("FedMGS")]
                best = max((value for value in baselines if not np.isnan(value)), default=float("nan"))
                margin = mean_of(picked["FedMGS"][c]) - best
                margins.append("—" if np.isnan(margin) else f"{100 * margin:+.2f}")
            lines.append(f"| *FedMGS − {others}* | " + " | ".join(margins) + " |")
        tables.append(header + "\n".join(lines) + "\n")
    return "\n".join(tables)


def note(args, what: str) -> str:
    command = shlex.join(["python", "benchmarks/fedmgs.py", *sys.argv[1:]])
    return (f"Command: `{command}` ({what}; {args.rounds} rounds, 10 local epochs, Adam lr 1e-3, mm_gnn d = 128; "
            f"pooled test metric in %, last-20-round mean, mean±std over {args.seeds} seed(s))\n\n")


def chosen_methods(args) -> dict:
    """The rows named by ``--methods``, in the tables' order."""
    return {label: spec for label, spec in METHODS.items() if label in args.methods}


def main_part(args) -> None:
    cache: dict = {}
    tables = [grid_tables("synthetic-mm", task, chosen_methods(args), args.rates, args.clients, args, cache)
              for task in args.tasks]
    body = note(args, "synthetic-mm with its default settings") + "\n".join(tables)
    replace_section(f"fedmgs-main{args.section_suffix}", body, args.results_file)
    print(body)


def ablation_part(args) -> None:
    cache: dict = {}
    methods = {label: ("fedmgs", options, {}) for label, options in ABLATIONS.items()}
    tables = [grid_tables("synthetic-mm", task, methods, (0.5,), (5,), args, cache, others="best ablated variant")
              for task in args.tasks]
    body = note(args, "synthetic-mm, K = 5, rate 0.5; each row removes one component") + "\n".join(tables)
    replace_section(f"fedmgs-ablation{args.section_suffix}", body, args.results_file)
    print(body)


def two_view_part(args) -> None:
    cache: dict = {}
    tables = [grid_tables(dataset, task, chosen_methods(args), RATES, (5,), args, cache)
              for dataset in ("cora-mm", "citeseer-mm") for task in TWO_VIEW_TASKS if task in args.tasks]
    body = note(args, "Cora and CiteSeer as two views (bag-of-words text, 128-dim NetMF structure), K = 5") \
        + "\n".join(tables)
    replace_section(f"fedmgs-two-view{args.section_suffix}", body, args.results_file)
    print(body)


def without_defaults(options: dict) -> dict:
    """FedMGS ``options`` less those at their current default, so that the defaults' row is the run
    every other table calls FedMGS (and reuses)."""
    fields = ALGORITHMS.get("fedmgs").Options.model_fields
    return {k: v for k, v in options.items() if fields[k].default != v}


def reading_diagnostics(run_dir: Path) -> dict[str, float]:
    """Means over clients at the last round of the diagnostics FedMGS writes, and seconds per round."""
    if not (run_dir / "metrics.parquet").is_dir():
        return {}
    metrics = read_metrics(run_dir)
    clients = metrics[(metrics.client_id != "server") & (metrics["round"] == metrics["round"].max())]
    values = {f"{split}_{metric}": float(group.value.mean())
              for (split, metric), group in clients.groupby(["split", "metric"])}
    seconds = metrics[(metrics.split == "round") & (metrics.metric == "seconds")].sort_values("round").value
    return values | {"seconds": statistics.median(seconds.iloc[1:]) if len(seconds) > 1 else float("nan")}


def readings_part(args) -> None:
    cache: dict = {}
    task, rate, clients = "node-classification", 0.5, 5
    columns = (("test accuracy", "accuracy"), ("train accuracy", "train_accuracy"),
               ("test acc., nodes missing a modality", "test_accuracy_missing"),
               ("test acc., complete nodes", "test_accuracy_complete"),
               ("η missing, train nodes", "train_eta_missing"), ("η missing, test nodes", "test_eta_missing"))
    lines = [f"| {args.dataset}, K={clients}, ρ={rate} (client-level) | " + " | ".join(c for c, _ in columns)
             + " | s/round |", "|---|" + "---|" * (len(columns) + 1)]
    for label, options in READINGS.items():
        options = without_defaults(options)
        per_seed = []
        for seed in range(args.seeds):
            means = run(args.dataset, task, rate, clients, "fedmgs", options, {}, seed, args, cache)
            name = experiment_name(args.dataset, task, rate, clients, "fedmgs", options, {}, seed)
            per_seed.append(None if means is None else means | reading_diagnostics(args.out / name))
        cells = [percent_over_seeds([None if r is None else r.get(key) for r in per_seed]) for _, key in columns]
        seconds = [r["seconds"] for r in per_seed if r and "seconds" in r]
        lines.append(f"| {label} | " + " | ".join(cells) + (f" | {np.mean(seconds):.2f} |" if seconds else " | — |"))
        print(lines[-1], flush=True)
    body = note(args, f"{args.dataset}, node classification; the diagnostics are means over clients at the last "
                      "round; — where the run's folder is not here (a ledger entry)") + "\n".join(lines) + "\n"
    replace_section(f"fedmgs-readings{args.section_suffix}", body, args.results_file)
    print(body)


def cost_part(args) -> None:
    """Seconds per round (median after the first) and bytes one client uploads per round."""
    lines = ["| method | task | s/round | upload bytes per client per round | of which statistics |",
             "|---|---|---|---|---|"]
    for task in args.tasks:
        for label, (algorithm, options, model_options) in METHODS.items():
            if task not in ALGORITHMS.get(algorithm).tasks:
                continue
            config = load_config({"dataset": "synthetic-mm", "task": task, "missing": f"{TASK_MISSING[task]}:0.5",
                                  "algorithm": algorithm, "algorithm_options": options, "model_options": model_options,
                                  "rounds": args.cost_rounds, "backend": "local", "torch_threads": 1,
                                  "output_dir": str(args.out), "run_name": f"cost-{task}-{algorithm}-{len(model_options)}",
                                  "overwrite": True})
            data = build_federated_data(config)
            backend = open_backend(config, data)
            update = backend.host.clients[0].train(backend.server.broadcast(0))
            statistics_bytes = sum(t.numel() * t.element_size() for t in update.stats.values())
            total = update.update.numel() * update.update.element_size() + statistics_bytes + 8   # + the sample count
            result = complete_run(config, data, resumable=False)
            metrics = read_metrics(result.run_dir)
            seconds = metrics[(metrics.split == "round") & (metrics.metric == "seconds")].sort_values("round").value
            lines.append(f"| {label} | {task} | {statistics.median(seconds.iloc[1:]):.3f} | {total:,} | "
                         f"{statistics_bytes:,} |")
            print(lines[-1], flush=True)
    command = shlex.join(["python", "benchmarks/fedmgs.py", *sys.argv[1:]])
    body = (f"Command: `{command}` (synthetic-mm, K = 5, rate 0.5, {args.cost_rounds} rounds, in-process, one torch "
            "thread; seconds per round = median after the first, training and evaluation of all clients)\n\n"
            + "\n".join(lines) + "\n")
    replace_section("fedmgs-cost", body, args.results_file)
    print(body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=("main", "ablation", "two-view", "cost", "readings"))
    parser.add_argument("--dataset", default="cora-mm", help="the readings part's dataset")
    parser.add_argument("--tasks", nargs="+", default=list(TASK_MISSING), choices=list(TASK_MISSING))
    parser.add_argument("--rates", nargs="+", type=float, default=list(RATES), help="missing rates (main part)")
    parser.add_argument("--clients", nargs="+", type=int, default=list(CLIENTS), help="client counts (main part)")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS), metavar="METHOD",
                        help="the rows to run and compose (main and two-view parts; default: all of %(choices)s)")
    parser.add_argument("--readout-context", choices=("none", "graph"), default=None,
                        help="mm_gnn's readout_context for every method (default: the model's, none)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--cost-rounds", type=int, default=10)
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=Path("results/benchmarks/fedmgs"))
    parser.add_argument("--results-file", type=Path, default=None)
    parser.add_argument("--section-suffix", default="", help="write the tables to sections named with this suffix")
    parser.add_argument("--ledger", type=Path, default=LEDGER,
                        help="the committed record of finished runs: read by --reuse/--finished-only, appended to")
    parser.add_argument("--reuse", action="store_true",
                        help="reuse finished runs recorded in the ledger, or else under --out")
    parser.add_argument("--finished-only", action="store_true",
                        help="tables from the finished runs only: run nothing; a cell shows (n) when fewer seeds ran")
    args = parser.parse_args()
    {"main": main_part, "ablation": ablation_part, "two-view": two_view_part, "cost": cost_part,
     "readings": readings_part}[args.part](args)


if __name__ == "__main__":
    main()
