"""The FedIA rho/beta sensitivity grid (5 x 5, FedAvg + FedIA, PMLP-GCN) on Twitch S1 with Ray Tune.

    FGL_DATA_DIR=../shared/datasets python benchmarks/tune_grid.py              # 25 trials + baseline, 50 rounds
    FGL_DATA_DIR=../shared/datasets python benchmarks/tune_grid.py --rounds 2 --subset 2   # quick check
    ... --resume                                                                 # continue an interrupted grid

Reads ``tune_configs/fedia_rho_beta.yaml`` with its ``preset`` axis fixed to twitch-S1. Prints the
total wall time, how many trials ran at once and how much of the trials' summed time the
concurrency recovered (summed trial time / wall time, a ratio of this run), the heatmap path and
the best cells. ``--record`` writes the same into a section of ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fgl_ray.tune.grid import build_grid  # noqa: E402
from fgl_ray.tune.report import format_trials  # noqa: E402
from fgl_ray.tune.runner import run_grid  # noqa: E402

GRID_FILE = REPO / "tune_configs" / "fedia_rho_beta.yaml"
PRESET = "twitch-S1"


def s1_document() -> dict:
    """The shipped grid with the preset axis replaced by twitch-S1 in the base."""
    document = yaml.safe_load(GRID_FILE.read_text())
    document["axes"].pop("preset")
    document["base"] = document["base"] | {"preset": PRESET}
    document["name"] = f"{document['name']}-{PRESET}"
    return document


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--subset", type=int, default=None, help="keep the first N values of rho and of beta")
    parser.add_argument("--out", type=Path, default=None, help="grid folder (default results/benchmarks/tune-...)")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--record", action="store_true", help="write the result into benchmarks/RESULTS.md")
    parser.add_argument("--verbose", type=int, default=1)
    args = parser.parse_args()

    tag = f"r{args.rounds}" + (f"-sub{args.subset}" if args.subset else "")
    out = args.out or REPO / "results" / "benchmarks" / f"tune-fedia-{PRESET}-{tag}"
    grid = build_grid(s1_document(), set_values={"rounds": args.rounds}, limit=args.subset, output_dir=out,
                      source=GRID_FILE)
    print(f"{grid.name}: {len(grid.trials)} trials + {len(grid.baselines)} baseline, {args.rounds} rounds -> {out}",
          flush=True)
    outcome = run_grid(grid, resume=args.resume, verbose=args.verbose)
    trials = pd.read_parquet(outcome.trials_table)
    ran = trials[trials["trial_id"].isin(outcome.executed)]
    summed = float(ran["wall_s"].sum())
    span = float(ran["ended_at"].max() - ran["started_at"].min()) if len(ran) else 0.0
    lines = [
        f"total wall time: {outcome.wall_s:.1f} s (data, Ray start, {len(outcome.executed)} trials run in this "
        f"invocation, tables, heatmap); first trial start to last trial end: {span:.1f} s",
        f"trials run concurrently: at most {outcome.max_concurrent} at once ({outcome.cpus_per_trial:g} CPU per "
        f"trial); summed trial time / trial span = {summed / span:.2f}" if span > 0 else "",
        f"median trial: {ran['wall_s'].median():.1f} s, of which {ran['first_round_s'].median():.1f} s until the "
        "first round ended (actor start-up + round 0)" if len(ran) else "no trial ran in this invocation",
        *(f"heatmap: {path}" for path in outcome.heatmaps),
        *(f"note: {note}" for note in outcome.notes),
    ]
    table = format_trials(trials, limit=5)
    print("\n".join(line for line in lines if line))
    print(table)
    if outcome.errored:
        print(f"failed trials: {', '.join(outcome.errored)} (rerun with --resume)", file=sys.stderr)
    if args.record:
        from fedia_common import replace_section

        command = "FGL_DATA_DIR=../shared/datasets python benchmarks/tune_grid.py" + (
            f" --rounds {args.rounds}" if args.rounds != 50 else "") + (f" --subset {args.subset}" if args.subset else "")
        body = f"Command: `{command}`\n\n```\n" + "\n".join(line for line in lines if line) + "\n" + table + "\n```\n"
        replace_section("tune_grid", body)


if __name__ == "__main__":
    main()
