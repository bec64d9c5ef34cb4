"""Shared driver of the FedIA reproductions: base method vs base + FedIA, per-domain tables.

Each run is a whole federation on the Ray backend with the paper's preset (PMLP-GCN, SGD
lr 0.05, momentum 0.9, weight decay 1e-5, 5 local iterations) and the update diagnostics on.
The table cells are test accuracy, mean ± std over the last 20 rounds, in percent; AVG is the
unweighted mean over domains, as in the paper. The tables replace a marked section of
``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path
from typing import Mapping, Sequence

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


def run_setting(preset: str, pairs: Mapping[str, tuple[float, float]], rounds: int, out: Path) -> list[tuple]:
    """Runs every base method with the mean aggregator and with FedIA at its (rho, beta)."""
    rows = []
    data = build_federated_data(load_config({"preset": preset}))
    for algorithm, (rho, beta) in pairs.items():
        for label, aggregator, options in ((BASES[algorithm], "mean", {}),
                                           (f"{BASES[algorithm]} + FedIA (ρ={rho}, β={beta})", "fedia", {"rho": rho, "beta": beta})):
            config = load_config({"preset": preset, "algorithm": algorithm, "aggregator": aggregator,
                                  "aggregator_options": options, "rounds": rounds, "diagnostics": True,
                                  "output_dir": out, "run_name": f"{preset}-{algorithm}-{aggregator}"})
            started = time.perf_counter()
            result = run_experiment(config, data, progress=False)
            minutes = (time.perf_counter() - started) / 60
            print(f"{preset} {label}: AVG {cell(result.summary['avg_over_domains'].get('accuracy'))} "
                  f"({minutes:.1f} min) -> {result.run_dir}", flush=True)
            rows.append((label, result.summary, data.domains))
    return rows


def markdown_table(preset: str, rows: Sequence[tuple], paper: Mapping[str, Sequence[str]], order: Sequence[str]) -> str:
    header = f"| {preset} | " + " | ".join(order) + " | AVG |\n|---|" + "---|" * (len(order) + 1) + "\n"
    lines = []
    for label, summary, _ in rows:
        domains = summary["domains"]
        cells = [cell(domains.get(d, {}).get("accuracy")) for d in order]
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {cell(summary['avg_over_domains'].get('accuracy'))} |")
        paper_row = paper.get(label.split(" (")[0])
        if paper_row:
            lines.append(f"| *paper: {label.split(' (')[0]}* | " + " | ".join(paper_row) + " |")
    return header + "\n".join(lines) + "\n"


def replace_section(name: str, body: str) -> None:
    """Writes ``body`` between ``<!-- name:begin -->`` and ``<!-- name:end -->`` in RESULTS.md."""
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    block = f"{begin}\n{body}{end}"
    if begin in text:
        text = re.sub(re.escape(begin) + r".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    RESULTS.write_text(text)


def main(section: str, settings: Mapping[str, Mapping[str, tuple[float, float]]], order: Sequence[str],
         paper: Mapping[str, Mapping[str, Sequence[str]]], command: str) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path("results/benchmarks/fedia"))
    args = parser.parse_args()
    tables = []
    with ray_session():
        for preset, pairs in settings.items():
            rows = run_setting(preset, pairs, args.rounds, args.out)
            tables.append(markdown_table(preset, rows, paper.get(preset, {}), order))
    body = (f"Command: `{command}` ({args.rounds} rounds; test accuracy %, mean±std over the last 20 rounds; "
            f"run folders under `{args.out}`)\n\n" + "\n".join(tables))
    replace_section(section, body)
    print(body)
