"""Local training only: the no-collaboration reference."""

from __future__ import annotations

from typing import Sequence

from fgl_ray.algorithms.base import ALGORITHMS, Algorithm
from fgl_ray.messages import ClientUpdate


@ALGORITHMS.register("local")
class Local(Algorithm):
    """Each client starts from the common initial model and then trains alone.

    Evaluation uses each client's own model; the server model never changes.
    """

    personalized = True

    def aggregate(self, server, updates: Sequence[ClientUpdate]) -> None:
        """Nothing is shared."""
