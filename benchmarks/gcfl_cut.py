"""GCFL's min-cut weights on planted federations: how often each reading recovers the two groups.

Ten clients in two planted groups of five send weight changes ``dW_i = s * v_g + noise`` in P
dimensions, with the groups' directions opposed (``v_B = -v_A``, the case GCFL's split criteria
look for: the cluster's mean change is small while its clients still move) and unit-norm noise
per client; the signal ``s`` sets how similar a group's changes are (within-group cosine about
``s^2 / (s^2 + 1)``). For each signal level and each ``cut_weights`` reading (``shift``:
cosine minus its smallest off-diagonal value, fgl-ray's default; ``plus_one``: cosine + 1, the
authors' code) it counts the trials whose Stoer–Wagner cut is exactly the planted pair of groups,
and the trials that cut off a single client.

    python benchmarks/gcfl_cut.py [--trials 200] [--dims 10000] [--record]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fgl_ray.algorithms.gcfl import min_cut_bipartition, similarity_weights  # noqa: E402

GROUPS = ([0, 1, 2, 3, 4], [5, 6, 7, 8, 9])
SIGNALS = (0.2, 0.35, 0.5, 1.0, 2.0)
READINGS = ("shift", "plus_one")


def planted_changes(signal: float, dims: int, generator: torch.Generator) -> torch.Tensor:
    """``[10, dims]`` weight changes: the groups' opposed directions times ``signal``, plus unit noise."""
    direction = torch.randn(dims, generator=generator, dtype=torch.float64)
    direction /= direction.norm()
    signs = torch.tensor([1.0] * len(GROUPS[0]) + [-1.0] * len(GROUPS[1]), dtype=torch.float64)
    noise = torch.randn(len(signs), dims, generator=generator, dtype=torch.float64) / dims ** 0.5
    return signal * signs[:, None] * direction + noise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--dims", type=int, default=10_000)
    parser.add_argument("--record", action="store_true", help="write the table into benchmarks/RESULTS.md")
    args = parser.parse_args()
    members = list(range(10))
    lines = [f"{args.trials} trials per row, 10 clients in two planted groups of 5, {args.dims} dimensions",
             f"{'signal':>6} {'cosine in group':>15} " + " ".join(f"{r + ' recovered':>17} {r + ' single':>15}"
                                                              for r in READINGS)]
    for signal in SIGNALS:
        generator = torch.Generator().manual_seed(0)
        recovered = dict.fromkeys(READINGS, 0)
        single = dict.fromkeys(READINGS, 0)
        cosines = []
        for _ in range(args.trials):
            changes = planted_changes(signal, args.dims, generator)
            unit = torch.nn.functional.normalize(changes, dim=1)
            cosines.append(float((unit[:5] @ unit[:5].T)[~torch.eye(5, dtype=torch.bool)].mean()))
            for reading in READINGS:
                halves = min_cut_bipartition(similarity_weights(changes, reading), members)
                recovered[reading] += sorted(halves) == sorted(map(list, GROUPS))
                single[reading] += min(len(h) for h in halves) == 1
        lines.append(f"{signal:>6g} {np.mean(cosines):>15.2f} " + " ".join(
            f"{recovered[r]:>17d} {single[r]:>15d}" for r in READINGS))
    print("\n".join(lines))
    if args.record:
        from fedia_common import record_output

        record_output("gcfl-cut-weights", lines)


if __name__ == "__main__":
    main()
