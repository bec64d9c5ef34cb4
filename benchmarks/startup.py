"""Start-up, cold and warm, Ray against in-process, with the start-up breakdown, measured in one run.

* **cold**: ``fgl-ray run`` commands, one process each, alternating backends (``--pairs`` pairs);
  wall time from process start to exit, and the breakdown each run records (launch to the end of
  round 0: imports, data, Ray, shipping, workers, client set-up, round 0).
* **warm**: one Python process runs each workload twice, with ``fgl_ray.Simulator`` (Ray) and with
  ``run_experiment`` (in-process); the second run's wall time and time to the end of round 0.
* **pool**: a Ray cluster of its own (``ray.cluster_utils.Cluster``) with ``fgl-ray pool start``;
  ``fgl-ray run --address`` then borrows its warm workers: time from launch to the end of round 0,
  and that time less the run's imports and data preparation.

Targets (issue 29, 2-core machine): the default job cold on Ray within 1.2x of in-process and
at or below it warm; a warm ``Simulator.run`` at the end of round 0 within 1 s of the call; a CLI
run on a warm pool within 2 s of launch plus its imports and data preparation.

    FGL_DATA_DIR=../shared/datasets python benchmarks/startup.py [--pairs 3] [--workloads default twitch-s1]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import NEEDS_FILES, WORKLOADS, cli_run, median  # noqa: E402

PHASES = ("imports", "data", "ray", "ship", "workers", "setup", "round_0")


def breakdown(startups: list[dict]) -> str:
    """Median seconds per phase over runs (their total included)."""
    parts = {phase: median(s["phases"][phase] for s in startups) for phase in PHASES}
    text = ", ".join(f"{phase} {seconds:.2f}" for phase, seconds in parts.items() if seconds >= 0.005)
    return f"to round 0 {median(s['total'] for s in startups):5.2f} s ({text})"


def cold(name: str, pairs: int, out: Path) -> dict:
    walls: dict[str, list[float]] = {"ray": [], "local": []}
    startups: dict[str, list[dict]] = {"ray": [], "local": []}
    for _ in range(pairs):
        for backend in ("ray", "local"):
            done = cli_run(WORKLOADS[name] | {"backend": backend}, out / f"cold-{backend}")
            walls[backend].append(done["wall"])
            startups[backend].append(done["summaries"][0]["startup"])
    for backend in ("ray", "local"):
        print(f"  cold {backend:>5}: wall {median(walls[backend]):5.2f} s (of {', '.join(f'{w:.1f}' for w in walls[backend])}); "
              f"{breakdown(startups[backend])}", flush=True)
    ratio = median(walls["ray"]) / median(walls["local"])
    print(f"  cold ratio Ray / in-process wall: {ratio:.2f} (median of {pairs} alternating pairs)", flush=True)
    return {"ratio": ratio}


def warm(name: str, out: Path) -> dict:
    """Each backend twice in this process; the second run is warm (imports done, workers up)."""
    import fgl_ray
    from fgl_ray.config import load_config
    from fgl_ray.data import build_federated_data
    from fgl_ray.runtime import run_experiment

    values = WORKLOADS[name] | {"output_dir": out / "warm", "overwrite": True}
    data = build_federated_data(load_config(values))
    seconds: dict[str, float] = {}
    with fgl_ray.Simulator(progress=False) as simulator:
        for backend in ("ray", "local"):
            config = load_config(values | {"backend": backend})
            run = simulator.run if backend == "ray" else run_experiment
            run(config, data, progress=False)                     # the first: starts what it needs
            started = time.perf_counter()
            result = run(config, data, progress=False)
            seconds[backend] = time.perf_counter() - started
            print(f"  warm {backend:>5}: wall {seconds[backend]:5.2f} s, end of round 0 after "
                  f"{result.summary['startup']['total']:.2f} s", flush=True)
    ratio = seconds["ray"] / seconds["local"]
    print(f"  warm ratio Ray / in-process wall: {ratio:.2f}", flush=True)
    return {"ratio": ratio}


def pool(name: str, out: Path) -> None:
    """CLI runs borrowing from a warm pool on a cluster started here."""
    import subprocess

    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": os.cpu_count(), "include_dashboard": False})
    try:
        started = subprocess.run([sys.executable, "-m", "fgl_ray.cli", "pool", "start", "--address", cluster.address],
                                 capture_output=True, text=True, timeout=600)
        print(f"  pool: {started.stdout.strip().splitlines()[0]}", flush=True)
        startups = [cli_run(WORKLOADS[name], out / "pool", "--address", cluster.address)["summaries"][0]["startup"]
                    for _ in range(3)]
        beyond = [s["total"] - s["phases"]["imports"] - s["phases"]["data"] for s in startups]
        print(f"  pool CLI: {breakdown(startups)}; beyond imports and data {median(beyond):.2f} s", flush=True)
    finally:
        cluster.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3, help="cold runs per backend, alternating")
    parser.add_argument("--workloads", nargs="+", choices=sorted(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--skip", nargs="*", choices=("cold", "warm", "pool"), default=[])
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder)
        for name in args.workloads:
            if name in NEEDS_FILES and not os.environ.get("FGL_DATA_DIR"):
                print(f"== {name}: skipped (set FGL_DATA_DIR to the shared datasets)")
                continue
            print(f"== {name}: {' '.join(f'{k}={v}' for k, v in WORKLOADS[name].items())}", flush=True)
            if "cold" not in args.skip:
                cold(name, args.pairs, out)
            if "warm" not in args.skip:
                warm(name, out)
            if "pool" not in args.skip:
                pool(name, out)


if __name__ == "__main__":
    main()
