"""Where FedAvg + FedIA's Twitch S1 accuracy goes between round 50 and round 200, and whether the
local-training protocol (fresh or kept optimizer state) is the cause.

    FGL_DATA_DIR=../shared/datasets python benchmarks/fedia_erosion.py [--features raw]

Reads (or, when missing, runs) FedAvg with the mean aggregator and with FedIA (rho = beta = 0.1)
on Twitch S1, seed 0, with ``optimizer_state`` ``keep`` (the previous protocol) and ``reset``,
the run folders being those of ``fedia_twitch.py`` (same names under ``--out``). For each run and
checkpoint round: the domain-averaged test accuracy and balanced accuracy, the share of test
nodes predicted as class 1 (mean over domains, from the per-round confusion matrices the
benchmark keeps) against the true share, and the largest client weight of the aggregation with
that client's domain; then the last-20 and best-validation AVG. Writes the ``fedia-erosion``
section of ``benchmarks/RESULTS.md`` and a figure.
"""

from __future__ import annotations

import argparse
import functools
import json
import shlex
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fedia_common import replace_section, run_one  # noqa: E402

from fgl_ray.config import load_config  # noqa: E402
from fgl_ray.data import build_federated_data  # noqa: E402
from fgl_ray.results import read_metrics  # noqa: E402
from fgl_ray.results.summary import TEST_SPLIT, round_tables, server_rows  # noqa: E402

CHECKPOINTS = (10, 25, 50, 100, 150, 199)
RUNS = {"FedAvg": ("mean", {}), "FedAvg + FedIA (0.1, 0.1)": ("fedia", {"rho": 0.1, "beta": 0.1})}
PRESET = "twitch-S1"


def run_folder(args, state: str, aggregator: str) -> Path:
    return args.out / f"{PRESET}-{args.features}-{state}-fedavg-{aggregator}-s0"


def ensure_runs(args) -> None:
    """Runs the missing federations with ``fedia_twitch.py``'s naming and settings."""
    data = functools.cache(lambda: build_federated_data(load_config({"preset": PRESET, "features": args.features})))
    for state in ("keep", "reset"):
        for aggregator, options in RUNS.values():
            if (run_folder(args, state, aggregator) / "test_confusions.npz").is_file():
                continue
            run_args = argparse.Namespace(features=args.features, optimizer_state=state, lr=None, rounds=200,
                                          backend="local", torch_threads=args.torch_threads, out=args.out, reuse=True,
                                          ledger=None)     # the curves read the run folders
            run_one(PRESET, "fedavg", aggregator, options, 0, data, run_args)


def curves(folder: Path) -> pd.DataFrame:
    """Per round: AVG accuracy and bAcc, predicted and true class-1 share, largest client weight."""
    metrics = read_metrics(folder)
    tests = round_tables(server_rows(metrics), TEST_SPLIT)
    frame = pd.DataFrame({"acc": tests["accuracy"]["avg_over_domains"],
                          "bacc": tests["balanced_accuracy"]["avg_over_domains"]})
    saved = np.load(folder / "test_confusions.npz")
    confusions = saved["confusions"].astype(float)                            # [rounds, domains, 2, 2]
    predicted = confusions[:, :, :, 1].sum(axis=2) / confusions.sum(axis=(2, 3))
    true = confusions[:, :, 1, :].sum(axis=2) / confusions.sum(axis=(2, 3))
    frame.loc[saved["rounds"], "pred1"] = predicted.mean(axis=1)
    frame.loc[saved["rounds"], "true1"] = true.mean(axis=1)
    weights = metrics[(metrics.split == "aggregation") & (metrics.metric == "client_weight")]
    top = weights.loc[weights.groupby("round").value.idxmax()].set_index("round")
    frame["max_weight"], frame["max_weight_domain"] = top.value, top.domain
    return frame


def section(args, summaries: dict, frames: dict) -> str:
    lines = ["| run | " + " | ".join(f"r{r}" for r in CHECKPOINTS) + " | last-20 AVG | best-val AVG (round) |",
             "|---|" + "---|" * (len(CHECKPOINTS) + 2)]
    for label, frame in frames.items():
        cells = [f"{100 * frame.acc[r]:.1f} / {100 * frame.bacc[r]:.1f} / {100 * frame.pred1[r]:.0f}% / "
                 f"{frame.max_weight[r]:.2f} {frame.max_weight_domain[r]}" for r in CHECKPOINTS]
        summary = summaries[label]
        best = summary["best_validation"]
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {100 * summary['avg_over_domains']['accuracy']['mean']:.2f}"
                     f" | {100 * best['avg_over_domains']['accuracy']:.2f} ({best['round']}) |")
    true = next(iter(frames.values())).true1.dropna().iloc[0]
    command = shlex.join(["python", "benchmarks/fedia_erosion.py", *sys.argv[1:]])
    return (f"Command: `FGL_DATA_DIR=../shared/datasets {command}` (Twitch S1, features `{args.features}`, seed 0, "
            f"200 rounds). Each cell: AVG test accuracy / AVG balanced accuracy / share of test nodes predicted as "
            f"class 1 (mean over domains; the true share is {100 * true:.0f}%) / largest client weight and its "
            f"domain. Figure: `{args.figure}`.\n\n" + "\n".join(lines) + "\n")


def figure(frames: dict, path: Path) -> Path:
    fig = Figure(figsize=(12, 3.6), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 3)
    for label, frame in frames.items():
        axes[0].plot(frame.index, 100 * frame.acc, label=label)
        axes[1].plot(frame.index, 100 * frame.pred1, label=label)
        axes[2].plot(frame.index, frame.max_weight, label=label)
    axes[1].axhline(100 * next(iter(frames.values())).true1.dropna().iloc[0], color="gray", linestyle="--",
                    label="true class-1 share")
    for ax, title in zip(axes, ("AVG test accuracy %", "predicted class 1 % (mean over domains)",
                                "largest client weight")):
        ax.set_title(title)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="x-small")
    axes[1].legend(fontsize="x-small")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--features", choices=("raw", "svd"), default="raw")
    parser.add_argument("--out", type=Path, default=Path("results/benchmarks/fedia"))
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--figure", type=Path, default=None)
    parser.add_argument("--results-file", type=Path, default=None)
    args = parser.parse_args()
    args.figure = args.figure or args.out / f"fedia_erosion_s1_{args.features}.png"
    ensure_runs(args)
    frames, summaries = {}, {}
    for state in ("keep", "reset"):
        for label, (aggregator, _) in RUNS.items():
            folder = run_folder(args, state, aggregator)
            name = f"{label}, optimizer {state}"
            frames[name] = curves(folder)
            summaries[name] = json.loads((folder / "summary.json").read_text())
    figure(frames, args.figure)
    body = section(args, summaries, frames)
    replace_section(f"fedia-erosion-{args.features}", body, args.results_file)
    print(body)


if __name__ == "__main__":
    main()
