"""Server aggregators: pure tensor rules over stacked client updates, registered by name."""

from fgl_ray.aggregators.base import AGGREGATORS, Aggregator, build_aggregator
from fgl_ray.aggregators import mean  # noqa: F401  (registration)
from fgl_ray.aggregators import fedia, fedopt, robust  # noqa: F401  (registration)

__all__ = ["AGGREGATORS", "Aggregator", "build_aggregator"]
