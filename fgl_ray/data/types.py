"""Typed containers that the data layer hands to the runtime."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal

from torch_geometric.data import Data

Task = Literal["node", "graph"]


@dataclass(frozen=True)
class DatasetSpec:
    """What the registry knows about a dataset without loading it.

    Attributes:
        name: registry name (``twitch``, ``cora``, ``tu-mutag``, ...).
        task: ``node`` (node classification) or ``graph`` (graph classification).
        domains: domain names in a fixed order; a single-graph dataset has one.
        default_split: train/val/test fractions used when the config gives none.
        load: ``load(root, cache_dir) -> list[DomainGraph]`` (node task) or a list of
            graphs (graph task); ``root`` is the PyG-layout folder, may be read-only.
        files: paths relative to ``root`` that must exist for an offline load.
        description: one line for ``fgl-ray datasets``.
        needs_files: whether loading reads ``files`` (the synthetic generator does not).
        shared_features: the domains' raw features share coordinates (one vocabulary), so a
            single SVD can be fitted on their union (``features: svd``).
    """

    name: str
    task: Task
    domains: tuple[str, ...]
    default_split: tuple[float, float, float]
    load: Callable[..., object]
    files: tuple[str, ...] = ()
    description: str = ""
    needs_files: bool = True
    shared_features: bool = True


@dataclass
class DomainGraph:
    """One domain's whole graph before partitioning (x float, edge_index, y long)."""

    name: str
    data: Data


@dataclass
class ClientGraph:
    """One client's private partition.

    ``data`` holds ``x [n, d]`` float32, ``edge_index [2, m]`` (both directions of each
    undirected edge, local node ids), ``y [n]`` int64, and boolean ``train_mask``,
    ``val_mask``, ``test_mask`` of length ``n``.
    """

    client_id: int
    domain: str
    data: Data

    @property
    def num_train(self) -> int:
        return int(self.data.train_mask.sum())


@dataclass
class FederatedGraphData:
    """All clients' partitions plus the facts every client model needs."""

    clients: list[ClientGraph]
    domains: list[str]
    num_features: int
    num_classes: int
    meta: dict = field(default_factory=dict)


def default_data_dir() -> Path:
    """The per-user cache used when neither ``--data-dir`` nor ``FGL_DATA_DIR`` is set."""
    return Path.home() / ".cache" / "fgl-ray" / "datasets"
