"""Shared driver of the FedIA reproductions: base method vs base + FedIA, per-domain tables.

Each run is a whole federation (Ray backend by default, ``--backend local`` in-process) with
the paper's preset (PMLP-GCN, SGD lr 0.05, momentum 0.9, weight decay 1e-5, 5 local
iterations) and the update diagnostics on. The table cells are test scores in percent: with
one seed, mean ± std over the last 20 rounds; with ``--seeds N``, mean ± std over the seeds of
each run's last-20-round mean. AVG is the unweighted mean over domains, as in the paper; the
AVG balanced accuracy and macro-F1 are averaged the same way; "best-val AVG" is the AVG test
accuracy at the round of highest pooled validation accuracy. Below each table: the label-only
references of the same test set (each class predicted everywhere; each domain's majority
class). Every run also keeps its per-round, per-domain test confusion matrices
(``test_confusions.npz``) for the prediction analyses. The tables replace a marked section of
``benchmarks/RESULTS.md``; ``<out>/<section>.json`` keeps the per-seed figures.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import re
import shlex
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np
import yaml

from fgl_ray.algorithms import ALGORITHMS
from fgl_ray.config import ExperimentConfig, load_config
from fgl_ray.data import build_federated_data
from fgl_ray.runtime import run_experiment
from fgl_ray.runtime.checkpoint import CHECKPOINT_FILE
from fgl_ray.runtime.ray_backend import ray_session

RESULTS = Path(__file__).with_name("RESULTS.md")
RUNTIME_FIELDS = {"backend", "torch_threads", "output_dir", "run_name", "overwrite", "clients_per_actor",
                  "gpus_per_client", "round_timeout_s", "data_dir", "checkpoint_every"}
#: FedSPA whose ACM-GCN divides its edge-typed sums by the degree (the authors' sums diverge on Twitch).
FEDSPA_NORMALISED = "fedspa:typed_aggregation=normalised"
BASES = {"fedavg": "FedAvg", "fedprox": "FedProx", "moon": "MOON", "feddyn": "FedDyn", "fedproto": "FedProto",
         "fgssl": "FGSSL", "fggp": "FGGP", "fedspa": "FedSPA", "fedavg@sage": "GraphSAGE FedAvg",
         "fedsage_plus": "FedSage", FEDSPA_NORMALISED: "FedSPA (typed sums normalised)"}
#: The paper's name of a base method's FedIA row where it is not "<base> + FedIA": FedSPA's replaces
#: its native rule ("FedIA (repl.)"; the paper's "FedSPA + FedIA", FedIA on top of that rule, is not built).
FEDIA_ROWS = {"fedspa": "FedIA (repl.)", FEDSPA_NORMALISED: "FedIA (repl., typed sums normalised)"}
AVG_METRICS = (("AVG bAcc", "balanced_accuracy"), ("AVG F1", "macro_f1"))


def cell(stats: Mapping[str, float] | None) -> str:
    if not stats or stats.get("mean") is None:
        return "n/a"
    return f"{100 * stats['mean']:.2f}±{100 * stats['std']:.2f}"


def percent_over_seeds(values: Sequence[float | None]) -> str:
    """mean±std in %, over the seeds that ran (their count when some did not); — when none did."""
    done = [v for v in values if v is not None]
    if not done:
        return "—"
    count = f" ({len(done)})" if len(done) < len(values) else ""
    return f"{100 * np.mean(done):.2f}±{100 * np.std(done):.2f}{count}"


def over_seeds(values: Sequence[Mapping | float | None]) -> Mapping[str, float] | None:
    """One run: its last-20 ``{mean, std}``. Several: mean ± std over seeds of each run's mean (or value)."""
    if not values or any(v is None for v in values):
        return None
    if len(values) == 1:
        return values[0] if isinstance(values[0], Mapping) else {"mean": values[0], "std": 0.0}
    means = np.array([v["mean"] if isinstance(v, Mapping) else v for v in values])
    return {"mean": float(means.mean()), "std": float(means.std())}


def domain_stats(summary: Mapping, domain: str | None, metric: str = "accuracy") -> Mapping | None:
    """A run's last-K stats of ``metric`` on ``domain`` (None: the average over domains)."""
    return (summary["avg_over_domains"] if domain is None else summary["domains"].get(domain, {})).get(metric)


def best_val_avg(summary: Mapping) -> float | None:
    best = summary.get("best_validation")
    return best["avg_over_domains"].get("accuracy") if best else None


DATA_MODEL_OPTIONS = {"modality_dims"}  # model options a run takes from its data (recorded, never asked for)


#: Rounds between the checkpoints of a benchmark run that sets none (``checkpoint_every`` only
#: says how the run goes, never what it computes).
CHECKPOINT_EVERY = 10


def complete_run(config: ExperimentConfig, data, resumable: bool = True, **options):
    """``run_experiment`` without a progress bar; a run that stopped early (a signal, or too little
    coverage) ends the benchmark, so that a grid neither tabulates it nor goes on to the next cell.

    A ``resumable`` run saves a checkpoint every :data:`CHECKPOINT_EVERY` rounds (unless its
    config sets another period), and a run folder holding a checkpoint of the same experiment is
    continued from it: a long reproduction killed with its session goes on where it stopped, with
    the rows an uninterrupted run would write. Timing runs pass ``resumable=False`` (a checkpoint
    write would count in their rounds)."""
    if resumable and config.checkpoint_every == 0:
        config = config.model_copy(update={"checkpoint_every": CHECKPOINT_EVERY})
    folder = Path(config.output_dir) / str(config.run_name)
    resume = (resumable and config.run_name is not None and (folder / CHECKPOINT_FILE).is_file()
              and recorded_config(folder, config) is not None)
    if resume:
        print(f"{config.run_name}: continuing {folder} from its checkpoint", flush=True)
    result = run_experiment(config, data, progress=False, resume=resume, **options)
    if not result.summary.get("coverage", {}).get("complete", True):
        sys.exit(f"{config.run_name}: the run did not complete (see {result.run_dir}); the benchmark stops here")
    return result


def as_json(value):
    """``value`` as it reads back from a JSON file (paths and enums as strings, tuples as lists)."""
    return json.loads(json.dumps(value, default=str))


def same_experiment(recorded: Mapping, config: ExperimentConfig) -> bool:
    """Whether a recorded config is the experiment ``config``: fields that only say where or how
    fast it runs aside, and fields added since it was recorded taken at their defaults."""
    for field, value in dict(config).items():
        if field in RUNTIME_FIELDS:
            continue
        before = recorded.get(field, ExperimentConfig.model_fields[field].get_default(call_default_factory=True))
        if as_json(before) != as_json(value):
            return False
    return True


def resolved_options(config: ExperimentConfig) -> dict:
    """The algorithm's, aggregator's and model's options as the run takes them, defaults filled in:
    kept beside a ledger's experiment, so that a later change of a default makes it another one."""
    from fgl_ray.aggregators import AGGREGATORS
    from fgl_ray.algorithms import ALGORITHMS
    from fgl_ray.algorithms.base import backbone_options
    from fgl_ray.models import MODELS
    from fgl_ray.models.base import model_options

    parameters = inspect.signature(MODELS.get(config.model)).parameters
    model = {name: parameters[name].default for name in model_options(config.model)
             if parameters[name].default is not inspect.Parameter.empty}
    return as_json({
        "algorithm": ALGORITHMS.get(config.algorithm).Options(**config.algorithm_options).model_dump(),
        "aggregator": AGGREGATORS.get(config.aggregator).Options(**config.aggregator_options).model_dump(),
        "model": {key: value for key, value in (model | backbone_options(config)).items()
                  if key not in DATA_MODEL_OPTIONS}})


def recorded_config(folder: Path, config: ExperimentConfig) -> dict | None:
    """The config recorded in the run folder ``folder`` when it is the experiment ``config``
    (``same_experiment``; model options a run takes from its data aside), else None."""
    if not (folder / "manifest.json").is_file():
        return None
    recorded = json.loads((folder / "manifest.json").read_text())["config"]
    recorded["model_options"] = {k: v for k, v in recorded.get("model_options", {}).items()
                                 if k not in DATA_MODEL_OPTIONS or k in config.model_options}
    return recorded if same_experiment(recorded, config) else None


def finished_summary(config: ExperimentConfig, *needed: str) -> dict | None:
    """The summary of a finished run of ``config`` in its run folder (which also holds the files
    ``needed``), when its manifest records the same experiment (``same_experiment``); None
    otherwise, and for a run that did not complete."""
    folder = Path(config.output_dir) / config.run_name
    if not all((folder / name).is_file() for name in ("summary.json", *needed)):
        return None
    if recorded_config(folder, config) is None:
        return None
    summary = json.loads((folder / "summary.json").read_text())
    if not summary.get("coverage", {}).get("complete", True):
        return None
    print(f"{config.run_name}: reused {folder}", flush=True)
    return summary


class RunLedger:
    """Finished benchmark runs, one JSON line each in a committed file: the experiment (its config
    without the fields that only say where or how fast it runs), the options it took with their
    defaults (:func:`resolved_options`; entries made before 2026-12-07 lack them and match on the
    experiment alone) and its figures (under ``field``: the pooled last-K metric means, or what a
    benchmark's tables read). Run folders are not kept in the repository; the ledger lets a fresh
    checkout recompose a table, or add seeds to it, without re-running. Benchmarks look here
    before a run folder, so a folder left by older code cannot replace a recorded run."""

    def __init__(self, path: Path, field: str = "means"):
        self.path, self.field = Path(path), field

    def lookup(self, config: ExperimentConfig) -> dict | None:
        """The figures last recorded for this experiment (``same_experiment``, and the same
        resolved options where the entry has them), or None."""
        if not self.path.is_file():
            return None
        found, resolved = None, resolved_options(config)
        for line in self.path.read_text().splitlines():
            entry = json.loads(line)
            if same_experiment(entry["experiment"], config) and entry.get("resolved", resolved) == resolved:
                found = entry[self.field]
        return found

    def record(self, config: ExperimentConfig, figures: Mapping) -> None:
        """Appends the run unless the ledger already holds these figures for it."""
        if self.lookup(config) == as_json(figures):
            return
        experiment = {field: value for field, value in as_json(dict(config)).items() if field not in RUNTIME_FIELDS}
        entry = {"experiment": experiment, "resolved": resolved_options(config), self.field: dict(figures)}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as ledger:
            ledger.write(json.dumps(entry, sort_keys=True) + "\n")


def save_confusions(run_dir: Path, domains: Sequence[str], domain_of: Mapping[int, str]):
    """An ``on_round`` callback collecting per-domain pooled test confusion matrices into
    ``test_confusions.npz``, saved after every round (a few KiB), so a resumed run starts from
    the saved rounds before its first one; ``write()`` saves them too."""
    path = Path(run_dir) / "test_confusions.npz"
    rounds, matrices = [], []

    def collect(result, _rows) -> None:
        if not result.evaluations:
            return
        if not rounds and path.is_file():
            with np.load(path) as saved:
                kept = saved["rounds"] < result.round
                rounds.extend(saved["rounds"][kept].tolist())
                matrices.extend(saved["confusions"][kept])
        per_domain = {d: 0 for d in domains}
        for evaluation in result.evaluations:
            per_domain[domain_of[evaluation.client_id]] += evaluation.stats["test"]["confusion"]
        rounds.append(result.round)
        matrices.append(np.stack([per_domain[d] for d in domains]))
        write()

    def write() -> None:
        np.savez_compressed(path, rounds=np.array(rounds), domains=np.array(domains), confusions=np.stack(matrices))

    collect.write = write
    return collect


def run_name(preset: str, algorithm: str, aggregator: str, seed: int, args) -> str:
    lr = "" if args.lr is None else f"-lr{args.lr:g}"
    return f"{preset}-{args.features}-{args.optimizer_state}{lr}-{algorithm}-{aggregator}-s{seed}"


def method_values(method: str) -> dict:
    """Config values of a base method ``algorithm[@model][:option=value]``: ``@model`` names the
    backbone (an algorithm built on another backbone than the preset's PMLP-GCN, FedSage+ or FedSPA,
    takes its own), ``:option=value`` sets one of the backbone's options (``value`` read as YAML)."""
    method, _, option = method.partition(":")
    algorithm, _, model = method.partition("@")
    model = model or ALGORITHMS.get(algorithm).backbone_for("pmlp_gcn")
    values = {"algorithm": algorithm} | ({"model": model} if model != "pmlp_gcn" else {})
    if option:
        key, _, value = option.partition("=")
        values["model_options"] = {key: yaml.safe_load(value)}
    return values


#: What the FedIA tables and ``fidelity.py`` read of a run's summary: all that its ledger keeps.
TABLE_FIELDS = ("domains", "avg_over_domains", "references")


def table_summary(summary: Mapping) -> dict:
    """The part of a run's summary the tables read (:data:`TABLE_FIELDS`, and the best-validation
    round's averages), small enough for the ledger."""
    kept = {field: summary[field] for field in TABLE_FIELDS if field in summary}
    if summary.get("best_validation"):
        kept["best_validation"] = {"avg_over_domains": summary["best_validation"]["avg_over_domains"]}
    return kept


def run_one(preset: str, method: str, aggregator: str, options: Mapping, seed: int, data: Callable, args) -> dict:
    """One federation on ``data()`` (called only when it runs); with ``--reuse``, the table part of an
    identical finished one from ``args.ledger`` (None: folders only, for scripts that read them), or
    else its summary under ``--out`` (then recorded in the ledger)."""
    name = run_name(preset, re.sub("[@:=]", "-", method), aggregator, seed, args)
    folder = args.out / name
    values = method_values(method) | {
              "preset": preset, "aggregator": aggregator, "aggregator_options": dict(options),
              "rounds": args.rounds, "diagnostics": True, "seed": seed, "backend": args.backend,
              "torch_threads": args.torch_threads, "output_dir": args.out, "run_name": name,
              "features": args.features, "optimizer_state": args.optimizer_state, "overwrite": True}
    if args.lr is not None:
        values["lr"] = args.lr
    config = load_config(values)
    ledger = getattr(args, "ledger", None) and RunLedger(args.ledger, field="summary")
    if args.reuse and ledger and (recorded := ledger.lookup(config)):
        return recorded
    if args.reuse and (summary := finished_summary(config, "test_confusions.npz")):
        if ledger:
            ledger.record(config, table_summary(summary))
        return summary
    federation = data()
    collector = save_confusions(folder, federation.domains, {g.client_id: g.domain for g in federation.clients})
    started = time.perf_counter()
    result = complete_run(config, federation, on_round=collector)
    collector.write()
    if ledger:
        ledger.record(config, table_summary(result.summary))
    print(f"{preset} {name}: AVG {cell(result.summary['avg_over_domains'].get('accuracy'))} "
          f"({(time.perf_counter() - started) / 60:.1f} min) -> {result.run_dir}", flush=True)
    return result.summary


def run_setting(preset: str, pairs: Mapping[str, tuple[float, float]], args) -> list[tuple]:
    """Runs every base method with the mean aggregator and with FedIA at its (rho, beta), per seed."""
    rows = []
    data = functools.cache(lambda: build_federated_data(load_config({"preset": preset, "features": args.features})))
    for algorithm, (rho, beta) in pairs.items():
        if args.algorithms and algorithm not in args.algorithms:
            continue
        fedia_row = FEDIA_ROWS.get(algorithm, f"{BASES[algorithm]} + FedIA")
        for label, aggregator, options in ((BASES[algorithm], "mean", {}),
                                           (f"{fedia_row} (ρ={rho}, β={beta})", "fedia", {"rho": rho, "beta": beta})):
            if aggregator not in args.aggregators:
                continue
            summaries = [run_one(preset, algorithm, aggregator, options, seed, data, args)
                         for seed in range(args.seeds)]
            rows.append((label, summaries))
    return rows


def reference_lines(references: Mapping, order: Sequence[str]) -> list[str]:
    """Table rows of the label-only references (no spread: they do not depend on the seed)."""
    def value(scores, metric="accuracy"):
        return "n/a" if scores is None else f"{100 * scores[metric]:.2f}"

    labelled = [(f"*constant class {c}*", refs) for c, refs in references["constant"].items()]
    labelled.append(("*majority class per domain*", references["majority"]))
    return [f"| {label} | " + " | ".join(value(refs["domains"].get(d)) for d in order)
            + f" | {value(refs['avg_over_domains'])} | "
            + " | ".join(value(refs["avg_over_domains"], m) for _, m in AVG_METRICS) + " | – |"
            for label, refs in labelled]


def markdown_table(preset: str, rows: Sequence[tuple], paper: Mapping[str, Sequence[str]], order: Sequence[str]) -> str:
    extra = [name for name, _ in AVG_METRICS] + ["best-val AVG"]
    header = (f"| {preset} | " + " | ".join(order) + " | AVG | " + " | ".join(extra) + " |\n|---|"
              + "---|" * (len(order) + 1 + len(extra)) + "\n")
    lines = []
    for label, summaries in rows:
        cells = [cell(over_seeds([domain_stats(s, d) for s in summaries])) for d in (*order, None)]
        cells += [cell(over_seeds([domain_stats(s, None, m) for s in summaries])) for _, m in AVG_METRICS]
        cells.append(cell(over_seeds([best_val_avg(s) for s in summaries])))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
        paper_row = paper.get(label.split(" (")[0])
        if paper_row:
            lines.append(f"| *paper: {label.split(' (')[0]}* | " + " | ".join(paper_row) + " |" + " |" * len(extra))
    references = rows[0][1][0].get("references") if rows else None
    if references:
        lines += reference_lines(references, order)
    return header + "\n".join(lines) + "\n"


def gains(rows: Sequence[tuple]) -> str:
    """Per-seed change of AVG accuracy, base -> base + FedIA."""
    lines = []
    for (base, base_runs), (label, fedia_runs) in zip(rows[::2], rows[1::2]):
        deltas = [100 * (domain_stats(f, None)["mean"] - domain_stats(b, None)["mean"])
                  for b, f in zip(base_runs, fedia_runs)]
        per_seed = ", ".join(f"{d:+.2f}" for d in deltas)
        lines.append(f"- {label.split(' (')[0]} − {base}: {np.mean(deltas):+.2f} AVG points (per seed: {per_seed})")
    return "\n".join(lines) + "\n"


def replace_section(name: str, body: str, results: Path | None = None) -> None:
    """Writes ``body`` between ``<!-- name:begin -->`` and ``<!-- name:end -->`` in ``results``
    (default: ``RESULTS``, i.e. ``benchmarks/RESULTS.md``)."""
    results = results or RESULTS
    text = results.read_text() if results.exists() else "# Benchmark results\n"
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    block = f"{begin}\n{body}{end}"
    if begin in text:
        text = re.sub(re.escape(begin) + r".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    results.write_text(text)


def record_output(name: str, lines: Sequence[str], env: str = "") -> None:
    """Writes a benchmark's printed ``lines`` as section ``name`` of ``RESULTS``, under the command
    that produced them: this script with this process's arguments but ``--record``, after ``env``."""
    arguments = [a for a in sys.argv[1:] if a != "--record"]
    command = env + shlex.join(["python", f"benchmarks/{Path(sys.argv[0]).name}", *arguments])
    replace_section(name, f"Command: `{command}`\n\n```\n" + "\n".join(lines) + "\n```\n")


def section_name(section: str, args) -> str:
    lr = "" if args.lr is None else f"-lr{args.lr:g}"
    return f"{section}-{args.optimizer_state}-{args.features}{lr}-seeds{args.seeds}"


def main(section: str, settings: Mapping[str, Mapping[str, tuple[float, float]]], order: Sequence[str],
         paper: Mapping[str, Mapping[str, Sequence[str]]], command: str) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=1, help="seeds 0..N-1")
    parser.add_argument("--algorithms", nargs="+", choices=sorted(BASES), default=None, help="default: all")
    parser.add_argument("--presets", nargs="+", choices=sorted(settings), default=None, help="default: all")
    parser.add_argument("--features", choices=("raw", "svd"), default="raw", help="the config's `features`")
    parser.add_argument("--optimizer-state", choices=("reset", "keep"), default="reset")
    parser.add_argument("--lr", type=float, default=None, help="override the preset's learning rate (0.05)")
    parser.add_argument("--backend", choices=("ray", "local"), default="ray")
    parser.add_argument("--torch-threads", type=int, default=None)
    parser.add_argument("--reuse", action="store_true",
                        help="reuse finished runs recorded in the ledger, or else under --out")
    parser.add_argument("--ledger", type=Path, default=Path(__file__).with_name("ledger") / f"{section}.jsonl",
                        help="where finished runs' table figures are kept (committed: a fresh checkout recomposes "
                             "the tables)")
    parser.add_argument("--aggregators", nargs="+", choices=("mean", "fedia"), default=["mean", "fedia"],
                        help="run only these rows (two processes can then share the pairs); with one, no table is "
                             "written: record it afterwards with both and --reuse")
    parser.add_argument("--out", type=Path, default=Path("results/benchmarks/fedia"))
    parser.add_argument("--results-file", type=Path, default=RESULTS, help="the Markdown file to write the section to")
    args = parser.parse_args()
    tables, record = [], {}
    partial = len(set(args.aggregators)) < 2     # half the pairs: a table would mispair its rows
    with ray_session() if args.backend == "ray" else nullcontext():
        for preset, pairs in settings.items():
            if args.presets and preset not in args.presets:
                continue
            rows = run_setting(preset, pairs, args)
            if partial:
                continue
            tables.append(markdown_table(preset, rows, paper.get(preset, {}), order) + "\n" + gains(rows))
            record[preset] = {label: summaries for label, summaries in rows}
    if partial:
        print(f"ran the {args.aggregators[0]} rows only; write the table with both aggregators and --reuse")
        return
    name = section_name(section, args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{name}.json").write_text(json.dumps(record, default=str))
    spread = ("mean±std over the last 20 rounds" if args.seeds == 1 else
              f"mean±std over seeds 0–{args.seeds - 1} of each run's last-20-round mean")
    flags = shlex.join(sys.argv[1:])
    body = (f"Command: `{command}{' ' + flags if flags else ''}` ({args.rounds} rounds; features `{args.features}`, "
            f"optimizer state `{args.optimizer_state}`, lr {args.lr or 'of the preset (0.05)'}, evaluation of the "
            f"global model; test %, {spread}; run folders under `{args.out}`)\n\n" + "\n".join(tables))
    replace_section(name, body, args.results_file)
    print(body)
