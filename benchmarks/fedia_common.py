"""Shared driver of the FedIA reproductions: base method vs base + FedIA, per-domain tables.

Each run is a whole federation (Ray backend by default, ``--backend local`` in-process) with
the paper's preset (PMLP-GCN, SGD lr 0.05, momentum 0.9, weight decay 1e-5, 5 local
iterations) and the update diagnostics on. The table cells are test accuracy in percent: with
one seed, mean ± std over the last 20 rounds; with ``--seeds N``, mean ± std over the seeds of
each run's last-20-round mean. AVG is the unweighted mean over domains, as in the paper. The
tables replace a marked section of ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from fgl_ray.config import load_config
from fgl_ray.data import build_federated_data
from fgl_ray.runtime import run_experiment
from fgl_ray.runtime.ray_backend import ray_session

RESULTS = Path(__file__).with_name("RESULTS.md")
BASES = {"fedavg": "FedAvg", "fedprox": "FedProx"}


def cell(stats: Mapping[str, float] | None) -> str:
    if not stats or stats.get("mean") is None:
        return "n/a"
    return f"{100 * stats['mean']:.2f}±{100 * stats['std']:.2f}"


def over_seeds(summaries: Sequence[Mapping], domain: str | None) -> Mapping[str, float] | None:
    """One run: its last-20 mean ± std. Several seeds: mean ± std over seeds of each run's last-20 mean."""
    values = [(s["avg_over_domains"] if domain is None else s["domains"].get(domain, {})).get("accuracy")
              for s in summaries]
    if any(v is None for v in values):
        return None
    if len(values) == 1:
        return values[0]
    means = np.array([v["mean"] for v in values])
    return {"mean": float(means.mean()), "std": float(means.std())}


def run_setting(preset: str, pairs: Mapping[str, tuple[float, float]], args) -> list[tuple]:
    """Runs every base method with the mean aggregator and with FedIA at its (rho, beta), per seed."""
    rows = []
    data = build_federated_data(load_config({"preset": preset}))
    for algorithm, (rho, beta) in pairs.items():
        if args.algorithms and algorithm not in args.algorithms:
            continue
        for label, aggregator, options in ((BASES[algorithm], "mean", {}),
                                           (f"{BASES[algorithm]} + FedIA (ρ={rho}, β={beta})", "fedia", {"rho": rho, "beta": beta})):
            summaries = []
            for seed in range(args.seeds):
                config = load_config({"preset": preset, "algorithm": algorithm, "aggregator": aggregator,
                                      "aggregator_options": options, "rounds": args.rounds, "diagnostics": True,
                                      "seed": seed, "backend": args.backend, "torch_threads": args.torch_threads,
                                      "output_dir": args.out, "run_name": f"{preset}-{algorithm}-{aggregator}-s{seed}"})
                started = time.perf_counter()
                result = run_experiment(config, data, progress=False)
                minutes = (time.perf_counter() - started) / 60
                print(f"{preset} {label} seed {seed}: AVG {cell(result.summary['avg_over_domains'].get('accuracy'))} "
                      f"({minutes:.1f} min) -> {result.run_dir}", flush=True)
                summaries.append(result.summary)
            rows.append((label, summaries))
    return rows


def markdown_table(preset: str, rows: Sequence[tuple], paper: Mapping[str, Sequence[str]], order: Sequence[str]) -> str:
    header = f"| {preset} | " + " | ".join(order) + " | AVG |\n|---|" + "---|" * (len(order) + 1) + "\n"
    lines = []
    for label, summaries in rows:
        cells = [cell(over_seeds(summaries, d)) for d in order]
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {cell(over_seeds(summaries, None))} |")
        paper_row = paper.get(label.split(" (")[0])
        if paper_row:
            lines.append(f"| *paper: {label.split(' (')[0]}* | " + " | ".join(paper_row) + " |")
    return header + "\n".join(lines) + "\n"


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


def main(section: str, settings: Mapping[str, Mapping[str, tuple[float, float]]], order: Sequence[str],
         paper: Mapping[str, Mapping[str, Sequence[str]]], command: str) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=1, help="seeds 0..N-1; N > 1 writes the section <name>-seedsN")
    parser.add_argument("--algorithms", nargs="+", choices=sorted(BASES), default=None, help="default: all")
    parser.add_argument("--presets", nargs="+", choices=sorted(settings), default=None, help="default: all")
    parser.add_argument("--backend", choices=("ray", "local"), default="ray")
    parser.add_argument("--torch-threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path("results/benchmarks/fedia"))
    parser.add_argument("--results-file", type=Path, default=RESULTS, help="the Markdown file to write the section to")
    args = parser.parse_args()
    tables = []
    with ray_session() if args.backend == "ray" else nullcontext():
        for preset, pairs in settings.items():
            if args.presets and preset not in args.presets:
                continue
            rows = run_setting(preset, pairs, args)
            tables.append(markdown_table(preset, rows, paper.get(preset, {}), order))
    spread = ("mean±std over the last 20 rounds" if args.seeds == 1 else
              f"mean±std over seeds 0–{args.seeds - 1} of each run's last-20-round mean")
    flags = shlex.join(sys.argv[1:])
    body = (f"Command: `{command}{' ' + flags if flags else ''}` ({args.rounds} rounds; test accuracy %, {spread}; "
            f"run folders under `{args.out}`)\n\n" + "\n".join(tables))
    replace_section(section if args.seeds == 1 else f"{section}-seeds{args.seeds}", body, args.results_file)
    print(body)
