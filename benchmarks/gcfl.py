"""GCFL / GCFL+ reproduction (graph classification over non-IID clients) and its speed on Ray.

    FGL_DATA_DIR=../shared/datasets python benchmarks/gcfl.py reproduce [--seeds 3] [--settings proteins ...]
        [--protocol ours|authors|both]
    FGL_DATA_DIR=../shared/datasets python benchmarks/gcfl.py speed [--rounds 100]

``reproduce``: for each setting (PROTEINS, IMDB-BINARY and NCI1 cut into 10/10/30 clients; the
MOLECULES, BIOCHEM and MIX groups, one client per dataset, and the paper's tiny variants of the
last two, 150 graphs per dataset: a full BIOCHEM run takes about 30 minutes here, DD and NCI1
dominating) it runs ``local`` (self-training),
``fedavg``, ``fedprox`` (mu = 0.01), ``gcfl`` and ``gcfl_plus`` with the graph-classification
defaults (GCFL's setting: GIN, Adam lr 1e-3, batch 128, 1 local epoch, 200 rounds, local optimizer
state kept as in GCFL's code) and the dataset's split criteria. A client with at most 128 training
graphs takes one optimizer step per round, from the global weights, where FedProx's proximal
gradient is zero: FedProx then equals FedAvg exactly (NCI1's 30 clients, for instance). Per method: the average over
clients of the client's test accuracy at the final round and at the best-validation round (one
round for every client, chosen by pooled validation accuracy; never each client's best cached
model), the average gain over self-training of the same client, and how many clients it helps
(gain > 0), mean ± std over seeds. Tables go to the ``gcfl-reproduction`` section of
``benchmarks/RESULTS.md``. Each finished run's per-client figures go to the committed
``benchmarks/ledger/gcfl.jsonl`` (:func:`run_record`); ``--reuse`` takes a run from the ledger,
or else from its folder under ``--out``, so a fresh checkout recomposes a table or adds seeds
without re-running (tested: the tables come out equal either way).

``--protocol authors`` (or ``both``, the default) adds a second table per setting that moves
from our protocol to the GCFL authors' one step by step, so that it shows how much of the paper's
gain each choice accounts for: (1) self-training compared at 50 epochs on a single dataset and
100 on a group (the authors' budget; read from the same self-training run at that round, one
local epoch per round) instead of 200; helped counted as gain >= 0 beside > 0; (2) the authors'
partition ``chunks_ordered`` (file-order blocks of 50; the federations rerun on it; groups keep
one client per dataset); (3) the authors' reported figure: for GCFL/GCFL+ each client's best
*test* accuracy over the snapshots the authors cache (before every split of the client's
cluster and at the end); the final round for the other methods. Step (3) chooses on the test set
and is labelled so. ``benchmarks/fidelity.py`` reads the same steps from the ledger alone
(:func:`recorded_results`).

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

from fedia_common import RunLedger, complete_run, finished_summary, replace_section  # noqa: E402
from measure import MemorySampler  # noqa: E402

from fgl_ray.config import load_config  # noqa: E402
from fgl_ray.data import build_federated_data  # noqa: E402
from fgl_ray.results.summary import client_tables  # noqa: E402
from fgl_ray.results.writer import read_metrics  # noqa: E402

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
#: The authors' self-training epochs: 50 on a single dataset, 100 on a group of datasets.
AUTHORS_SELF_TRAIN_EPOCHS = {True: 50, False: 100}
ORDERED = "chunks_ordered"


LEDGER = Path(__file__).with_name("ledger") / "gcfl.jsonl"


def client_accuracy(summary: dict, which: str) -> dict[str, float]:
    """Each client's test accuracy at the ``final`` or the ``best_validation`` round."""
    return {c: scores["accuracy"] for c, scores in summary[which]["clients"].items()}


def run_record(summary: dict, run_dir: Path) -> dict:
    """What the tables read from a finished run, small enough for the ledger: each client's test
    accuracy at the final and the best-validation round, after the authors' self-training epochs
    (:func:`accuracy_after`) and as the authors report it (:func:`authors_figure`), the client
    averages, the rounds run and the clusters at the end (None without clustering)."""
    test = client_tables(read_metrics(run_dir), "test")["accuracy"].rename(columns=str)
    path = run_dir / "clusters.json"
    changes = json.loads(path.read_text()) if path.is_file() else None
    final = client_accuracy(summary, "final")
    return {"final": final, "best_validation": client_accuracy(summary, "best_validation"),
            "final_avg": summary["final"]["avg_over_clients"]["accuracy"],
            "best_validation_avg": summary["best_validation"]["avg_over_clients"]["accuracy"],
            "rounds": summary["final"]["round"] + 1,
            "after": {str(epochs): accuracy_after(test, epochs) for epochs in set(AUTHORS_SELF_TRAIN_EPOCHS.values())},
            "authors": authors_figure(final, test, changes),
            "clusters": len(changes[-1]["clusters"]) if changes else None}


def selected(label: str, parts: list[str] | None) -> bool:
    """Whether ``--methods`` picks this method: a full label picks that method alone ("GCFL" is
    not "GCFL+"), any other text every label containing it; no ``--methods`` picks all."""
    return not parts or any(part == label if part in METHODS else part in label for part in parts)


def is_single_dataset(values: dict) -> bool:
    """Whether a setting cuts one dataset into clients (not one client per dataset of a group)."""
    return "num_clients" in values


def run_setting(name: str, values: dict, args, partition: str | None = None,
                recorded_only: bool = False) -> dict[str, list[dict]] | None:
    """Every method on one setting for every seed (on ``partition`` when given): per-seed run
    records (:func:`run_record`), from the ledger or else the run folder with ``--reuse``, else run;
    with ``recorded_only``, from the ledger alone, and None when a run is missing from it."""
    base = values | {"backend": args.backend, "torch_threads": args.torch_threads, "rounds": args.rounds,
                     "output_dir": str(args.out), "data_seed": 0, "overwrite": True}
    if partition:
        base["partition"] = partition
        name = f"{name}-{partition}"
    if args.data_dir:
        base["data_dir"] = str(args.data_dir)
    ledger, data = RunLedger(args.ledger, field="figures"), None
    results = {}
    for label, (algorithm, options) in METHODS.items():
        if not selected(label, args.methods):
            continue
        results[label] = []
        for seed in range(args.seeds):
            config = load_config(base | {"algorithm": algorithm, "algorithm_options": options, "seed": seed,
                                         "run_name": f"{name}-{algorithm}-s{seed}"})
            started, run_dir = time.perf_counter(), Path(config.output_dir) / config.run_name
            record = (args.reuse or recorded_only) and ledger.lookup(config)
            if not record and recorded_only:
                return None
            if not record and args.reuse and (summary := finished_summary(config)):
                record = run_record(summary, run_dir)
            if not record:
                if data is None:
                    data = build_federated_data(load_config(base))
                    print(f"{name}: {len(data.clients)} clients, "
                          f"{sum(c.data.num_graphs for c in data.clients)} graphs", flush=True)
                record = run_record(complete_run(config, data).summary, run_dir)
            ledger.record(config, record)
            results[label].append(record)
            print(f"{name} | {label} | seed {seed}: final avg acc {record['final_avg']:.4f}"
                  f" ({time.perf_counter() - started:.0f} s)", flush=True)
    return results


def recorded_results(name: str, seeds: int, ledger: Path = LEDGER, rounds: int = 200):
    """Self-training, FedAvg, GCFL and GCFL+ on a setting for ``seeds`` seeds, from the ledger alone:
    (records, records on ``chunks_ordered``; the same for a group), or None when a run is missing."""
    args = argparse.Namespace(backend="local", torch_threads=1, rounds=rounds, out=Path("unused"), data_dir=None,
                              seeds=seeds, methods=[SELF_TRAIN, "FedAvg", "GCFL", "GCFL+"], reuse=True,
                              ledger=ledger)
    values = SETTINGS[name]
    ours = run_setting(name, values, args, recorded_only=True)
    if ours is None or not is_single_dataset(values):
        return ours and (ours, ours)
    ordered = run_setting(name, values, args, ORDERED, recorded_only=True)
    return ordered and (ours, ordered)


def gains(results: dict[str, list[dict]], label: str, which: str) -> tuple[list[float], list[int]]:
    """Per seed: the mean over clients of (method - self-train) accuracy, and the clients helped."""
    mean_gain, helped, _ = compare([s[which] for s in results[label]], [s[which] for s in results[SELF_TRAIN]])
    return mean_gain, helped


def compare(own: list[dict], alone: list[dict]) -> tuple[list[float], list[int], list[int]]:
    """Per seed: the mean over clients of ``own - alone`` accuracy, the clients with a gain > 0
    and those with a gain >= 0 (the authors' count; 1e-9 absorbs float noise in equal scores)."""
    mean_gain, helped, not_hurt = [], [], []
    for mine, theirs in zip(own, alone):
        delta = [mine[c] - theirs[c] for c in theirs]
        mean_gain.append(float(np.mean(delta)))
        helped.append(int(sum(d > 1e-9 for d in delta)))
        not_hurt.append(int(sum(d >= -1e-9 for d in delta)))
    return mean_gain, helped, not_hurt


def accuracy_after(test, epochs: int) -> dict[str, float]:
    """Each client's test accuracy (``test``: round x client) after ``epochs`` rounds of one local
    epoch (self-training stopped early, as the authors' budget), or at the last round of a shorter run."""
    return test.loc[min(epochs - 1, int(test.index.max()))].to_dict()


def snapshot_rounds(changes: list[dict]) -> list[tuple[int, list[str]]]:
    """The authors' cached snapshots: before each split (the round before the membership
    changed) for the clients of every cluster that split then."""
    snapshots = []
    for before, after in zip(changes, changes[1:]):
        kept = {tuple(members) for members in after["clusters"].values()}
        split = [members for members in before["clusters"].values() if tuple(members) not in kept]
        snapshots.append((max(after["round"] - 1, 0), [str(c) for members in split for c in members]))
    return snapshots


def authors_figure(final: dict[str, float], test, changes: list[dict] | None) -> dict[str, float]:
    """The figure GCFL's code reports: for a clustered run (``changes``, its ``clusters.json``)
    each client's best test accuracy over the snapshots cached at its cluster's splits and at the
    end (chosen on the test set); the final test accuracy for every other run."""
    best = dict(final)
    for round_index, clients in snapshot_rounds(changes or []):
        for client in clients:
            best[client] = max(best[client], float(test.loc[round_index, client]))
    return best


def spread(values, scale: float = 100.0, digits: int = 2) -> str:
    return f"{scale * np.mean(values):.{digits}f}±{scale * np.std(values):.{digits}f}"


def table(name: str, results: dict[str, list[dict]]) -> str:
    clients = len(next(iter(results.values()))[0]["final"])
    lines = [f"| {name} ({clients} clients) | final acc | final gain | helped | best-val acc | best-val gain "
             "| helped | clusters |", "|---|---|---|---|---|---|---|---|"]
    for label, summaries in results.items():
        cells = []
        for which in ("final", "best_validation"):
            accuracy = [s[f"{which}_avg"] for s in summaries]
            cells.append(spread(accuracy))
            if label == SELF_TRAIN or SELF_TRAIN not in results:
                cells += ["–", "–"]
            else:
                mean_gain, helped = gains(results, label, which)
                cells += [spread(mean_gain), f"{np.mean(helped):.1f}/{clients}"]
        cells.append(clusters_of(summaries))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def clusters_of(records: list[dict]) -> str:
    """Clusters at the end of each seed's run, or – without clustering."""
    counts = [record["clusters"] for record in records if record["clusters"] is not None]
    return "/".join(map(str, counts)) if counts else "–"


#: The steps of :func:`protocol_steps`, from our protocol to the authors'.
STEPS = ("ours", "short_self_train", "ordered", "authors")


def protocol_steps(single: bool, ours: dict[str, list[dict]], ordered: dict[str, list[dict]]) -> dict[str, dict]:
    """Per method and step: per-seed mean gains over self-training and clients with gain > 0 / >= 0.
    ``ours``: final accuracy against self-training at the same round; ``short_self_train``: against
    self-training stopped at the authors' epochs; ``ordered``: the same on ``chunks_ordered``;
    ``authors``: the authors' figure (:func:`authors_figure`) there."""
    epochs = str(AUTHORS_SELF_TRAIN_EPOCHS[single])
    short = {key: [s["after"][epochs] for s in runs[SELF_TRAIN]] for key, runs in (("ours", ours),
                                                                                   ("ordered", ordered))}
    steps = {SELF_TRAIN: {"accuracy": [s["final_avg"] for s in ours[SELF_TRAIN]],
                          "short": [float(np.mean(list(a.values()))) for a in short["ours"]],
                          "short_ordered": [float(np.mean(list(a.values()))) for a in short["ordered"]]}}
    for label in ours:
        if label == SELF_TRAIN:
            continue
        final = [s["final"] for s in ours[label]]
        steps[label] = dict(zip(STEPS, (
            compare(final, [s["final"] for s in ours[SELF_TRAIN]]),
            compare(final, short["ours"]),
            compare([s["final"] for s in ordered[label]], short["ordered"]),
            compare([s["authors"] for s in ordered[label]], short["ordered"]))))
        steps[label]["authors_accuracy"] = [float(np.mean(list(s["authors"].values()))) for s in ordered[label]]
    return steps


def protocol_table(name: str, single: bool, clients: int, rounds: int, steps: dict[str, dict]) -> str:
    """From our protocol to the authors', one choice per column (gain over self-training; helped as
    > 0 and >= 0 over the clients, means over seeds)."""
    partition = f"+ {ORDERED}" if single else "partition unchanged (one client per dataset)"
    lines = [f"| {name}: our protocol → the authors' | final, self-train {rounds} ep: gain (>0) "
             f"| self-train {AUTHORS_SELF_TRAIN_EPOCHS[single]} ep: gain (>0 / ≥0) | {partition}: gain (≥0) "
             "| + best test snapshot (authors' figure; chosen on test): acc, gain (≥0) |", "|---|---|---|---|---|"]

    def cell(gain, *counts):
        return f"{spread(gain)} ({' / '.join(f'{np.mean(c):.1f}' for c in counts)}/{clients})"

    for label, step in steps.items():
        if label == SELF_TRAIN:
            cells = [spread(step[key]) + " acc" for key in ("accuracy", "short", "short_ordered")] + ["as before"]
        else:
            cells = [cell(*step["ours"][:2]), cell(*step["short_self_train"]), cell(step["ordered"][0],
                     step["ordered"][2]), f"{spread(step['authors_accuracy'])}, "
                                          f"{cell(step['authors'][0], step['authors'][2])}"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def reproduce(args) -> None:
    from fgl_ray.runtime.ray_backend import ray_session

    tables = []
    with ray_session() if args.backend == "ray" else nullcontext():
        for name in args.settings:
            values = SETTINGS[name]
            results, setting = run_setting(name, values, args), []
            if args.protocol != "authors":
                setting.append(table(name, results))
            if args.protocol != "ours" and SELF_TRAIN not in results:
                print(f"{name}: no protocol table without self-training (add it to --methods)", flush=True)
            elif args.protocol != "ours":
                single = is_single_dataset(values)
                ordered = run_setting(name, values, args, ORDERED) if single else results
                steps = protocol_steps(single, results, ordered)
                first = results[SELF_TRAIN][0]
                setting.append(protocol_table(name, single, len(first["final"]), first["rounds"], steps))
            print("\n".join(setting), flush=True)
            tables += setting
    command = shlex.join(["python", "benchmarks/gcfl.py", *sys.argv[1:]])
    body = (f"Command: `FGL_DATA_DIR=../shared/datasets {command}` ({args.rounds} rounds, {args.seeds} seed(s); "
            "accuracy % averaged over clients, mean±std over seeds; gain = the same client's accuracy minus "
            "self-training's, averaged over clients; helped = clients with a positive gain, mean over seeds; "
            "clusters = clusters at the end of each seed's run; the second table of each setting "
            "changes one choice per column, left to right, each column keeping the ones before it: see the "
            "script's docstring)\n\n" + "\n".join(tables))
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
            result = complete_run(config, data, resumable=False,
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
    parser.add_argument("--methods", nargs="+", default=None, help="run only these methods: a full label (GCFL is not GCFL+) or text every picked label contains")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--protocol", choices=("ours", "authors", "both"), default="both",
                        help="our table, the table from our protocol to the authors', or both")
    parser.add_argument("--rounds", type=int, default=None, help="default: 200 (reproduce), 100 (speed)")
    parser.add_argument("--backend", choices=("ray", "local"), default="ray")
    parser.add_argument("--torch-threads", type=int, default=None)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--reuse", action="store_true",
                        help="reuse finished runs recorded in the ledger, or else under --out")
    parser.add_argument("--ledger", type=Path, default=LEDGER,
                        help="where finished runs' figures are kept (committed: a fresh checkout recomposes tables)")
    parser.add_argument("--out", type=Path, default=Path("results/benchmarks/gcfl"))
    parser.add_argument("--results-file", type=Path, default=None)
    parser.add_argument("--section-suffix", default="")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    args.rounds = args.rounds or (200 if args.part == "reproduce" else 100)
    (reproduce if args.part == "reproduce" else speed)(args)


if __name__ == "__main__":
    main()
