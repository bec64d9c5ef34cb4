"""How selective is FedEPD's energy pruning? Heterophilic share of the edges it drops vs of all edges.

For each dataset of the FedEPD reproduction (10 Louvain clients, data seed 0), runs the
client-side purification (``purify_edges``, Eqs. 1-5) on every client and pools, over clients,
the undirected edges, the dropped ones, and how many of each join nodes of different labels.
Pruning that targets heterophily drops edges whose heterophilic share is above the base rate.
Prints a table and writes it to the ``fedepd-purification`` section of ``benchmarks/RESULTS.md``.

    FGL_DATA_DIR=../shared/datasets python benchmarks/fedepd_purification.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fedia_common import replace_section  # noqa: E402

from fgl_ray.algorithms.fedepd_graph import purify_edges  # noqa: E402
from fgl_ray.config import load_config  # noqa: E402
from fgl_ray.data import build_federated_data  # noqa: E402

DATASETS = ("email-eu-core", "cora-lt", "citeseer-lt", "chameleon-lt")
COMMAND = "FGL_DATA_DIR=../shared/datasets python benchmarks/fedepd_purification.py"


def pruning_row(dataset: str) -> str:
    data = build_federated_data(load_config(dict(dataset=dataset, partition="louvain", num_clients=10, data_seed=0)))
    edges = dropped = heterophilic = heterophilic_dropped = 0
    lambdas = []
    for client in data.clients:
        purified = purify_edges(client.data.x, client.data.edge_index)
        labels = client.data.y
        heterophilic_pair = labels[purified.pairs[0]] != labels[purified.pairs[1]]
        drop = ~purified.kept
        edges += len(drop)
        dropped += int(drop.sum())
        heterophilic += int(heterophilic_pair.sum())
        heterophilic_dropped += int((heterophilic_pair & drop).sum())
        lambdas.append(purified.lam)
    return (f"| {dataset} | {np.mean(lambdas):.3f} | {100 * dropped / edges:.1f} | {100 * heterophilic / edges:.1f} | "
            f"{100 * heterophilic_dropped / max(dropped, 1):.1f} | {100 * heterophilic_dropped / max(heterophilic, 1):.1f} |")


def main() -> None:
    header = ("| dataset | mean λ_k | edges dropped % | heterophilic % of all edges | heterophilic % of dropped edges "
              "| heterophilic edges dropped % |\n|---|---|---|---|---|---|\n")
    rows = "\n".join(pruning_row(dataset) for dataset in DATASETS)
    body = f"Command: `{COMMAND}`\n\n{header}{rows}\n"
    print(body)
    replace_section("fedepd-purification", body)


if __name__ == "__main__":
    main()
