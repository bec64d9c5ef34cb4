"""GCFL and GCFL+ (Xie et al., "Federated Graph Classification over Non-IID Graphs", NeurIPS 2021).

The server keeps one model per cluster of clients, starting from one cluster of all clients
(key ``global``). Clients train as usual from their cluster's model; every round, with ``dW_i
= -lr * u_i`` the change of client ``i``'s SHARED weights (the descent-update convention), the
server

1. tests every cluster that has more than two clients, from round ``warmup_rounds`` on (0-based;
   GCFL's ``c_round > 20`` with 1-based rounds): it splits when ``||mean_i dW_i|| < eps1`` (the
   unweighted mean: the cluster is near a stationary point of its joint objective) and
   ``max_i ||dW_i|| > eps2`` (yet some clients still move a lot). The authors' absolute ``eps``
   fit their datasets only (elsewhere they may never hold, or hold inside clusters whose clients
   agree); ``criteria: relative`` (the default where the dataset has no authors' values and no
   ``eps`` is given) asks instead ``||mean_i dW_i|| < rel_mean * mean_i ||dW_i||`` (the members'
   changes cancel) and ``max_i ||dW_i|| > rel_max`` times the median over the warm-up rounds of
   the largest ``||dW_i||`` (they still move as in the warm-up);
2. bipartitions a splitting cluster by a Stoer–Wagner minimum cut (networkx) of the complete
   graph over its clients weighted by
   * GCFL: the pairwise cosine similarity of ``dW``, made non-negative as Stoer–Wagner needs:
     ``cut_weights: shift`` (default) subtracts the smallest off-diagonal similarity, so the
     least similar pair gets weight 0; ``plus_one`` adds 1 (the authors' code). Every cut gains
     the added constant times its edge count, so a large constant favours cutting off a single
     client: ``benchmarks/gcfl_cut.py`` measures how often each recovers planted groups;
   * GCFL+: ``max(D) - D`` over the DTW distances ``D`` (dtaidistance) of the clients' last
     ``seq_length`` norms, split only when every client of the cluster has that many;
     ``sequence: gradient_norm`` (default, the authors' ``run_gcflplus``) takes the norm of the
     shared parameters' gradient at the client's last local step, uploaded as a declared
     one-number statistic; ``update_norm`` takes ``||dW_i||`` (their ``gcflplus_dWs``), which
     under Adam hardly depends on the scale of a client's gradients; ``standardize`` divides
     each sequence by its standard deviation first (the paper's Appendix D); after any split
     every sequence restarts;
3. aggregates inside each (new) cluster: ``W_c = W_old + sum_j n_j dW_j / sum_j n_j``, i.e. the
   configured aggregator (``mean`` gives exactly this) over the cluster's updates, from the
   model the cluster's clients trained from. Both halves of a split start from the parent's model.

Only the shared parameters take part (for GIN the convolutions; embedding and readout stay with
each client). A cluster is split only when all its clients sent an update this round (GCFL
samples every client; with ``fraction_fit < 1`` splits become rare). Server optimizers with one
state for the federation (FedAdam, FedYogi, FedAdagrad) are refused: the clusters' steps would
mix. ``eps1``, ``eps2`` and ``seq_length`` default to the issue's values for
the dataset (GCFL's code), else ``0.05, 0.1, 5``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal, Optional, Sequence

import numpy as np
import torch
from pydantic import Field
from torch import Tensor

from fgl_ray.algorithms.base import ALGORITHMS, Algorithm
from fgl_ray.messages import GLOBAL, ClientUpdate, cluster_key
from fgl_ray.params import shared_parameters

#: (eps1, eps2, seq_length) by dataset, from GCFL's code; other datasets get FALLBACK_CRITERIA.
DATASET_CRITERIA = {
    "tu-proteins": (0.03, 0.06, 10), "tu-imdb-binary": (0.025, 0.045, 5), "tu-nci1": (0.04, 0.08, 5),
    "tu-molecules": (0.07, 0.28, 5), "tu-biochem": (0.07, 0.35, 5), "tu-mix": (0.08, 0.4, 5),
}
FALLBACK_CRITERIA = (0.05, 0.1, 5)
#: GCFL+'s uploaded statistic under ``sequence: gradient_norm``.
GRADIENT_NORM = "gradient_norm"


def update_norms(changes: Tensor) -> tuple[float, float]:
    """``(||mean_i dW_i||, max_i ||dW_i||)`` of stacked weight changes ``[K, P]``."""
    return float(changes.mean(dim=0).norm()), float(changes.norm(dim=1).max())


def cosine_similarities(changes: Tensor) -> np.ndarray:
    """Pairwise cosine similarity of the rows of ``changes`` (``[K, K]``; zero rows give 0)."""
    unit = torch.nn.functional.normalize(changes.double(), dim=1)
    return (unit @ unit.T).numpy()


def dtw_distances(sequences: Sequence[Sequence[float]], standardize: bool = False) -> np.ndarray:
    """Pairwise DTW distances (dtaidistance) of equally long sequences (``[K, K]``)."""
    from dtaidistance import dtw   # server side only: client workers never import it

    series = np.asarray(sequences, dtype=np.float64)
    if standardize:
        series = series / np.maximum(series.std(axis=1, keepdims=True), 1e-12)
    return np.asarray(dtw.distance_matrix(series))


def min_cut_bipartition(weights: np.ndarray, members: Sequence[int]) -> tuple[list[int], list[int]]:
    """The Stoer–Wagner minimum cut of the complete graph over ``members`` with edge weights
    ``weights`` (``[K, K]``, symmetric, non-negative; the diagonal is ignored), as two sorted lists."""
    import networkx as nx   # server side only: client workers never import it

    graph = nx.Graph()
    for i in range(len(members)):
        for j in range(i + 1, len(members)):
            graph.add_edge(i, j, weight=float(weights[i, j]))
    _, (left, right) = nx.stoer_wagner(graph)
    first, second = sorted(members[i] for i in left), sorted(members[i] for i in right)
    return (first, second) if first[0] < second[0] else (second, first)


def similarity_weights(changes: Tensor, reading: str = "shift") -> np.ndarray:
    """GCFL's cut weights: the cosine similarities of the rows of ``changes`` minus their smallest
    off-diagonal value (``shift``), or plus one (``plus_one``, the authors' code)."""
    similarity = cosine_similarities(changes)
    if reading == "plus_one":
        return similarity + 1.0
    off_diagonal = similarity[~np.eye(len(similarity), dtype=bool)]
    return similarity - off_diagonal.min()


@ALGORITHMS.register("gcfl")
class GCFL(Algorithm):
    """Clustered FL: split clusters by update-norm criteria and a min cut of update similarities."""

    clustered = True

    class Options(Algorithm.Options):
        eps1: Optional[float] = Field(None, gt=0.0, description="split when ||mean dW|| < eps1 (default: by dataset)")
        eps2: Optional[float] = Field(None, gt=0.0, description="... and max ||dW|| > eps2 (default: by dataset)")
        warmup_rounds: int = Field(20, ge=0, description="no split before this (0-based) round")
        criteria: Literal["auto", "absolute", "relative"] = Field(
            "auto", description="absolute: eps1/eps2 (the authors'); relative: rel_mean/rel_max, which scale with "
                                "the data; auto: absolute when eps1/eps2 are set or the dataset has the authors' "
                                "values, else relative")
        rel_mean: float = Field(0.5, gt=0.0, lt=1.0, description="relative: split when ||mean dW|| < rel_mean * "
                                                                 "the members' mean ||dW_i|| (their changes cancel)")
        rel_max: float = Field(0.5, ge=0.0, description="... and max ||dW_i|| > rel_max * the median over the "
                                                        "warm-up rounds of the largest ||dW_i|| (they still move)")
        cut_weights: Literal["shift", "plus_one"] = Field(
            "shift", description="min-cut weights: cosine minus its smallest off-diagonal value, or cosine + 1 "
                                 "(the authors' code)")

    @classmethod
    def never_split_advice(cls, options: dict) -> str:
        """The run's warm-up, and the options that set the split criteria."""
        return (f"no split is tested before round {cls.Options(**options).warmup_rounds} (warmup_rounds); after "
                "it, the split criteria may not fit this data: set them with --algorithm-options (eps1/eps2, or "
                "criteria: relative with rel_mean/rel_max; tune_configs/gcfl_eps.yaml is a grid over eps1/eps2)")

    def defaults(self) -> tuple[float, float, int]:
        """The dataset's ``(eps1, eps2, seq_length)``."""
        return DATASET_CRITERIA.get(self.config.dataset, FALLBACK_CRITERIA)

    def criteria(self) -> tuple[float, float]:
        """``(eps1, eps2)``: the options, else the dataset's defaults."""
        eps1, eps2, _ = self.defaults()
        return self.options.eps1 or eps1, self.options.eps2 or eps2

    @property
    def relative(self) -> bool:
        """Whether the split criteria scale with the data (see ``criteria``)."""
        if self.options.criteria != "auto":
            return self.options.criteria == "relative"
        return (self.options.eps1 is None and self.options.eps2 is None
                and self.config.dataset not in DATASET_CRITERIA)

    # ------------------------------------------------------------------ server side
    def setup_server(self, server) -> None:
        """One cluster of every client, on the initial global model."""
        self.clusters: dict[str, list[int]] = {GLOBAL: list(server.client_ids)}
        self.next_cluster = 1
        self.splits: list[dict] = []
        self.warmup_norms: list[float] = []   # the largest ||dW_i|| of each warm-up round (relative criteria)

    def aggregate(self, server, updates: Sequence[ClientUpdate]) -> None:
        """Splits the clusters that meet the criteria, then aggregates inside every cluster."""
        changes = {u.client_id: -self.config.lr * u.update for u in updates}
        if server.round_index < self.options.warmup_rounds and changes:
            self.warmup_norms.append(update_norms(torch.stack(list(changes.values())))[1])
        self.observe(updates, changes)
        for key, members in list(self.clusters.items()):
            if all(c in changes for c in members) and self.should_split(server.round_index, members, changes):
                self.split(server, key, self.bipartition(members, changes))
        cluster_of = {c: key for key, members in self.clusters.items() for c in members}
        server.assignment = dict(cluster_of)
        server.aggregate_with_aggregator([_with_key(u, cluster_of[u.client_id]) for u in updates])

    def observe(self, updates: Sequence[ClientUpdate], changes: dict[int, Tensor]) -> None:
        """Records what the split rule needs from this round's updates (GCFL: nothing)."""

    def should_split(self, round_index: int, members: list[int], changes: dict[int, Tensor]) -> bool:
        """GCFL's criteria on one cluster whose clients all sent an update."""
        if round_index < self.options.warmup_rounds or len(members) <= 2:
            return False
        stacked = torch.stack([changes[c] for c in members])
        mean_norm, max_norm = update_norms(stacked)
        if self.relative:
            moving = float(np.median(self.warmup_norms)) if self.warmup_norms else 0.0
            return (mean_norm < self.options.rel_mean * float(stacked.norm(dim=1).mean())
                    and max_norm > self.options.rel_max * moving)
        eps1, eps2 = self.criteria()
        return mean_norm < eps1 and max_norm > eps2

    def bipartition(self, members: list[int], changes: dict[int, Tensor]) -> tuple[list[int], list[int]]:
        """The min cut of the cosine similarities of the members' weight changes (``cut_weights``)."""
        weights = similarity_weights(torch.stack([changes[c] for c in members]), self.options.cut_weights)
        return min_cut_bipartition(weights, members)

    def split(self, server, key: str, halves: tuple[list[int], list[int]]) -> None:
        """Replaces cluster ``key`` by two new clusters that start from its model."""
        parent = self.clusters.pop(key)
        model = server.models[key] if key == GLOBAL else server.models.pop(key)
        children = []
        for half in halves:
            child = cluster_key(self.next_cluster)
            self.next_cluster += 1
            self.clusters[child] = half
            server.models[child] = model
            children.append(child)
        self.splits.append({"round": server.round_index, "parent": key, "members": parent,
                            "children": dict(zip(children, halves))})


@ALGORITHMS.register("gcfl_plus")
class GCFLPlus(GCFL):
    """GCFL with clusters cut by DTW distances of each client's update-norm sequence."""

    class Options(GCFL.Options):
        seq_length: Optional[int] = Field(None, ge=2, description="norms per client needed to split "
                                                                  "(default: by dataset)")
        standardize: bool = Field(False, description="divide each norm sequence by its std before DTW")
        sequence: Literal["gradient_norm", "update_norm"] = Field(
            "gradient_norm", description="the DTW sequences: norm of the shared gradient at the last local step "
                                         "(the authors' GCFL+) or of the round's weight change ||dW||")

    # ------------------------------------------------------------------ client side
    def upload(self, ctx) -> dict[str, Tensor]:
        """``gradient_norm``: the norm of the shared parameters' gradient at the last local step."""
        if self.options.sequence != "gradient_norm":
            return {}
        grads = [p.grad.detach().flatten() for p in shared_parameters(ctx.model) if p.grad is not None]
        norm = torch.cat(grads).norm() if grads else torch.zeros(())
        return {GRADIENT_NORM: norm.reshape(1)}

    def declared_stats(self, num_classes: int, hidden: int, num_features: int) -> dict[str, tuple[int, ...]]:
        return {GRADIENT_NORM: (1,)} if self.options.sequence == "gradient_norm" else {}

    # ------------------------------------------------------------------ server side
    def setup_server(self, server) -> None:
        super().setup_server(server)
        self.sequences: dict[int, list[float]] = {c: [] for c in server.client_ids}

    def sequence_length(self) -> int:
        """``seq_length``: the option, else the dataset's default."""
        return self.options.seq_length or self.defaults()[2]

    def observe(self, updates: Sequence[ClientUpdate], changes: dict[int, Tensor]) -> None:
        for update in updates:
            norm = (update.stats[GRADIENT_NORM] if self.options.sequence == "gradient_norm"
                    else changes[update.client_id].norm())
            self.sequences[update.client_id].append(float(norm))

    def should_split(self, round_index: int, members: list[int], changes: dict[int, Tensor]) -> bool:
        return (super().should_split(round_index, members, changes)
                and all(len(self.sequences[c]) >= self.sequence_length() for c in members))

    def bipartition(self, members: list[int], changes: dict[int, Tensor]) -> tuple[list[int], list[int]]:
        length = self.sequence_length()
        distances = dtw_distances([self.sequences[c][-length:] for c in members], self.options.standardize)
        return min_cut_bipartition(distances.max() - distances, members)

    def split(self, server, key: str, halves: tuple[list[int], list[int]]) -> None:
        """Splits, then restarts every client's sequence."""
        super().split(server, key, halves)
        self.sequences = {c: [] for c in self.sequences}


def _with_key(update: ClientUpdate, key: str) -> ClientUpdate:
    """The update re-addressed to cluster ``key`` (the model it trained from, or its split child)."""
    return replace(update, model_key=key)
