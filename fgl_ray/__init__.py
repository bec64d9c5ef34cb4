"""fgl-ray: a Ray-distributed simulation service for federated graph learning.

``fgl_ray.Simulator`` is the Python API (see :mod:`fgl_ray.runtime.simulator`); importing this
package imports neither torch nor Ray.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["Simulator", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Simulator":
        from fgl_ray.runtime.simulator import Simulator

        return Simulator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
