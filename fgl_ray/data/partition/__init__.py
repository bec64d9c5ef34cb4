"""Partitioners (one module each), the client builder and the named presets.

A partitioner is a pure function of the union graph returning global node ids per client;
:func:`build_clients` turns those into clients. Multi-domain datasets are partitioned as the
disjoint union of their domains. Importing a partitioner's module registers it.
"""

from fgl_ray.data.partition.base import PARTITIONERS, PartitionError, Partitioner, PartitionParams, union_graph
from fgl_ray.data.partition.clients import build_clients, client_nodes
from fgl_ray.data.partition.domain import domain_partition
from fgl_ray.data.partition.label_dirichlet import label_dirichlet_partition
from fgl_ray.data.partition.louvain import louvain_partition
from fgl_ray.data.partition.presets import PRESETS, Preset
from fgl_ray.data.partition.random_nodes import random_partition

__all__ = [
    "PARTITIONERS",
    "PRESETS",
    "PartitionError",
    "PartitionParams",
    "Partitioner",
    "Preset",
    "build_clients",
    "client_nodes",
    "domain_partition",
    "label_dirichlet_partition",
    "louvain_partition",
    "random_partition",
    "union_graph",
]
