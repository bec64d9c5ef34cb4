"""GCFL / GCFL+ reproduction (graph classification over non-IID clients) and its speed on Ray.

    FGL_DATA_DIR=../shared/datasets python benchmarks/gcfl.py reproduce [--seeds 3] [--settings proteins ...]
    FGL_DATA_DIR=../shared/datasets python benchmarks/gcfl.py speed [--rounds 100]

``reproduce``: for each setting (PROTEINS, IMDB-BINARY and NCI1 cut into 10/10/30 clients; the
MOLECULES, BIOCHEM and MIX groups, one client per dataset, and the paper's tiny variants of the
last two, 150 graphs per dataset: a full BIOCHEM run takes about 30 minutes here, DD and NCI1
dominating) it runs ``local`` (self-training),
``fedavg``, ``fedprox`` (mu = 0.01), ``gcfl`` and ``gcfl_plus`` with the graph-classification
defaults (GCFL's setting: GIN, Adam lr 1e-3, batch 128, 1 local epoch, 200 rounds, local optimizer
state kept as in GCFL's code) and the dataset's split criteria. Per method: the average over
clients of the client's test accuracy at the final round and at the best-validation round (one
round for every client, chosen by pooled validation accuracy; never each client's best cached
model), the average gain over self-training of the same client, and how many clients it helps
(gain > 0), mean ± std over seeds. Tables go to the ``gcfl-reproduction`` section of
``benchmarks/RESULTS.md``.

``speed``: GCFL on PROTEINS, 10 clients, Ray backend, in a fresh Ray session: seconds until the
first round ends (from before data loading and ``ray.init``), the median seconds per round after
the first, and the peak memory summed over the driver and every Ray process (PSS, which counts
shared library pages once; RSS beside it), sampled every 0.25 s.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fedia_common import complete_run, finished_summary, replace_section  # noqa: E402
from measure import MemorySampler  # noqa: E402

from fgl_ray.config import load_config  # noqa: E402
from fgl_ray.data import build_federated_data  # noqa: E402

SETTINGS = {
    "proteins": {"dataset": "tu-proteins", "num_clients": 10},
    "imdb-binary": {"dataset": "tu-imdb-binary", "num_clients": 10},
    "nci1": {"dataset": "tu-nci1", "num_clients": 30},
    "molecules": {"dataset": "tu-molecules"},
    "biochem": {"dataset": "tu-biochem"},
    "mix": {"dataset": "tu-mix"},
    "biochem-tiny": {"dataset": "tu-biochem", "max_graphs": 150},
    "mix-tiny": {"dataset": "tu-mix", "max_graphs": 150},
}
METHODS = {
    "self-train (local)": ("local", {}),
    "FedAvg": ("fedavg", {}),
    "FedProx (μ=0.01)": ("fedprox", {"mu": 0.01}),
    "GCFL": ("gcfl", {}),
    "GCFL+": ("gcfl_plus", {}),
}
SELF_TRAIN = "self-train (local)"


def client_accuracy(summary: dict, which: str) -> dict[str, float]:
    """Each client's test accuracy at the ``final`` or the ``best_validation`` round."""
    return {c: scores["accuracy"] for c, scores in summary[which]["clients"].items()}


def run_setting(name: str, values: dict, args) -> dict[str, list[dict]]:
    """Every method on one setting for every seed; per-seed summaries."""
    base = values | {"backend": args.backend, "torch_threads": args.torch_threads, "rounds": args.rounds,
                     "output_dir": str(args.out), "data_seed": 0, "overwrite": True}
    if args.data_dir:
        base["data_dir"] = str(args.data_dir)
    data = build_federated_data(load_config(base))
    print(f"{name}: {len(data.clients)} clients, {sum(c.data.num_graphs for c in data.clients)} graphs", flush=True)
    results = {}
    for label, (algorithm, options) in METHODS.items():
        if args.methods and not any(part in label for part in args.methods):
            continue
        results[label] = []
        for seed in range(args.seeds):
            config = load_config(base | {"algorithm": algorithm, "algorithm_options": options, "seed": seed,
                                         "run_name": f"{name}-{algorithm}-s{seed}"})
            started = time.perf_counter()
            summary = args.reuse and finished_summary(config) or complete_run(config, data).summary
            summary = summary | {"run_dir": str(Path(config.output_dir) / config.run_name)}
            results[label].append(summary)
            print(f"{name} | {label} | seed {seed}: final avg acc {summary['final']['avg_over_clients']['accuracy']:.4f}"
                  f" ({time.perf_counter() - started:.0f} s)", flush=True)
    return results


def gains(results: dict[str, list[dict]], label: str, which: str) -> tuple[list[float], list[int]]:
    """Per seed: the mean over clients of (method - self-train) accuracy, and the clients helped."""
    mean_gain, helped = [], []
    for method, local in zip(results[label], results[SELF_TRAIN]):
        own, alone = client_accuracy(method, which), client_accuracy(local, which)
        delta = [own[c] - alone[c] for c in alone]
        mean_gain.append(float(np.mean(delta)))
        helped.append(int(sum(d > 0 for d in delta)))
    return mean_gain, helped


def spread(values, scale: float = 100.0, digits: int = 2) -> str:
    return f"{scale * np.mean(values):.{digits}f}±{scale * np.std(values):.{digits}f}"


def table(name: str, results: dict[str, list[dict]]) -> str:
    clients = len(next(iter(results.values()))[0]["final"]["clients"])
    lines = [f"| {name} ({clients} clients) | final acc | final gain | helped | best-val acc | best-val gain "
             "| helped | clusters |", "|---|---|---|---|---|---|---|---|"]
    for label, summaries in results.items():
        cells = []
        for which in ("final", "best_validation"):
            accuracy = [s[which]["avg_over_clients"]["accuracy"] for s in summaries]
            cells.append(spread(accuracy))
            if label == SELF_TRAIN or SELF_TRAIN not in results:
                cells += ["–", "–"]
            else:
                mean_gain, helped = gains(results, label, which)
                cells += [spread(mean_gain), f"{np.mean(helped):.1f}/{clients}"]
        cells.append(clusters_of(summaries))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def clusters_of(summaries: list[dict]) -> str:
    """Clusters at the end of each seed's run (from its ``clusters.json``), or – without any."""
    counts = []
    for summary in summaries:
        path = Path(summary["run_dir"]) / "clusters.json"
        if path.is_file():
            counts.append(len(json.loads(path.read_text())[-1]["clusters"]))
    return "/".join(map(str, counts)) if counts else "–"


def reproduce(args) -> None:
    from fgl_ray.runtime.ray_backend import ray_session

    tables = []
    with ray_session() if args.backend == "ray" else nullcontext():
        for name in args.settings:
            results = run_setting(name, SETTINGS[name], args)
            tables.append(table(name, results))
            print(tables[-1], flush=True)
    command = shlex.join(["python", "benchmarks/gcfl.py", *sys.argv[1:]])
    body = (f"Command: `FGL_DATA_DIR=../shared/datasets {command}` ({args.rounds} rounds, {args.seeds} seed(s); "
            "accuracy % averaged over clients, mean±std over seeds; gain = the same client's accuracy minus "
            "self-training's, averaged over clients; helped = clients with a positive gain, mean over seeds; "
            "clusters = clusters at the end of each seed's run)\n\n" + "\n".join(tables))
    if not args.no_write:
        replace_section(f"gcfl-reproduction{args.section_suffix}", body, args.results_file)
    print(body)


def speed(args) -> None:
    from fgl_ray.runtime.ray_backend import ray_session

    values = {"dataset": "tu-proteins", "num_clients": 10, "algorithm": "gcfl", "rounds": args.rounds,
              "backend": "ray", "output_dir": str(args.out), "run_name": "speed-gcfl-proteins", "overwrite": True}
    if args.data_dir:
        values["data_dir"] = str(args.data_dir)
    ends = []
    with MemorySampler() as memory:
        started = time.perf_counter()
        config = load_config(values)
        data = build_federated_data(config)
        with ray_session():
            result = complete_run(config, data,
                                  on_round=lambda r, rows: ends.append(time.perf_counter()))
        total = time.perf_counter() - started
    per_round = [b - a for a, b in zip(ends, ends[1:])]
    summary = result.summary
    lines = [
        f"GCFL, PROTEINS, 10 clients, {args.rounds} rounds, Ray backend (fresh session)",
        f"first round done after {ends[0] - started:.1f} s (data loading, ray.init, actor start-up, round 0)",
        f"seconds per round after the first: median {statistics.median(per_round):.3f}, "
        f"mean {statistics.mean(per_round):.3f}",
        f"peak memory over the driver and all Ray processes: PSS {memory.peak_pss / 2**30:.2f} GiB "
        f"(RSS {memory.peak_rss / 2**30:.2f} GiB)",
        f"test accuracy averaged over clients: final {100 * summary['final']['avg_over_clients']['accuracy']:.2f}, "
        f"best-validation round {100 * summary['best_validation']['avg_over_clients']['accuracy']:.2f}; "
        f"last-20 mean {100 * summary['avg_over_clients']['accuracy']['mean']:.2f}",
        f"whole command {total:.1f} s",
    ]
    command = shlex.join(["python", "benchmarks/gcfl.py", *sys.argv[1:]])
    body = f"Command: `FGL_DATA_DIR=../shared/datasets {command}`\n\n```\n" + "\n".join(lines) + "\n```\n"
    if not args.no_write:
        replace_section("gcfl-speed", body, args.results_file)
    print(body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=("reproduce", "speed"))
    parser.add_argument("--settings", nargs="+", choices=sorted(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--methods", nargs="+", default=None, help="run only methods whose label contains these")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=None, help="default: 200 (reproduce), 100 (speed)")
    parser.add_argument("--backend", choices=("ray", "local"), default="ray")
    parser.add_argument("--torch-threads", type=int, default=None)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--reuse", action="store_true", help="reuse finished runs of the same experiment under --out")
    parser.add_argument("--out", type=Path, default=Path("results/benchmarks/gcfl"))
    parser.add_argument("--results-file", type=Path, default=None)
    parser.add_argument("--section-suffix", default="")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    args.rounds = args.rounds or (200 if args.part == "reproduce" else 100)
    (reproduce if args.part == "reproduce" else speed)(args)


if __name__ == "__main__":
    main()
