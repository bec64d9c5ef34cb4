"""The GPU check of a lent GPU machine, in one process and one Ray session (``gpu_check.sh`` runs it).

Steps, in order of importance, each skipped when the time left (``--budget-s``) is below its estimate:

0. aggregation (on the GPU, else the CPU): GCN and GraphSAGE's sparse-CSR product (``aggregation:
   csr``, the default) against PyG's per-edge scatter, logits and gradients, on a graph with
   repeated and unsorted edges (torch's CSR rules forbid both; its CPU kernels accept them);
1. placement: five Ray actors asking 0.25 GPU each: four start, the fifth waits until one ends;
   the memory cap: an actor at a 0.25 share (``cap_gpu_memory``) allocates 20% of the card, and
   40% fails with an out-of-memory error;
2. small graph (3 x 600-node synthetic domains, 10 clients, GCN): seconds per round on Ray CPU
   actors, Ray GPU actors (``gpus_per_client: auto``), in-process CPU and in-process GPU;
3. large graph (200k nodes, 256 features, 10 clients, GCN hidden 256, 5 local epochs): Ray GPU
   actors, in-process GPU, Ray CPU actors (stopped after ``--cpu-limit-s``), and GraphSAGE with
   neighbour sampling on GPU actors;
4. ogbn-products-sized work (2.4M nodes, mean degree 26, 100 features, 10 clients, GraphSAGE with
   neighbour sampling) on Ray GPU actors: seconds per round against the 2 s target;
5. a Tune grid on GPU (``tune_configs/smoke.yaml``): trials finish with their actors on the card.

Without a GPU the GPU steps are reported as skipped (the CPU ones still run), so the script can be
checked anywhere. Writes ``gpu_check.md`` (the lines below) and ``gpu_check.json`` to ``--out``.

    python benchmarks/gpu_check.py --out DIR [--budget-s 330]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SMALL = {"dataset": "synthetic", "synthetic": {"num_domains": 10, "nodes_per_domain": 270, "num_features": 128},
         "clients_per_domain": 1, "model": "gcn", "hidden": 64, "local_epochs": 3, "rounds": 6}
LARGE = {"dataset": "synthetic", "synthetic": {"num_domains": 10, "nodes_per_domain": 20_000, "num_features": 256,
                                               "mean_degree": [10, 10]},
         "clients_per_domain": 1, "model": "gcn", "hidden": 256, "local_epochs": 5, "rounds": 6}
SAMPLED = {"model": "sage", "node_batching": "neighbor", "num_neighbors": [10, 10], "batch_size": 1024}
PRODUCTS = {"dataset": "synthetic", "synthetic": {"num_domains": 10, "nodes_per_domain": 240_000, "num_features": 100,
                                                  "mean_degree": [26, 26], "num_classes": 47},
            "clients_per_domain": 1, "split": [0.1, 0.1, 0.8], "local_epochs": 1, "rounds": 3, "eval_every": 3,
            "hidden": 256, **SAMPLED}


class Check:
    """Collects the findings, prints each line, and knows the time left."""

    def __init__(self, out: Path, budget_s: float) -> None:
        self.out, self.deadline = out, time.monotonic() + budget_s
        self.lines: list[str] = []
        self.results: dict = {}

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def say(self, line: str) -> None:
        print(line, flush=True)
        self.lines.append(line)

    def step(self, name: str, estimate_s: float) -> bool:
        if self.left() < estimate_s:
            self.say(f"{name}: skipped ({self.left():.0f} s left, needs about {estimate_s:.0f} s)")
            return False
        return True

    def save(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "gpu_check.md").write_text("\n".join(self.lines) + "\n")
        (self.out / "gpu_check.json").write_text(json.dumps(self.results, indent=1, default=str))


def aggregation_agrees(check: Check, device: str) -> None:
    """Step 0: ``csr`` against ``scatter`` for ``gcn`` and ``sage`` on ``device``, same weights."""
    import torch

    from fgl_ray.models import build_model

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2000, 32, generator=generator)
    edges = torch.randint(0, 2000, (2, 40000), generator=generator)
    edges[:, :5000] = edges[:, 5000:10000]                   # repeated edges
    x, edges = x.to(device), edges.to(device)
    for name in ("gcn", "sage"):
        label = f"{name} csr vs scatter on {device}"
        try:
            models = [build_model(name, 32, 4, hidden=32, dropout=0.0, aggregation=a).to(device)
                      for a in ("csr", "scatter")]
            models[1].load_state_dict(models[0].state_dict())
            logits, grads = [], []
            for model in models:
                out = model(x, edges)
                out.square().sum().backward()
                logits.append(out.detach())
                grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
            forward = float((logits[0] - logits[1]).abs().max())
            backward = float((grads[0] - grads[1]).abs().max() / grads[1].abs().max())
        except Exception as error:                               # a CUDA kernel refusing the matrix
            check.results[label] = {"error": repr(error)}
            check.say(f"{label}: FAILED ({error!r})")
            continue
        agree = forward < 1e-4 and backward < 1e-4
        check.results[label] = {"largest_logit_difference": forward, "largest_relative_gradient_difference": backward,
                                "agree": agree}
        check.say(f"{label}: largest logit difference {forward:.1e}, gradient {backward:.1e} (relative): "
                  f"{'agree' if agree else 'DISAGREE'}")


def placement(check: Check) -> None:
    """Fractional shares: 4 of 5 quarter-GPU actors run at once; the cap stops an over-allocation."""
    import ray
    import torch

    @ray.remote(num_gpus=0.25, num_cpus=0)
    class Quarter:
        def ids(self) -> list:
            return ray.get_gpu_ids()

        def allocate(self, fractions: list[float]) -> dict:
            sys.path.insert(0, str(REPO))
            from actors.client import cap_gpu_memory

            device = torch.device("cuda", 0)
            cap = cap_gpu_memory(device, 0.25)
            total = torch.cuda.get_device_properties(device).total_memory
            outcome = {"cap": cap}
            for fraction in fractions:
                try:
                    block = torch.empty(int(total * fraction) // 4, dtype=torch.float32, device=device)
                    del block
                    torch.cuda.empty_cache()
                    outcome[fraction] = "allocated"
                except torch.OutOfMemoryError:
                    outcome[fraction] = "out of memory"
            return outcome

    actors = [Quarter.remote() for _ in range(5)]
    calls = [actor.ids.remote() for actor in actors]
    ready, waiting = ray.wait(calls, num_returns=5, timeout=30)
    check.results["placement"] = {"running": len(ready), "waiting": len(waiting), "gpu_ids": ray.get(ready)}
    check.say(f"placement: {len(ready)} of 5 actors at 0.25 GPU started, {len(waiting)} waiting; ids "
              f"{ray.get(ready)}")
    ray.kill(actors[0])
    late, _ = ray.wait(waiting, timeout=30)
    check.say(f"placement: after one ended, {len(late)} waiting actor(s) started")
    memory = ray.get(actors[1].allocate.remote([0.2, 0.4]))
    check.results["memory_cap"] = memory
    check.say(f"memory cap at a 0.25 share (cap {memory['cap']}): 20% of the card {memory[0.2]}, 40% {memory[0.4]}")
    for actor in actors[1:]:
        ray.kill(actor)


def federation(check: Check, sim, label: str, values: dict, out: Path) -> None:
    """One run's seconds per round (rounds after round 0) and where its clients trained."""
    from fgl_ray.config import load_config
    from fgl_ray.errors import as_folder_name

    started = time.perf_counter()
    try:
        run = sim.run(load_config(values | {"output_dir": str(out), "run_name": as_folder_name(label), "overwrite": True}),
                      progress=False)
    except Exception as error:           # recorded, and the check goes on
        check.results[label] = {"error": repr(error)}
        check.say(f"{label}: FAILED ({type(error).__name__}: {str(error).splitlines()[0][:200]})")
        return
    timing = run.summary["round_timing"]
    check.results[label] = {"round_seconds": timing.get("round_seconds"), "wall_seconds": time.perf_counter() - started,
                            "local_work": run.summary.get("local_work")}
    check.say(f"{label}: {timing.get('round_seconds', float('nan')):.3f} s/round, slowest client's training "
              f"{timing.get('client_slowest_seconds', float('nan')):.3f} s ({time.perf_counter() - started:.0f} s "
              "with data and start-up)")


def cpu_limited(check: Check, label: str, values: dict, out: Path, limit_s: float) -> None:
    """A run that may not finish (CPU actors on the large graph), in a child process stopped at ``limit_s``."""
    from measure import flags

    command = [sys.executable, "-m", "fgl_ray.cli", "run", *flags(values), "--no-progress", "--output-dir",
               str(out / label), "--overwrite", "true"]
    started = time.perf_counter()
    try:
        subprocess.run(command, cwd=REPO, timeout=limit_s, capture_output=True, check=True)
        check.say(f"{label}: finished {values['rounds']} rounds in {time.perf_counter() - started:.0f} s")
    except subprocess.TimeoutExpired:
        check.say(f"{label}: did not finish {values['rounds']} rounds in {limit_s:.0f} s (stopped)")
    except subprocess.CalledProcessError as error:
        check.say(f"{label}: FAILED ({error.stderr.decode()[-300:]})")


def tune_on_gpu(check: Check, out: Path) -> None:
    command = [sys.executable, "-m", "fgl_ray.cli", "tune", "tune_configs/smoke.yaml", "--output", str(out / "tune"),
               "--set", "gpus_per_client=0.25"]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=max(30.0, check.left()))
    tail = [line for line in done.stdout.splitlines() if line.startswith(("wall time", "fgl-ray"))]
    check.say(f"tune grid on GPU: exit {done.returncode} in {time.perf_counter() - started:.0f} s; "
              f"{'; '.join(tail) or done.stderr[-300:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget-s", type=float, default=330.0)
    parser.add_argument("--cpu-limit-s", type=float, default=60.0)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    check = Check(args.out, args.budget_s)
    import fgl_ray
    import torch

    gpu = torch.cuda.is_available()
    check.say(f"device: {torch.cuda.get_device_name(0) if gpu else 'no GPU'}; torch {torch.__version__}")
    runs = args.out / "runs"
    try:
        if check.step("aggregation", 20):
            aggregation_agrees(check, "cuda" if gpu else "cpu")
        with fgl_ray.Simulator(progress=False) as sim:
            if gpu and check.step("placement", 40):
                sim.pooled                        # waits until Ray is up
                placement(check)
            if check.step("small graph", 60):
                for label, extra in (("small ray cpu", {"backend": "ray", "gpus_per_client": 0}),
                                     ("small ray gpu", {"backend": "ray"}),
                                     ("small local cpu", {"backend": "local", "device": "cpu"}),
                                     ("small local gpu", {"backend": "local", "device": "cuda"})):
                    if gpu or "gpu" not in label:
                        federation(check, sim, label, SMALL | extra, runs)
            if gpu and check.step("large graph", 90):
                federation(check, sim, "large ray gpu", LARGE | {"backend": "ray"}, runs)
                federation(check, sim, "large local gpu", LARGE | {"backend": "local", "device": "cuda"}, runs)
                federation(check, sim, "large ray gpu sampled", LARGE | SAMPLED | {"backend": "ray"}, runs)
            if gpu and check.step("products-sized", 120):
                federation(check, sim, "products-sized ray gpu sampled", PRODUCTS | {"backend": "ray"}, runs)
                seconds = check.results["products-sized ray gpu sampled"].get("round_seconds")
                if seconds:
                    check.say(f"products-sized work per round: {seconds:.2f} s, target < 2 s: "
                              f"{'met' if seconds < 2 else 'MISSED'}")
        if gpu and check.step("large ray cpu", args.cpu_limit_s + 10):
            cpu_limited(check, "large ray cpu", LARGE | {"backend": "ray", "gpus_per_client": 0}, runs,
                        args.cpu_limit_s)
        if gpu and check.step("tune on GPU", 60):
            tune_on_gpu(check, args.out)
    finally:
        check.save()


if __name__ == "__main__":
    main()
