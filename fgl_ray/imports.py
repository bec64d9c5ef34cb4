"""Lean imports for the processes fgl-ray starts (the CLI and the client workers).

``import torch_geometric`` executes ``torch_geometric.datasets`` (and through its LLM datasets
pandas and more of ``torch._dynamo``): about 0.5 s and 60 MB per process here, which a client
worker never uses and the driver uses only when it loads a PyG dataset. :func:`defer_pyg_datasets`
makes that subpackage a lazily executed module (``importlib.util.LazyLoader``): it runs on its
first attribute access, so code that uses it sees no difference. It is not applied on
``import fgl_ray``: a library should not change how its users' imports behave.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys

#: Subpackages no client worker needs at import time.
DEFERRED = ("torch_geometric.datasets",)


class _DeferredFinder(importlib.abc.MetaPathFinder):
    """Finds the modules in ``names`` as usual, then wraps their loader in a ``LazyLoader``."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = frozenset(names)

    def find_spec(self, name, path, target=None):
        if name not in self.names:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = importlib.util.LazyLoader(spec.loader)
        return spec


def defer_pyg_datasets() -> bool:
    """Defers :data:`DEFERRED` in this process; False when one of them is imported already."""
    if any(name in sys.modules for name in DEFERRED):
        return False
    if not any(isinstance(finder, _DeferredFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _DeferredFinder(DEFERRED))
    return True
