"""Multimodal node graphs: two modality feature matrices per node and an availability mask.

A multimodal graph is a node-task ``Data`` whose ``x`` packs the modalities and their
availability as ``[x_visual | x_text | a_visual | a_text]`` (:func:`pack`), so every node-task
pipeline (partitioning, splits, clients, the Ray transport) carries it unchanged; the
multimodal backbone (``mm_gnn``) splits it again with the widths the data reports
(``modality_dims``). A missing modality's block holds zeros (the placeholder) and its bit 0.

Sources:

* :func:`generate_multimodal` (``synthetic-mm``, needs no files): class-conditioned latent
  semantics, a part shared by both modalities and a part private to each (``u = mu_y +
  latent_noise * eps`` for each part, the shared part's noise common to the node's two
  modalities); each modality is its own nonlinear map of ``[u_shared | u_m]`` (``tanh(2 [u_s | u_m]
  A_m) B_m``) plus its own noise. So each modality is informative but imperfect, the two together
  know more than either, and they are correlated through the class and through the node's shared
  latent (a missing modality can partly be inferred from the other). Nodes live in local
  communities whose class mixes differ (Dirichlet), and edges mostly stay inside a community and
  join nodes of one class, so Louvain finds the communities and its clients differ in their
  labels. The defaults were fixed before any FedMGS run, by centralised logistic
  regression on complete data (``tests/data/test_multimodal.py`` checks the properties).
* two-view real graphs (``cora-mm``, ``citeseer-mm``): the bag-of-words as the text modality and
  a 128-dim NetMF embedding of the whole graph as the second ("visual") modality, both real and
  correlated through the class (for link prediction, of the whole graph without any client's
  held-out edges: :func:`link_prediction_view`). A stand-in for the paper's image-text graphs,
  which are not obtainable offline.
* the on-disk format (``mm:<name>``) for real multimodal graphs such as the paper's Amazon sets:
  ``<data_dir>/MultimodalGraph/<name>/`` holding ``nodes.csv`` (columns ``node`` 0..n-1 and
  ``label``, -1 where unknown), ``edges.csv`` (``src,dst``, node ids; read as undirected),
  ``visual.npy`` and ``text.npy`` (float ``[n, d_m]`` embedding matrices, rows in node order).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import remove_self_loops, to_undirected

from fgl_ray.data.embeddings import structural_features
from fgl_ray.data.splits import client_generator, split_edges
from fgl_ray.data.types import ClientGraph, DomainGraph

MODALITIES = ("visual", "text")


def pack(visual: Tensor, text: Tensor, available: Tensor | None = None) -> Tensor:
    """``[visual | text | a_visual | a_text]`` (float32); all modalities observed by default."""
    if available is None:
        available = torch.ones(visual.shape[0], 2, dtype=torch.bool)
    return torch.cat([visual.float(), text.float(), available.float()], dim=1)


def unpack(x: Tensor, dims: tuple[int, int]) -> tuple[Tensor, Tensor, Tensor]:
    """``(visual [n, d_v], text [n, d_t], available [n, 2] bool)`` of a packed matrix."""
    visual_dim, text_dim = dims
    if x.shape[1] != visual_dim + text_dim + 2:
        raise ValueError(f"packed multimodal features have {x.shape[1]} columns, expected {visual_dim} + "
                         f"{text_dim} + 2 for modality widths {dims}")
    return x[:, :visual_dim], x[:, visual_dim:visual_dim + text_dim], x[:, visual_dim + text_dim:] > 0.5


def hide_modality(x: Tensor, dims: tuple[int, int], modality: int, rows: Tensor) -> Tensor:
    """A copy of packed ``x`` in which ``rows`` (a node mask) miss ``modality`` (0 visual, 1 text):
    its block holds the placeholder (zeros) and its availability bit is 0, as in missing data."""
    visual, text, available = unpack(x, dims)
    blocks, available = [visual.clone(), text.clone()], available.clone()
    blocks[modality][rows] = 0.0
    available[rows, modality] = False
    return pack(*blocks, available)


class MultimodalOptions(BaseModel):
    """Knobs of :func:`generate_multimodal` (the config's ``synthetic`` mapping for ``synthetic-mm``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_nodes: int = Field(3000, ge=50, description="nodes")
    num_classes: int = Field(6, ge=2, description="classes")
    latent_dim: int = Field(16, ge=2, description="width of the shared latent part and of each private part")
    visual_dim: int = Field(64, ge=2, description="width of the visual modality")
    text_dim: int = Field(64, ge=2, description="width of the text modality")
    class_separation: float = Field(1.5, gt=0, description="norm of each class's latent mean")
    latent_noise: float = Field(1.0, ge=0, description="node-specific noise of each latent part")
    visual_noise: float = Field(0.4, ge=0, description="noise of the visual modality")
    text_noise: float = Field(0.3, ge=0, description="noise of the text modality")
    mean_degree: float = Field(8.0, gt=0, description="mean degree")
    homophily: float = Field(0.75, ge=0, le=1, description="share of intra-class edges")
    communities: int = Field(20, ge=1, description="local communities (what Louvain recovers as clients)")
    locality: float = Field(0.85, ge=0, le=1, description="share of edges inside a community")
    community_alpha: float = Field(1.0, gt=0, description="Dirichlet concentration of each community's classes")


def generate_multimodal(options: MultimodalOptions, seed: int) -> list[DomainGraph]:
    """One multimodal graph, deterministic from ``seed`` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    n, classes, width = options.num_nodes, options.num_classes, options.latent_dim
    community = rng.integers(options.communities, size=n)
    mix = rng.dirichlet(np.full(classes, options.community_alpha), size=options.communities)
    y = np.array([rng.choice(classes, p=mix[c]) for c in community])
    y[rng.choice(n, size=classes, replace=False)] = np.arange(classes)   # every class occurs

    def latent() -> np.ndarray:
        means = rng.standard_normal((classes, width))
        means *= options.class_separation / np.linalg.norm(means, axis=1, keepdims=True)
        return means[y] + options.latent_noise * rng.standard_normal((n, width))

    shared = latent()
    views = []
    for dim, noise in ((options.visual_dim, options.visual_noise), (options.text_dim, options.text_noise)):
        own = np.hstack([shared, latent()])
        hidden = rng.standard_normal((2 * width, dim)) / np.sqrt(2 * width)
        mix = rng.standard_normal((dim, dim)) / np.sqrt(dim)
        views.append(np.tanh(2.0 * own @ hidden) @ mix + noise * rng.standard_normal((n, dim)))
    edge_index = community_edges(rng, y, community, round(n * options.mean_degree / 2), options.homophily,
                                 options.locality)
    data = Data(x=pack(torch.tensor(views[0]), torch.tensor(views[1])), edge_index=edge_index,
                y=torch.tensor(y, dtype=torch.long))
    return [DomainGraph("synthetic-mm", data, modality_dims=(options.visual_dim, options.text_dim))]


def community_edges(rng: np.random.Generator, y: np.ndarray, community: np.ndarray, num_edges: int,
                    homophily: float, locality: float) -> Tensor:
    """``num_edges`` undirected edges: a share ``locality`` stays inside the source's community, and
    inside the chosen pool a share ``homophily`` joins two nodes of one class (when the pool has one)."""
    n = len(y)
    members = {c: np.flatnonzero(community == c) for c in np.unique(community)}
    pairs = []
    for source, local, same in zip(rng.integers(n, size=num_edges), rng.random(num_edges) < locality,
                                   rng.random(num_edges) < homophily):
        pool = members[community[source]] if local else np.arange(n)
        matching = pool[(y[pool] == y[source]) == same]
        candidates = matching if matching.size else pool
        pairs.append((source, candidates[rng.integers(candidates.size)]))
    edge_index = torch.tensor(np.array(pairs).T, dtype=torch.long)
    edge_index, _ = remove_self_loops(edge_index)
    return to_undirected(edge_index, num_nodes=n)


def two_view(graph: DomainGraph, structure: Tensor) -> DomainGraph:
    """A real graph as two views: its own features as text, ``structure`` [n, d] as the second view."""
    data = Data(x=pack(structure, graph.data.x), edge_index=graph.data.edge_index, y=graph.data.y)
    return DomainGraph(f"{graph.name}-mm", data, modality_dims=(structure.shape[1], graph.data.x.shape[1]))


def link_prediction_view(graph: Data, clients: Sequence[ClientGraph], nodes: Sequence[Tensor], width: int,
                         split: tuple[float, float, float], data_seed: int) -> list[ClientGraph]:
    """Two-view link prediction: ``clients`` (numbered as ``nodes``, their global node ids) with the
    structure view, the first ``width`` columns, re-embedded from the whole graph ``graph`` minus
    every client's validation and test edges (:func:`~fgl_ray.data.splits.split_edges`, seeded
    as the task seeds it). Held-out edges never shape the features that score them, and every
    client's view shares one basis, as a fixed modality encoder's would."""
    held_out = []
    for client, ids in zip(clients, nodes):
        _, val, test = split_edges(client.data.edge_index, split, client_generator(data_seed, client.client_id))
        held_out.append(ids[torch.cat([val, test], dim=1)])
    removed = torch.cat(held_out, dim=1)
    num_nodes = graph.num_nodes
    keys = torch.cat([removed[0] * num_nodes + removed[1], removed[1] * num_nodes + removed[0]])
    kept = graph.edge_index[:, ~torch.isin(graph.edge_index[0] * num_nodes + graph.edge_index[1], keys)]
    view = structural_features(kept, num_nodes, width)
    result = []
    for client, ids in zip(clients, nodes):
        data = client.data.clone()
        data.x = torch.cat([view[ids], data.x[:, width:]], dim=1)
        result.append(replace(client, data=data))
    return result
