"""Runs in its own process (tests/runtime/test_gpu_placement.py): Ray with fake GPUs.

``ray.init(num_cpus=2, num_gpus=1)`` on a machine without GPUs makes Ray schedule GPU shares
while torch sees no CUDA, so actors must fall back to CPU. The session Ray of the other tests
has no GPUs and one process holds one Ray, hence the subprocess. Start it with
``CUDA_VISIBLE_DEVICES=0`` to play a GPU node: every worker inherits that value unless Ray (GPU
actors) or fgl-ray (actors without a share) overrides it.

Usage: ``python fake_gpu_probe.py '<json config values>'``; prints one JSON line prefixed
``PROBE `` with, per setting of ``gpus_per_client``, the plan, Ray's ``required_resources`` of
each ClientActor and each actor's ``placement()``, one training round (auto) and a control actor.
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray  # noqa: E402
from ray.util.state import list_actors  # noqa: E402

from fgl_ray.config import load_config  # noqa: E402
from fgl_ray.data import build_federated_data  # noqa: E402
from fgl_ray.runtime import open_backend  # noqa: E402


@ray.remote
class Control:
    """A plain actor without GPUs, as a user would start one: what does Ray let it see?"""

    def visible(self):
        return os.environ.get("CUDA_VISIBLE_DEVICES")


def required_resources(actor_ids: list[str]) -> list[dict]:
    """``required_resources`` of these actors, from Ray's state API (GCS actor table)."""
    actors = {a.actor_id: a for a in list_actors(address=ray.get_runtime_context().gcs_address, detail=True,
                                                  filters=[("class_name", "=", "ClientActor")], limit=1000)}
    return [dict(actors[actor_id].required_resources) for actor_id in actor_ids]


def probe(values: dict) -> dict:
    base = load_config(values)
    data = build_federated_data(base)
    report: dict = {"cluster": ray.cluster_resources(), "settings": {}}
    for setting in ("auto", 0):
        started = time.perf_counter()
        handle = open_backend(base.with_overrides(gpus_per_client=setting), data)
        try:
            placements = handle.placements()
            entry = report["settings"][str(setting)] = {
                "plan_gpus_per_actor": handle.plan.gpus_per_actor,
                "num_actors": handle.plan.num_actors,
                "required_resources": required_resources([p["actor_id"] for p in placements]),
                "placements": placements,
            }
            if setting == "auto":  # one round of training on the GPU-share actors
                result = handle.run_round(0)
                entry["round"] = {"trained": sorted(result.updates), "failures": len(result.failures),
                                  "aggregated": result.aggregated,
                                  "evaluated": sorted({e.client_id for e in result.evaluations})}
        finally:
            handle.close()
        report["settings"][str(setting)]["seconds"] = round(time.perf_counter() - started, 1)
    control = Control.options(num_cpus=0.01).remote()
    report["control_cuda_visible_devices"] = ray.get(control.visible.remote())
    ray.kill(control)
    return report


def main() -> int:
    values = json.loads(sys.argv[1])
    started = time.perf_counter()
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=True, configure_logging=False, log_to_driver=False)
    try:
        report = probe(values)
        report["seconds"] = round(time.perf_counter() - started, 1)
        print("PROBE " + json.dumps(report, default=str), flush=True)
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
