"""The federation loop and its backends (in-process and Ray), and the ``Simulator`` that keeps
client workers warm across runs.

Names are resolved on first use (PEP 562): a client worker imports :mod:`fgl_ray.runtime.host`
without the driver's loop, results and plotting.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "FederationRun": "fgl_ray.runtime.federation",
    "RunResult": "fgl_ray.runtime.federation",
    "open_backend": "fgl_ray.runtime.federation",
    "run_experiment": "fgl_ray.runtime.federation",
    "Simulator": "fgl_ray.runtime.simulator",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
