"""The aggregator contract.

An aggregator turns the current weights and the stacked client updates (descent
convention, ``u_k = -(W_k - W) / lr``) into new weights. It may keep state across rounds
(momentum, per-client weights); the state lives in the server process.
"""

from __future__ import annotations

from typing import ClassVar, Sequence

from pydantic import BaseModel, ConfigDict
from torch import Tensor

from fgl_ray.params import ParamLayout
from fgl_ray.registry import Registry

AGGREGATORS: Registry[type["Aggregator"]] = Registry("aggregator")


class Aggregator:
    """Base class; subclasses define ``Options`` and ``aggregate``.

    After each :meth:`aggregate`, ``last_weights`` holds the weight each participating client's
    update received (in the order of ``client_ids``), recorded per round for the diagnostics.
    """

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)

    #: One optimizer state for the whole federation (server moments): unusable when an algorithm
    #: keeps several server models, whose steps would then mix.
    shared_state: ClassVar[bool] = False

    def __init__(self, options: BaseModel, layout: ParamLayout, client_ids: Sequence[int],
                 local_steps: int = 1) -> None:
        self.options = options
        self.layout = layout
        self.client_ids = list(client_ids)
        self.local_steps = local_steps
        self.last_weights: Tensor | None = None

    def aggregate(self, weights: Tensor, updates: Tensor, num_samples: Tensor, client_ids: Sequence[int],
                  lr: float) -> Tensor:
        """Returns the new weights.

        Args:
            weights: current flat weights ``[P]``.
            updates: stacked client updates ``[K, P]``, rows ordered as ``client_ids``.
            num_samples: training-sample counts ``[K]``.
            client_ids: the participating clients, ascending.
            lr: the local learning rate ``eta`` of the descent convention.
        """
        raise NotImplementedError


def sample_weights(num_samples: Tensor) -> Tensor:
    """Sample-proportional weights ``n_k / sum n``; uniform when every count is zero."""
    counts = num_samples.double()
    total = counts.sum()
    if total <= 0:
        return counts.new_full(counts.shape, 1.0 / len(counts))
    return counts / total


def build_aggregator(name: str, options: dict, layout: ParamLayout, client_ids: Sequence[int],
                     local_steps: int = 1) -> Aggregator:
    """Builds the registered aggregator ``name`` with validated ``options``; ``local_steps`` is
    the number of local optimizer steps behind each update (``local_epochs``)."""
    cls = AGGREGATORS.get(name)
    return cls(cls.Options(**options), layout, client_ids, local_steps)
