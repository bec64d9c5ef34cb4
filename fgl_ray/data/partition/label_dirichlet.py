"""``label-dirichlet``: each class's nodes spread over clients by Dirichlet proportions."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from fgl_ray.data.partition.base import PARTITIONERS, PartitionError, PartitionParams

MIN_CLIENT_NODES = 5
MAX_DRAWS = 1000


def label_dirichlet_partition(
    y: Tensor, num_clients: int, alpha: float, seed: int, min_size: int = MIN_CLIENT_NODES
) -> list[Tensor]:
    """Per class, draws client shares from Dirichlet(``alpha``) and deals the class's nodes out.

    Draws are repeated until every client holds at least ``min_size`` nodes. Smaller ``alpha``
    gives each client a more skewed label distribution.

    Raises:
        ValueError: no draw out of ``MAX_DRAWS`` gives every client ``min_size`` nodes.
    """
    rng = np.random.default_rng(seed)
    labels = y.numpy()
    for _ in range(MAX_DRAWS):
        members: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for label in np.unique(labels):
            nodes = rng.permutation(np.flatnonzero(labels == label))
            cuts = (np.cumsum(rng.dirichlet(np.full(num_clients, alpha)))[:-1] * nodes.size).astype(np.int64)
            for client, part in enumerate(np.split(nodes, cuts)):
                members[client].append(part)
        sizes = [sum(part.size for part in parts) for parts in members]
        if min(sizes) >= min_size:
            return [torch.from_numpy(np.sort(np.concatenate(parts))) for parts in members]
    raise PartitionError(
        f"label-dirichlet gave some client fewer than {min_size} nodes in {MAX_DRAWS} draws "
        f"({y.numel()} nodes, num_clients={num_clients}, dirichlet_alpha={alpha}); "
        "raise dirichlet_alpha or lower num_clients"
    )


@PARTITIONERS.register("label-dirichlet")
def _label_dirichlet(graph: Data, params: PartitionParams) -> list[Tensor]:
    return label_dirichlet_partition(graph.y, params.num_clients, params.dirichlet_alpha, params.seed)
