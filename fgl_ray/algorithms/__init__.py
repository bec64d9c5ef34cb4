"""Federated algorithms, registered by name. Adding one is one new module plus its tests."""

from fgl_ray.algorithms.base import ALGORITHMS, Algorithm, ClientContext, build_algorithm
from fgl_ray.algorithms import fedavg, local  # noqa: F401  (registration)
from fgl_ray.algorithms import feddyn, fedproc, fedprox, fedproto, moon  # noqa: F401  (registration)
from fgl_ray.algorithms import fedavg_fill, fedepd, fedlc, fedmgs, gcfl  # noqa: F401  (registration)
from fgl_ray.algorithms import adafgl, fedgta, fedsage_plus, fedspa, fedtad, fggp, fgssl  # noqa: F401  (registration; the graph-specific baselines)

__all__ = ["ALGORITHMS", "Algorithm", "ClientContext", "build_algorithm"]
