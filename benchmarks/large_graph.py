"""Large graphs: a generated graph of 2M nodes and ~60M edges, FedAvg + GraphSAGE, measured in one run.

Each setting is one ``fgl-ray run`` process, on Ray and in-process, with neighbour-sampled
mini-batches (``batch_size`` seeds, ``num_neighbors`` per layer) and, where it fits, full-batch
training: seconds per training round (the rounds after round 0 but the last, which also
evaluates; that evaluation is reported apart), the slowest client's training, the local steps
per round, and peak memory summed over the command and every process it starts (driver, the
local Ray's processes, client workers) as RSS and PSS.

The graph is ``synthetic`` with 2M nodes of mean degree 30 (60M directed edge entries), cut into
one client per generated domain: 10 domains of 200k nodes for 10 clients, 100 of 20k for 100
(a random cut of a domain would drop most of its edges, and Louvain on 60M edges does not fit
this machine). The clients keep every edge of their domain.

Targets (issue 32, 2-core machine): within 20 GB summed memory; on Ray at least 1.5x faster
per training round than in-process at 10 clients.

    python benchmarks/large_graph.py [--clients 10 100] [--batching neighbor full] [--aggregation csr] [--record]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fedia_common import record_output  # noqa: E402
from measure import cli_run, gigabytes  # noqa: E402

from fgl_ray.results import read_metrics  # noqa: E402

NODES, MEAN_DEGREE = 2_000_000, 30   # the graph; --nodes scales it down for a quick check
MEMORY_TARGET, SPEED_TARGET = 20e9, 1.5


def values(clients: int, batching: str, backend: str, args) -> dict:
    """The ``fgl-ray run`` settings of one measurement."""
    graph = {"num_domains": clients, "nodes_per_domain": args.nodes // clients, "mean_degree": [MEAN_DEGREE] * 2,
             "num_features": args.features, "num_classes": 8}
    return {"dataset": "synthetic", "synthetic": graph, "partition": "domain", "clients_per_domain": 1,
            "algorithm": "fedavg", "model": "sage", "model_options": {"aggregation": args.aggregation},
            "hidden": args.hidden, "local_epochs": 1,
            "rounds": args.rounds, "eval_every": args.rounds, "backend": backend, "node_batching": batching,
            "batch_size": args.batch_size, "num_neighbors": args.num_neighbors, "split": [0.1, 0.1, 0.8]}


def measure(settings: dict, out: Path) -> dict:
    """Seconds per training round (the rounds between round 0 and the evaluated last one), the last
    round's evaluation, the slowest client's training, local steps and peak memory of one run."""
    done = cli_run(settings, out, memory=True)
    summary = done["summaries"][0]
    rows = read_metrics(done["run_dirs"][0])
    server = rows[rows.client_id == "server"]
    rounds = server[(server.split == "round") & (server.metric == "seconds")].set_index("round")["value"]
    last = int(rounds.index.max())
    evaluation = server[(server.split == "timing") & (server.metric == "evaluate_seconds") & (server["round"] == last)]
    slowest = server[(server.split == "timing") & (server.metric == "client_slowest_seconds") & (server["round"] > 0)]
    return {"round": float(rounds.loc[1:last - 1].mean()), "evaluate": float(evaluation["value"].sum()),
            "train": float(slowest["value"].mean()),
            "steps": summary.get("local_work", {}).get("steps_per_round", float("nan")),
            "rss": done["peak_rss"], "pss": done["peak_pss"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--batching", nargs="+", choices=("neighbor", "full"), default=["neighbor", "full"])
    parser.add_argument("--backends", nargs="+", choices=("ray", "local"), default=["ray", "local"])
    parser.add_argument("--nodes", type=int, default=NODES)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--num-neighbors", type=int, nargs="+", default=[10, 10])
    parser.add_argument("--aggregation", choices=("csr", "scatter"), default="csr",
                        help="GraphSAGE's neighbour mean (see fgl_ray/models/sage.py)")
    parser.add_argument("--record", action="store_true", help="write the output to benchmarks/RESULTS.md")
    args = parser.parse_args()
    lines, results = [], {}

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    say(f"synthetic graph: {args.nodes:,} nodes, mean degree {MEAN_DEGREE} ({args.nodes * MEAN_DEGREE / 1e6:.1f}M directed "
        f"edges), {args.features} features; FedAvg + GraphSAGE ({args.aggregation} mean) hidden {args.hidden}, "
        f"1 local epoch, "
        f"{args.rounds} rounds (evaluated in the last); neighbour batches of {args.batch_size} seeds, fanouts "
        f"{args.num_neighbors}")
    with tempfile.TemporaryDirectory() as tmp:
        for clients in args.clients:
            for batching in args.batching:
                for backend in args.backends:
                    name = f"{clients}-{batching}-{backend}"
                    try:
                        got = results[clients, batching, backend] = measure(
                            values(clients, batching, backend, args), Path(tmp) / name)
                    except RuntimeError as error:      # full-batch training that does not fit, for example
                        say(f"{clients:>4} clients {batching:>8} {backend:>5}: FAILED "
                            f"({str(error).strip().splitlines()[-1][:160]})")
                        continue
                    say(f"{clients:>4} clients {batching:>8} {backend:>5}: {got['round']:7.2f} s per training round "
                        f"(slowest client {got['train']:6.2f} s, {got['steps']:.0f} local steps per round), "
                        f"evaluation {got['evaluate']:6.1f} s, peak RSS {gigabytes(got['rss'])}, PSS "
                        f"{gigabytes(got['pss'])}")
    for (clients, batching, backend), got in sorted(results.items()):
        verdict = "met" if got["pss"] < MEMORY_TARGET else "MISSED"
        say(f"memory {clients} clients {batching} {backend}: PSS {gigabytes(got['pss'])}, target < "
            f"{gigabytes(MEMORY_TARGET)}: {verdict}")
    for clients in args.clients:
        for batching in args.batching:
            ray, local = results.get((clients, batching, "ray")), results.get((clients, batching, "local"))
            if ray and local:
                speedup = local["round"] / ray["round"]
                target = f", target >= {SPEED_TARGET}x: {'met' if speedup >= SPEED_TARGET else 'MISSED'}" \
                    if clients == 10 and batching == "neighbor" else ""
                say(f"{clients} clients {batching}: Ray {speedup:.2f}x faster per training round than in-process{target}")
    if args.record:
        record_output("large-graph", lines)


if __name__ == "__main__":
    main()
