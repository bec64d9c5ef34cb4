"""The data layer: load a dataset's domains, align features, partition, split per client.

Names are resolved on first use (PEP 562), so a client worker that needs only
:mod:`fgl_ray.data.types` does not import the loaders, the partitioners and their libraries.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DATASETS": "fgl_ray.data.datasets",
    "available_offline": "fgl_ray.data.datasets",
    "ClientGraph": "fgl_ray.data.types",
    "DatasetSpec": "fgl_ray.data.types",
    "DomainGraph": "fgl_ray.data.types",
    "FederatedGraphData": "fgl_ray.data.types",
    "build_federated_data": "fgl_ray.data.build",
    "build_graph_data": "fgl_ray.data.build",
    "build_node_data": "fgl_ray.data.build",
    "check_files": "fgl_ray.data.build",
    "dataset_domains": "fgl_ray.data.build",
    "expected_clients": "fgl_ray.data.build",
    "load_domains": "fgl_ray.data.build",
    "load_graph_dataset": "fgl_ray.data.build",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
