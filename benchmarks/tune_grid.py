"""FedIA rho/beta grids with Ray Tune: trial start-up with reuse, and the grid's wall time.

    python benchmarks/tune_grid.py                                               # small: 2 x 2 + baseline, embedded data
    FGL_DATA_DIR=../shared/datasets python benchmarks/tune_grid.py --workload twitch-s1   # the 5 x 5 grid on Twitch S1
    FGL_DATA_DIR=../shared/datasets python benchmarks/tune_grid.py --workload twitch-s1 --rounds 2 --subset 2
    ... --resume                                                                 # continue an interrupted grid

``small`` is the issue-29 measurement: FedAvg + FedIA, rho and beta in {0.3, 0.7}, plus the FedAvg
baseline, on the default job's embedded synthetic data. ``twitch-s1`` reads
``tune_configs/fedia_rho_beta.yaml`` with its ``preset`` axis fixed to twitch-S1 (PMLP-GCN, the
paper's Figure 11). Prints the total wall time, how many trials ran at once, each trial's start-up
(launch to the start of round 0: first wave vs trials on a trial actor Tune reused, with its
warm workers, through ``reuse_actors``), and the grid's wall time against its ideal: the summed round time of its trials
divided by the trials that ran at once. ``--record`` writes the same into ``benchmarks/RESULTS.md``.
Targets (issue 29): start-up after the first wave under 2 s; wall time within 1.5x of the ideal.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fgl_ray.tune.grid import build_grid  # noqa: E402
from fgl_ray.tune.report import format_trials  # noqa: E402
from fgl_ray.tune.runner import run_grid  # noqa: E402
from fgl_ray.tune.tables import RUNS_DIRNAME, TRIAL_RECORD  # noqa: E402

GRID_FILE = REPO / "tune_configs" / "fedia_rho_beta.yaml"
PRESET = "twitch-S1"
DEFAULT_ROUNDS = {"small": 20, "twitch-s1": 50}
STARTUP_TARGET_S = 2.0
WALL_TARGET = 1.5


def small_document() -> dict:
    """2 x 2 FedIA grid plus the FedAvg baseline on the default job's embedded data."""
    return {"name": "fedia-small", "base": {"algorithm": "fedavg", "aggregator": "fedia"},
            "axes": {"aggregator_options.rho": [0.3, 0.7], "aggregator_options.beta": [0.3, 0.7]},
            "heatmap": {"x": "aggregator_options.rho", "y": "aggregator_options.beta"},
            "baseline": {"aggregator": "mean"}, "metric": {"name": "accuracy", "domain": "avg_over_domains"}}


def s1_document() -> dict:
    """The shipped grid with the preset axis replaced by twitch-S1 in the base."""
    document = yaml.safe_load(GRID_FILE.read_text())
    document["axes"].pop("preset")
    document["base"] = document["base"] | {"preset": PRESET}
    document["name"] = f"{document['name']}-{PRESET}"
    return document


def trial_timings(folder: Path, executed: list[str]) -> pd.DataFrame:
    """Per executed trial: start-up (launch to the start of round 0), round time, worker reuse."""
    rows = []
    for point_id in executed:
        record = json.loads((folder / RUNS_DIRNAME / point_id / TRIAL_RECORD).read_text())
        phases = (record.get("startup") or {}).get("phases", {})
        startup = sum(phases.values()) - phases.get("round_0", 0.0)
        wall = record["ended_at"] - record["started_at"]
        rows.append({"trial": point_id, "reused": bool(record.get("reused_actor")), "startup_s": startup,
                     "rounds_s": wall - startup, "started_at": record["started_at"], "ended_at": record["ended_at"]})
    return pd.DataFrame(rows).sort_values("started_at")


def timing_lines(timings: pd.DataFrame, concurrent: int) -> list[str]:
    """Start-up of the first wave vs reused trials, and wall time against the ideal; with verdicts."""
    first, reused = timings[~timings["reused"]], timings[timings["reused"]]
    span = float(timings["ended_at"].max() - timings["started_at"].min())
    ideal = float(timings["rounds_s"].sum()) / max(concurrent, 1)
    lines = [f"trial start-up, first wave ({len(first)} trials, new trial actors): "
             f"median {first['startup_s'].median():.2f} s" if len(first) else "no trial started a new trial actor"]
    if len(reused):
        worst = float(reused["startup_s"].max())
        verdict = "met" if worst < STARTUP_TARGET_S else "MISSED"
        lines.append(f"trial start-up on reused trial actors ({len(reused)} trials): median "
                     f"{reused['startup_s'].median():.2f} s, max {worst:.2f} s (target < {STARTUP_TARGET_S:g} s: "
                     f"{verdict})")
    else:
        lines.append("no trial reused a trial actor (every trial ran in the first wave): the reuse target is not measured")
    ratio = span / ideal if ideal > 0 else float("nan")
    verdict = "met" if ratio <= WALL_TARGET else "MISSED"
    lines.append(f"trials' wall time (first start to last end) {span:.1f} s vs ideal {ideal:.1f} s (summed round "
                 f"time {timings['rounds_s'].sum():.1f} s / {concurrent} at once): {ratio:.2f}x (target <= "
                 f"{WALL_TARGET:g}x: {verdict})")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=sorted(DEFAULT_ROUNDS), default="small")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per trial (small: 20, twitch-s1: 50)")
    parser.add_argument("--subset", type=int, default=None, help="keep the first N values of rho and of beta")
    parser.add_argument("--out", type=Path, default=None, help="grid folder (default results/benchmarks/tune-...)")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--record", action="store_true", help="write the result into benchmarks/RESULTS.md")
    parser.add_argument("--verbose", type=int, default=1)
    args = parser.parse_args()

    rounds = args.rounds or DEFAULT_ROUNDS[args.workload]
    document, source = (small_document(), None) if args.workload == "small" else (s1_document(), GRID_FILE)
    tag = f"{args.workload}-r{rounds}" + (f"-sub{args.subset}" if args.subset else "")
    out = args.out or REPO / "results" / "benchmarks" / f"tune-fedia-{tag}"
    if args.out is None and not args.resume and out.exists():
        shutil.rmtree(out)   # this script's own earlier measurement
    grid = build_grid(document, set_values={"rounds": rounds}, limit=args.subset, output_dir=out, source=source)
    print(f"{grid.name}: {len(grid.trials)} trials + {len(grid.baselines)} baseline, {rounds} rounds -> {out}",
          flush=True)
    outcome = run_grid(grid, resume=args.resume, verbose=args.verbose)
    trials = pd.read_parquet(outcome.trials_table)
    lines = [f"total wall time: {outcome.wall_s:.1f} s (data, Ray start, {len(outcome.executed)} trials run in this "
             f"invocation, tables, heatmap); at most {outcome.max_concurrent} trials at once "
             f"({outcome.cpus_per_trial:g} CPU per trial)"]
    if outcome.executed:
        lines += timing_lines(trial_timings(outcome.folder, outcome.executed), outcome.max_concurrent)
    else:
        lines.append("no trial ran in this invocation")
    lines += [*(f"heatmap: {path}" for path in outcome.heatmaps), *(f"note: {note}" for note in outcome.notes)]
    table = format_trials(trials, limit=5)
    print("\n".join(lines))
    print(table)
    if outcome.errored:
        print(f"failed trials: {', '.join(outcome.errored)} (rerun with --resume)", file=sys.stderr)
    if args.record:
        from fedia_common import record_output

        record_output("tune_grid" if args.workload == "twitch-s1" else "tune_grid_small", [*lines, table],
                      env="" if args.workload == "small" else "FGL_DATA_DIR=../shared/datasets ")


if __name__ == "__main__":
    main()
