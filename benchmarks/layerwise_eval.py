"""A node backbone's neighbour aggregation on one large generated client: layer-wise against
full-graph evaluation (GraphSAGE), and the sparse-CSR product against PyG's per-edge scatter.

    python benchmarks/layerwise_eval.py [--model sage] [--nodes 200000] [--chunks 4096 65536]
                                        [--aggregations csr scatter]

One domain of the ``synthetic`` generator (mean degree 30, 128 features), the model (``sage`` or
``gcn``; layer-wise chunks for ``sage`` only) at hidden 128, two layers. For each aggregation
(``--model-options "{aggregation: ...}"``): a no-grad forward pass of ``encode`` and ``classify``
over the whole graph and layer-wise in chunks, and one full-batch training step (forward,
cross-entropy over every node, backward). Each measurement runs in a fresh process: seconds and
the growth of the peak resident memory (reset through ``/proc/self/clear_refs``, Linux); then the
ratios against the same aggregation's full pass, the ratios of ``csr`` to ``scatter``, and the
largest logit difference from the full pass of the first of ``--aggregations``. Two torch threads.
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
nodes, mode, aggregation, name = int(sys.argv[1]), sys.argv[2], sys.argv[4], sys.argv[5]
graph = generate_domains(SyntheticOptions(num_domains=1, nodes_per_domain=nodes, num_features=128,
                                          mean_degree=(30, 30)), 0)[0].data
torch.manual_seed(0)
model = build_model(name, 128, 4, hidden=128, aggregation=aggregation).train(mode == "train")
chunks = None if mode in ("full", "train") else InEdgeChunks(graph.edge_index, graph.num_nodes, int(mode))
labels = torch.randint(0, 4, (graph.num_nodes,))
open("/proc/self/clear_refs", "w").write("5")
before = kib("VmRSS:")
started = time.perf_counter()
with torch.set_grad_enabled(mode == "train"):
    extra = {} if chunks is None else {"chunks": chunks}
    logits = model.classify(model.encode(graph.x, graph.edge_index, **extra), graph.edge_index, **extra)
    if mode == "train":
        torch.nn.functional.cross_entropy(logits, labels).backward()
        logits = logits.detach()
seconds = time.perf_counter() - started
torch.save(logits, sys.argv[3])
print(json.dumps({"seconds": seconds, "peak_growth_bytes": (kib("VmHWM:") - before) * 1024}))
"""


def measure(args, mode: str, aggregation: str, logits_path: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, str(args.nodes), mode, logits_path, aggregation, args.model],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=("sage", "gcn"), default="sage")
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--chunks", type=int, nargs="+", default=[4096, 65536])
    parser.add_argument("--aggregations", nargs="+", choices=("csr", "scatter"), default=["scatter", "csr"])
    args = parser.parse_args()
    chunks = args.chunks if args.model == "sage" else []
    import tempfile

    import torch

    results = {}
    with tempfile.TemporaryDirectory() as folder:
        reference = None
        for aggregation in args.aggregations:
            full = results[aggregation, "full"] = measure(args, "full", aggregation, f"{folder}/full.pt")
            reference = torch.load(f"{folder}/full.pt") if reference is None else reference
            print(f"{aggregation}: full pass {full['seconds']:.2f} s, peak growth "
                  f"{full['peak_growth_bytes'] / 2**20:.0f} MiB; largest logit difference "
                  f"{float((torch.load(f'{folder}/full.pt') - reference).abs().max()):.1e}")
            for chunk in chunks:
                result = results[aggregation, chunk] = measure(args, str(chunk), aggregation, f"{folder}/c.pt")
                gap = float((torch.load(f"{folder}/c.pt") - reference).abs().max())
                peak = result["peak_growth_bytes"]
                print(f"{aggregation}: layer-wise, {chunk} nodes per chunk: {result['seconds']:.2f} s "
                      f"({result['seconds'] / full['seconds']:.2f}x the full pass), peak growth {peak / 2**20:.0f} MiB "
                      f"({peak / full['peak_growth_bytes']:.3f}x); largest logit difference {gap:.1e}")
            step = results[aggregation, "train"] = measure(args, "train", aggregation, f"{folder}/t.pt")
            print(f"{aggregation}: training step (forward and backward): {step['seconds']:.2f} s, "
                  f"peak growth {step['peak_growth_bytes'] / 2**20:.0f} MiB")
    if {"csr", "scatter"} <= set(args.aggregations):
        for mode in ["full", *chunks, "train"]:
            csr, scatter = results["csr", mode], results["scatter", mode]
            print(f"csr against scatter, {mode if mode in ('full', 'train') else f'layer-wise {mode}'}: "
                  f"{scatter['seconds'] / csr['seconds']:.2f}x faster, "
                  f"{csr['peak_growth_bytes'] / scatter['peak_growth_bytes']:.3f}x the peak growth")


if __name__ == "__main__":
    main()
