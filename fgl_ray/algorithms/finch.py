"""FINCH clustering (Sarfraz, Sharma & Stiefelhagen, "Efficient Parameter-free Clustering Using First
Neighbor Relations", CVPR 2019), written from the paper.

Level 1 links ``i`` and ``j`` when one is the other's first neighbour or both share a first
neighbour (Eq. 1) and takes the connected components as clusters; each further level does the same
on the means of the previous level's clusters. The hierarchy stops before a level that would leave
one cluster or would not merge anything. Distances are cosine, as FGGP uses them.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components


def first_neighbour_partition(points: np.ndarray) -> np.ndarray:
    """Cluster labels ``[n]`` of one FINCH level: components of the first-neighbour graph (cosine)."""
    n = points.shape[0]
    unit = points / np.maximum(np.linalg.norm(points, axis=1, keepdims=True), 1e-12)
    distance = 1.0 - unit @ unit.T
    np.fill_diagonal(distance, np.inf)
    first = distance.argmin(axis=1)
    links = coo_matrix((np.ones(n), (np.arange(n), first)), shape=(n, n))
    # i - first(i) links; sharing a first neighbour j connects through j, so components need no more
    return connected_components(links, directed=True, connection="weak")[1]


def finch(points: np.ndarray) -> list[np.ndarray]:
    """Every level's labels for the rows of ``points`` ``[n, d]``, finest first (one level of a single
    cluster when ``n < 3``: two points are each other's first neighbour)."""
    points = np.asarray(points, dtype=np.float64)
    if points.shape[0] < 2:
        return [np.zeros(points.shape[0], dtype=np.int64)]
    labels = first_neighbour_partition(points)
    levels = [labels]
    while labels.max() + 1 > 1:
        count = labels.max() + 1
        means = np.stack([points[labels == c].mean(axis=0) for c in range(count)])
        merged = first_neighbour_partition(means) if count > 1 else np.zeros(1, dtype=np.int64)
        if merged.max() + 1 in (1, count):     # one cluster, or nothing merged: stop before this level
            break
        labels = merged[labels]
        levels.append(labels)
    return levels
