"""FedEPD reproduction: long-tailed node classification over 10 Louvain clients.

Setting (FedEPD paper, Section 4.1): GCN, 2 layers, hidden 64, Adam lr 1e-2 (OpenFGL's
optimizer; weight decay 5e-4, dropout 0.5 as OpenFGL), 3 local epochs, 200 rounds, 10 clients
from Louvain, 60/20/20 splits per client. Datasets: Email-Eu-core (natural long tail),
Cora-LT and CiteSeer-LT (training labels down-sampled to IR 20), and Chameleon (geom-gcn; by
default its long-tailed variant ``chameleon-lt`` at the same IR, since the natural one has IR
1.4 — pass ``--datasets ... chameleon`` for it).

Methods: FedAvg, Local, FedProto, FedLC (as the authors' code: classes a client lacks leave its
softmax; and with them kept in, ``absent_classes=count_one``), and FedEPD with the paper's in-training logit
adjustment (``logit_adjust=train``) and the post-hoc one (``posthoc``); ablations of FedEPD
(default options) without consensus, purification, recalibration. Every cell is the pooled
test score (all clients' confusion matrices summed) averaged over the last 20 rounds of a run,
then mean ± std over seeds (``seed`` varies; the data, ``data_seed = 0``, is the same for every
method). Head/medium/tail: classes sorted by global training count, cut into thirds.

Writes two marked sections of ``benchmarks/RESULTS.md`` (``fedepd-main``, ``fedepd-ablation``)
and per-dataset Figure-4 style plots (per-class test accuracy, seed 0) under ``--out``.

    python benchmarks/fedepd.py                      # the full reproduction (hours on 2 CPUs)
    python benchmarks/fedepd.py --rounds 2 --seeds 1 # smoke run
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fedia_common import complete_run, finished_summary, replace_section  # noqa: E402

from fgl_ray.algorithms.fedepd import FedEPD  # noqa: E402
from fgl_ray.errors import as_folder_name  # noqa: E402
from fgl_ray.config import load_config  # noqa: E402
from fgl_ray.data import build_federated_data  # noqa: E402
from fgl_ray.results import plot_class_accuracy  # noqa: E402

DATASETS = ("email-eu-core", "cora-lt", "citeseer-lt", "chameleon-lt")
DEFAULT_LA = FedEPD.Options().logit_adjust
METHODS = {
    "FedAvg": ("fedavg", {}),
    "Local": ("local", {}),
    "FedProto": ("fedproto", {}),
    "FedLC": ("fedlc", {}),
    "FedLC (absent classes in softmax)": ("fedlc", {"absent_classes": "count_one"}),
    "FedEPD (LA=train, paper)": ("fedepd", {"logit_adjust": "train"}),
    "FedEPD (LA=posthoc)": ("fedepd", {"logit_adjust": "posthoc"}),
}
ABLATIONS = {
    f"FedEPD (LA={DEFAULT_LA})": ("fedepd", {}),
    "w/o consensus": ("fedepd", {"consensus": False}),
    "w/o purification": ("fedepd", {"purification": False}),
    "w/o recalibration": ("fedepd", {"recalibration": False}),
}
COLUMNS = (("Acc", "accuracy"), ("bAcc", "balanced_accuracy"), ("Macro-F1", "macro_f1"),
           ("Head", "head_accuracy"), ("Medium", "medium_accuracy"), ("Tail", "tail_accuracy"))
SETTING = dict(partition="louvain", num_clients=10, model="gcn", num_layers=2, hidden=64, dropout=0.5,
               optimizer="adam", lr=1e-2, weight_decay=5e-4, local_epochs=3, data_seed=0, last_k=20)


def base_config(dataset: str, args) -> dict:
    values = dict(SETTING, dataset=dataset, rounds=args.rounds, imbalance_ratio=args.imbalance_ratio,
                  backend=args.backend, output_dir=str(args.out), last_k=min(20, args.rounds),
                  eval_every=args.eval_every, torch_threads=args.torch_threads, overwrite=True)
    if args.data_dir:
        values["data_dir"] = str(args.data_dir)
    return values


def run_method(dataset: str, label: str, algorithm: str, options: dict, data, args) -> list[dict]:
    """Runs one method for every seed; returns the per-seed last-K pooled test scores."""
    scores = []
    for seed in range(args.seeds):
        settings = "-".join(f"{k}={v}" for k, v in options.items()) or "default"
        name = as_folder_name(f"{dataset}-{algorithm}-{settings}-s{seed}")
        config = load_config(base_config(dataset, args) | dict(algorithm=algorithm, algorithm_options=options,
                                                                seed=seed, run_name=name))
        started = time.perf_counter()
        summary = args.reuse and finished_summary(config) or complete_run(config, data).summary
        pooled = summary["all"]
        scores.append({metric: pooled.get(metric, {}).get("mean") for _, metric in COLUMNS}
                      | {"run_dir": str(Path(config.output_dir) / name), "references": summary.get("references")})
        print(f"{dataset} | {label} | seed {seed}: bAcc {pooled['balanced_accuracy']['mean']:.4f} "
              f"F1 {pooled['macro_f1']['mean']:.4f} ({time.perf_counter() - started:.0f} s)", flush=True)
    return scores


def cell(values: list) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    return f"{100 * np.mean(values):.2f}±{100 * np.std(values):.2f}"


def reference_line(results: dict[str, list[dict]]) -> list[str]:
    """The majority-class predictor of the pooled test set (label-only; head/medium/tail n/a)."""
    refs = next((s[0]["references"] for s in results.values() if s and s[0].get("references")), None)
    if refs is None:
        return []
    pooled = refs["majority"]["all"]
    values = [f"{100 * pooled[m]:.2f}" if m in pooled else "–" for _, m in COLUMNS]
    return ["| *majority class (label-only reference)* | " + " | ".join(values) + " |"]


def table(dataset: str, results: dict[str, list[dict]]) -> str:
    header = f"| {dataset} | " + " | ".join(name for name, _ in COLUMNS) + " |\n|---|" + "---|" * len(COLUMNS) + "\n"
    lines = [f"| {label} | " + " | ".join(cell([s[m] for s in scores]) for _, m in COLUMNS) + " |"
             for label, scores in results.items()]
    return header + "\n".join(lines + reference_line(results)) + "\n"


def class_figure(dataset: str, results: dict[str, list[dict]], out: Path) -> Path | None:
    """Figure 4: per-class test accuracy of seed 0 of every method, frequency-sorted classes."""
    curves, counts = {}, None
    for label, scores in results.items():
        path = Path(scores[0]["run_dir"]) / "class_accuracy.json"
        if path.exists():
            saved = json.loads(path.read_text())
            counts = saved["class_counts"]
            curves[label] = np.array([np.nan if a is None else a for a in saved["accuracy"]])
    if counts is None:
        return None
    return plot_class_accuracy(curves, np.asarray(counts), out / f"class_accuracy-{dataset}.png",
                               title=f"{dataset}: per-class test accuracy (seed 0, last round)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--imbalance-ratio", type=int, default=20)
    parser.add_argument("--backend", choices=("ray", "local"), default="ray")
    parser.add_argument("--eval-every", type=int, default=1, help="evaluate every N rounds (the last-20 window "
                                                                      "then spans 20 evaluations)")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--torch-threads", type=int, default=None, help="torch threads per worker (default: by CPUs)")
    parser.add_argument("--methods", nargs="+", default=None,
                        help="run only the methods whose label contains one of these strings (e.g. FedEPD FedAvg)")
    parser.add_argument("--skip-ablation", action="store_true")
    parser.add_argument("--reuse", action="store_true", help="reuse finished runs of the same experiment under --out")
    parser.add_argument("--out", type=Path, default=Path("results/benchmarks/fedepd"))
    parser.add_argument("--no-write", action="store_true", help="print the tables without touching RESULTS.md")
    parser.add_argument("--results-file", type=Path, default=None,
                        help="write the marked sections into this markdown file instead of benchmarks/RESULTS.md")
    parser.add_argument("--section-suffix", default="",
                        help="write the sections fedepd-main<suffix> and fedepd-ablation<suffix>")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    main_tables, ablation_tables = [], []
    if args.backend == "ray":
        from fgl_ray.runtime.ray_backend import ray_session
        session = ray_session()
    else:
        session = nullcontext()
    with session:
        for dataset in args.datasets:
            data = build_federated_data(load_config(base_config(dataset, args)))
            counts = np.asarray(data.meta["class_counts"])
            print(f"{dataset}: {data.num_classes} classes, training counts max/min "
                  f"{counts.max()}/{max(counts.min(), 1)}", flush=True)
            results = {label: run_method(dataset, label, algorithm, options, data, args)
                       for label, (algorithm, options) in METHODS.items()
                       if args.methods is None or any(part in label for part in args.methods)}
            main_tables.append(table(dataset, results))
            figure = class_figure(dataset, results, args.out)
            if figure is not None:
                print(f"figure: {figure}", flush=True)
            if not args.skip_ablation:
                ablation = {}
                for label, (algorithm, options) in ABLATIONS.items():
                    same = [main for main, spec in METHODS.items()
                            if not options and spec == ("fedepd", {"logit_adjust": DEFAULT_LA}) and main in results]
                    ablation[label] = (results[same[0]] if same
                                       else run_method(dataset, label, algorithm, options, data, args))
                ablation_tables.append(table(dataset, ablation))
    command = shlex.join(["python", "benchmarks/fedepd.py", *sys.argv[1:]])
    note = (f"Command: `{command}` ({args.rounds} rounds, {args.seeds} seed(s), IR {args.imbalance_ratio}; the "
            f"protocol defaults (optimizer state reset each round, FedEPD clients weighted by |V_k|, evaluation of "
            f"the global model, random splits); pooled "
            f"test scores in %, each run averaged over its last {min(20, args.rounds)} rounds, then mean±std over "
            f"seeds; head/medium/tail = thirds of the classes by global training count; run folders and "
            f"per-class plots under `{args.out}`)\n\n")
    main_body = note + "\n".join(main_tables)
    ablation_body = note + "\n".join(ablation_tables)
    print(main_body)
    print(ablation_body)
    if not args.no_write:
        replace_section(f"fedepd-main{args.section_suffix}", main_body, args.results_file)
        if ablation_tables:
            replace_section(f"fedepd-ablation{args.section_suffix}", ablation_body, args.results_file)


if __name__ == "__main__":
    main()
