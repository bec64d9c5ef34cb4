"""Aggregation speed: milliseconds per aggregation of 30 clients x 1M parameters, and the GB/s read.

Every registered aggregator runs on the same stacked float32 update matrix (a three-layer model's
layout, so FedIA ranks per layer), timed as the median of ``--repeats`` calls after one warm-up.
"GB/s" is the update matrix's size over that time: the rate at which the aggregator reads it.
The server's ``torch.stack`` of the 30 received vectors is timed apart. Targets: >= 2 GB/s for
``mean``, >= 1 GB/s for ``fedia``.

    python benchmarks/aggregation.py [--clients 30] [--params 1000000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from fgl_ray.aggregators import build_aggregator
from fgl_ray.aggregators.base import AGGREGATORS
from fgl_ray.params import ParamLayout

TARGETS_GB_S = {"mean": 2.0, "fedia": 1.0}


def layout_of(params: int) -> ParamLayout:
    """A three-layer model's layout with ``params`` coordinates: 70 %, 29 % and the rest, with biases."""
    hidden = 700
    first = (params * 7 // 10) // hidden
    second = (params * 29 // 100) // hidden
    last = params - hidden * first - hidden - hidden * second - second - 10
    return ParamLayout(("l1.weight", "l1.bias", "l2.weight", "l2.bias", "l3.weight", "l3.bias"),
                       ((hidden, first), (hidden,), (second, hidden), (second,), (10, last // 10), (last % 10 + 10,)))


def timed(call, repeats: int) -> float:
    """Median seconds of ``call`` over ``repeats`` runs after one warm-up."""
    call()
    seconds = []
    for _ in range(repeats):
        begun = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - begun)
    return statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=30)
    parser.add_argument("--params", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    layout = layout_of(args.params)
    generator = torch.Generator().manual_seed(0)
    rows = [torch.randn(layout.size, generator=generator) for _ in range(args.clients)]
    updates = torch.stack(rows)
    weights = torch.randn(layout.size, generator=generator)
    counts = torch.randint(10, 100, (args.clients,), generator=generator)
    client_ids = list(range(args.clients))
    gigabytes = updates.numel() * updates.element_size() / 1e9
    print(f"{args.clients} clients x {layout.size:,} parameters ({gigabytes * 1000:.0f} MB of updates), "
          f"{torch.get_num_threads()} threads")
    stack = timed(lambda: torch.stack(rows), args.repeats)
    print(f"{'server torch.stack':<20} {stack * 1000:8.1f} ms  {gigabytes / stack:6.2f} GB/s")
    for name in AGGREGATORS.names():
        aggregator = build_aggregator(name, {}, layout, client_ids)
        seconds = timed(lambda a=aggregator: a.aggregate(weights, updates, counts, client_ids, 0.01), args.repeats)
        rate = gigabytes / seconds
        target = TARGETS_GB_S.get(name)
        verdict = "" if target is None else f"  target >= {target:g} GB/s: {'met' if rate >= target else 'MISSED'}"
        print(f"{name:<20} {seconds * 1000:8.1f} ms  {rate:6.2f} GB/s{verdict}")


if __name__ == "__main__":
    main()
