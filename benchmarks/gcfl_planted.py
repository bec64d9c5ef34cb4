"""Clustered FL where its premise holds: two planted groups of clients with different label rules.

``synthetic-graphs-planted`` (6 clients, 48 generated graphs each; group a labels a graph by its
density class, group b by the next class) with every GIN layer shared (``share: all``), so one
model cannot fit both rules. Self-training (``local``), FedAvg, GCFL and GCFL+ (``warmup_rounds``
10; their default split criteria, relative on this dataset, and absolute ``eps1`` = ``eps2`` = 0.1
hand-picked on seed 0), in-process, per data/training seed: the average over clients of each client's test accuracy (mean of the last 10 rounds), the
rounds at which the clustered methods split and their final clusters, and whether every final
cluster lies within one planted group.

    python benchmarks/gcfl_planted.py [--rounds 100] [--seeds 3] [--record]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fgl_ray.config import load_config  # noqa: E402
from fgl_ray.data import build_federated_data  # noqa: E402
from fgl_ray.runtime import run_experiment  # noqa: E402

GROUPS = ({0, 1, 2}, {3, 4, 5})
#: method -> (algorithm, its options): the clustered methods with their default (relative) split
#: criteria, and with absolute eps hand-picked on seed 0
METHODS = {
    "local": ("local", {}), "fedavg": ("fedavg", {}),
    "gcfl": ("gcfl", {"warmup_rounds": 10}), "gcfl_plus": ("gcfl_plus", {"warmup_rounds": 10}),
    "gcfl eps": ("gcfl", {"warmup_rounds": 10, "eps1": 0.1, "eps2": 0.1}),
    "gcfl_plus eps": ("gcfl_plus", {"warmup_rounds": 10, "eps1": 0.1, "eps2": 0.1}),
}


def planted_config(rounds: int, seed: int, output_dir: Path, method: str):
    algorithm, options = METHODS[method]
    return load_config(dict(dataset="synthetic-graphs-planted", model_options={"share": "all"}, backend="local",
                            torch_threads=1, rounds=rounds, last_k=10, seed=seed, data_seed=seed,
                            output_dir=output_dir, run_name=f"{method.replace(' ', '-')}-s{seed}",
                            algorithm=algorithm, algorithm_options=options))


def within_groups(clusters: list[list[int]]) -> bool:
    """Whether every cluster lies inside one planted group."""
    return all(any(set(cluster) <= group for group in GROUPS) for cluster in clusters)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--record", action="store_true", help="write the table into benchmarks/RESULTS.md")
    args = parser.parse_args()
    lines, scores = [], {m: [] for m in METHODS}
    with tempfile.TemporaryDirectory() as folder:
        for seed in range(args.seeds):
            data = build_federated_data(planted_config(args.rounds, seed, Path(folder), "local"))
            for method in METHODS:
                result = run_experiment(planted_config(args.rounds, seed, Path(folder), method), data, progress=False)
                score = result.summary["avg_over_clients"]["accuracy"]["mean"]
                scores[method].append(score)
                line = f"seed {seed} {method:>13}: {100 * score:5.1f}"
                if "clustering" in result.summary:
                    changes = json.loads((result.run_dir / "clusters.json").read_text())
                    final = list(changes[-1]["clusters"].values())
                    line += (f"  splits at {result.summary['clustering']['split_rounds']}, final clusters {final}, "
                             f"each within one group: {within_groups(final)}")
                lines.append(line)
                print(line, flush=True)
    means = "  ".join(f"{m} {100 * sum(v) / len(v):.1f}" for m, v in scores.items())
    lines.append(f"mean over {args.seeds} seeds: {means}")
    print(lines[-1])
    if args.record:
        from fedia_common import record_output

        record_output("gcfl-planted", lines)


if __name__ == "__main__":
    main()
