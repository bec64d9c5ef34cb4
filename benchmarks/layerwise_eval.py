"""Layer-wise against full-graph evaluation of GraphSAGE on one large generated client.

    python benchmarks/layerwise_eval.py [--nodes 200000] [--chunks 4096 65536]

One domain of the ``synthetic`` generator (mean degree 30, 128 features), GraphSAGE hidden 128,
two layers, a no-grad forward pass of ``encode`` and ``classify``: seconds and the growth of the
peak resident memory during the pass, each mode in a fresh process (peak reset through
``/proc/self/clear_refs``, Linux), then the ratios against the full pass and whether the logits
agree. Two torch threads.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

PROBE = """
import json, sys, time, torch
from fgl_ray.data.synthetic import SyntheticOptions, generate_domains
from fgl_ray.models import build_model
from fgl_ray.tasks.sampling import InEdgeChunks

torch.set_num_threads(2)
def kib(field):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(field))
nodes, mode = int(sys.argv[1]), sys.argv[2]
graph = generate_domains(SyntheticOptions(num_domains=1, nodes_per_domain=nodes, num_features=128,
                                          mean_degree=(30, 30)), 0)[0].data
torch.manual_seed(0)
model = build_model("sage", 128, 4, hidden=128).eval()
chunks = None if mode == "full" else InEdgeChunks(graph.edge_index, graph.num_nodes, int(mode))
open("/proc/self/clear_refs", "w").write("5")
before = kib("VmRSS:")
started = time.perf_counter()
with torch.no_grad():
    logits = model.classify(model.encode(graph.x, graph.edge_index, chunks=chunks), graph.edge_index, chunks=chunks)
seconds = time.perf_counter() - started
torch.save(logits, sys.argv[3])
print(json.dumps({"seconds": seconds, "peak_growth_bytes": (kib("VmHWM:") - before) * 1024}))
"""


def measure(nodes: int, mode: str, logits_path: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, str(nodes), mode, logits_path], capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--chunks", type=int, nargs="+", default=[4096, 65536])
    args = parser.parse_args()
    import tempfile

    import torch

    with tempfile.TemporaryDirectory() as folder:
        full = measure(args.nodes, "full", f"{folder}/full.pt")
        reference = torch.load(f"{folder}/full.pt")
        print(f"full pass: {full['seconds']:.2f} s, peak growth {full['peak_growth_bytes'] / 2**20:.0f} MiB")
        for chunk in args.chunks:
            result = measure(args.nodes, str(chunk), f"{folder}/{chunk}.pt")
            gap = float((torch.load(f"{folder}/{chunk}.pt") - reference).abs().max())
            peak = result["peak_growth_bytes"]
            print(f"layer-wise, {chunk} nodes per chunk: {result['seconds']:.2f} s "
                  f"({result['seconds'] / full['seconds']:.2f}x the full pass), peak growth {peak / 2**20:.0f} MiB "
                  f"({peak / full['peak_growth_bytes']:.3f}x); largest logit difference {gap:.1e}")


if __name__ == "__main__":
    main()
