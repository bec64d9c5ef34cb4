"""FedAvg (McMahan et al., 2017): local SGD, then the server aggregates (mean by default)."""

from fgl_ray.algorithms.base import ALGORITHMS, Algorithm


@ALGORITHMS.register("fedavg")
class FedAvg(Algorithm):
    """Every hook is the contract's default."""
