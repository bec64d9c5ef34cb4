"""Missing modalities (FedMGS, Section 6.1): client-level and node-level masks at a given rate.

* ``client:<rate>``: ``round(rate * K)`` clients (rounded half up), chosen uniformly, each lose one
  modality (visual or text, uniformly) for every node;
* ``node:<rate>``: inside every client, ``round(rate * n)`` nodes, chosen uniformly, each lose one
  modality (visual or text, uniformly).

No node ever loses both modalities. The masks are fixed before training and hold for every node
(train, validation and test), as the paper's availability indicator records real presence; they
are deterministic from the data seed (and, for node-level masks, the client id). A missing
modality's feature block is zeroed (the placeholder) and its availability bit cleared.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from fgl_ray.data.multimodal import pack, unpack
from fgl_ray.data.types import ClientGraph

GRANULARITIES = ("client", "node")


def parse_missing(text: str) -> tuple[str, float]:
    """``"node:0.5"`` -> ``("node", 0.5)``.

    Raises:
        ValueError: naming the expected form when ``text`` is malformed or the rate is outside (0, 1).
    """
    granularity, sep, rate = text.partition(":")
    try:
        value = float(rate)
    except ValueError:
        value = math.nan
    if not sep or granularity not in GRANULARITIES or not 0.0 < value < 1.0:
        raise ValueError(f"missing must be 'client:<rate>' or 'node:<rate>' with a rate in (0, 1), got {text!r}; "
                         "e.g. node:0.5")
    return granularity, value


def _half_up(value: float) -> int:
    return int(math.floor(value + 0.5 + 1e-9))


def client_level(num_clients: int, rate: float, seed: int) -> dict[int, int]:
    """Client index -> the modality (0 visual, 1 text) it loses, for ``round(rate * K)`` clients."""
    rng = np.random.default_rng([seed, 7])
    chosen = rng.choice(num_clients, size=_half_up(rate * num_clients), replace=False)
    return {int(c): int(rng.integers(2)) for c in sorted(chosen)}


def node_level(num_nodes: int, rate: float, seed: int, client_id: int) -> Tensor:
    """``[n, 2]`` availability: ``round(rate * n)`` nodes lose one modality each, uniformly chosen."""
    rng = np.random.default_rng([seed, 11, client_id])
    available = torch.ones(num_nodes, 2, dtype=torch.bool)
    nodes = rng.choice(num_nodes, size=_half_up(rate * num_nodes), replace=False)
    available[torch.from_numpy(nodes), torch.from_numpy(rng.integers(2, size=nodes.size))] = False
    return available


def apply_availability(x: Tensor, dims: tuple[int, int], available: Tensor) -> Tensor:
    """Packed features with the missing blocks zeroed and the availability bits set."""
    visual, text, _ = unpack(x, dims)
    return pack(visual * available[:, :1], text * available[:, 1:], available)


def apply_missing(clients: Sequence[ClientGraph], spec: str, dims: tuple[int, int], seed: int) -> list[ClientGraph]:
    """The clients with the modalities ``spec`` removes; their partitions are copied, not altered."""
    granularity, rate = parse_missing(spec)
    lost = client_level(len(clients), rate, seed) if granularity == "client" else {}
    result = []
    for index, client in enumerate(clients):
        n = client.data.num_nodes
        if granularity == "client":
            available = torch.ones(n, 2, dtype=torch.bool)
            if index in lost:
                available[:, lost[index]] = False
        else:
            available = node_level(n, rate, seed, client.client_id)
        data = client.data.clone()
        data.x = apply_availability(client.data.x, dims, available)
        result.append(replace(client, data=data))
    return result
