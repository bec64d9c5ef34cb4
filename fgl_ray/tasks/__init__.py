"""Readouts (node classification, graph classification, ...), registered by name.

A new readout is one file here and its tests; no algorithm changes.
"""

from fgl_ray.tasks.base import ALIASES, TASKS, Task, build_task, canonical_task, group_stats, pool_stats
from fgl_ray.tasks import graph_classification, link_prediction, modality, node_classification  # noqa: F401

__all__ = ["ALIASES", "TASKS", "Task", "build_task", "canonical_task", "group_stats", "pool_stats"]
