"""FedSPA (Tan et al., "FedSPA: Generalizable Federated Graph Learning under Homophily
Heterogeneity", CVPR 2025).

Clients (Subgraph Feature Propagation Decoupling, SFPD) train the ``acm_gcn`` backbone
(:mod:`fgl_ray.models.acm`): low-pass, high-pass and MLP channels, the filtered ones split by edge
type, and per-node attention over the seven. ``setup_client`` types every edge from the client's
training labels (homo: both ends training nodes of one class; hetero: of two classes; unknown:
otherwise) and hands the types to the model. Each round a client uploads, besides its update:

* ``energy [1]``: its high-frequency energy, the mean Rayleigh quotient ``x_k^T L x_k / x_k^T x_k``
  of ``L = D - A`` over a random ``feature_fraction`` of the feature columns ``x_k`` (all-zero
  columns skipped, 0 if every sampled column is); ``A`` has one entry per distinct edge and ``D``
  its row sums, as the authors' dense matrices. Drawn once per client, seeded by (seed, client).
* ``fisher_hetero``, ``fisher_homo`` ``[2 * (hidden * (num_layers - 1) + classes)]``: the diagonal
  Fisher information of the attention vectors of each group (the authors' ``fr`` and ``be``
  tensors), the squared gradient of the mean log-likelihood of the labels, in the model's
  parameter order.

The server (Homophily Bias-Driven Aggregation, HBDA) keeps one global model. Each attention group
``g`` takes the weights ``w = softmax(-minmax(d))`` (``exp(-x)`` normalised to sum 1) of
``d_i = sum |F_i^g - mean_j F_j^g|`` over the round's clients; every other tensor takes the same
rule over the homophily bias ``d_i = |S_i - S_bar|``, ``S_bar`` the sample-weighted mean energy of
every client reported so far (``bias: deviation``). Equal statistics give equal weights (the
authors' min-max divides by zero there). The weighted models are spliced tensor by tensor through
``server.layout``, each weighting through ``server.combine``, so clipping and DP noise apply.

With any aggregator other than ``mean`` (``--aggregator fedia``: the paper's "FedIA (repl.)" row)
that aggregator replaces HBDA and clients skip the statistics; ``aggregation: samples`` gives the
sample-weighted mean instead (FedSPA without HBDA), and ``decouple: false`` leaves every edge
unknown (without SFPD); both together are FedAvg with ``acm_gcn``.

The paper's text could not be read here: everything above follows the authors' code
(``OakleyTan/FedSPA``, ``Code/flgo/algorithm/fedspa.py``, ``fedbase.py``, ``benchmark001``), with
these departures. Their aggregation weights the other tensors by the clients' raw energies
``exp(-minmax(S_i))`` because a client attribute named ``radio_diff`` is overwritten by the energy,
while the server computes the deviations ``|S_i - S_bar|`` under the same name and never reads
them; the default follows the name (the bias from the federation's level), ``bias: energy`` is
what their code runs. Their mean weights clients by node count, here by training nodes (their
per-client random split makes these a fixed share). Their server computes each client's Fisher
information on the client's data with every node's label (validation and test included) in
training mode; here the client computes it on its training nodes in evaluation mode
(``fisher_nodes: all`` uses every labelled node, as theirs). Their columns are drawn unseeded,
afresh per client; their weights are computed once over all clients and indexed by position in the
round, which breaks under partial participation; here over the round's participants. Their
normalisation of the differences to sum 1 before the min-max changes nothing and is left out.
Their ACM-GCN drops at 0.1; here the run's ``dropout`` (0.5 by default) applies: set it to 0.1 for theirs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor

from fgl_ray.aggregators.base import sample_weights
from fgl_ray.algorithms.base import ALGORITHMS, Algorithm, ClientContext
from fgl_ray.messages import GLOBAL, ClientUpdate, ModelState
from fgl_ray.models.acm import (
    ATTENTION_GROUPS,
    attention_group,
    attention_size,
    label_edge_types,
)
from fgl_ray.runtime.seeding import derive_seed

COLUMN_SEED = 31          # the tag of the seed that draws a client's feature columns
GATHERED_ENTRIES = 1 << 23  # bounds the edge-by-column blocks of the energy (64 MB in float64)


def high_frequency_energy(x: Tensor, edge_index: Tensor, fraction: float, generator: torch.Generator) -> Tensor:
    """Mean ``x_k^T (D - A) x_k / x_k^T x_k`` over a random ``fraction`` of the columns (non-zero ones)."""
    x = x.to_dense() if x.layout != torch.strided else x
    count = max(1, int(fraction * x.shape[1]))
    columns = torch.randperm(x.shape[1], generator=generator)[:count].to(x.device)
    signal = x[:, columns].double()
    source, target = torch.unique(edge_index, dim=1)
    step = max(1, GATHERED_ENTRIES // max(source.numel(), 1))       # columns per block of gathered edge rows
    quadratic = torch.cat([(signal[source, i:i + step] * (signal[source, i:i + step] - signal[target, i:i + step]))
                           .sum(0) for i in range(0, signal.shape[1], step)])
    norms = signal.square().sum(0)
    kept = norms > 0
    return (quadratic[kept] / norms[kept]).mean() if kept.any() else signal.new_zeros(())


def bias_weights(differences: Tensor) -> Tensor:
    """``exp(-minmax(d))`` normalised to sum 1 (the authors' ``calculate_weights``); equal ``d``: uniform."""
    low, span = differences.min(), differences.max() - differences.min()
    scaled = (differences - low) / span if span > 0 else torch.zeros_like(differences)
    weights = torch.exp(-scaled)
    return weights / weights.sum()


def fisher_differences(fishers: Tensor) -> Tensor:
    """``sum |F_i - mean_j F_j|`` per client (row)."""
    return (fishers - fishers.mean(dim=0)).abs().sum(dim=1)


@ALGORITHMS.register("fedspa")
class FedSPA(Algorithm):
    """Edge-type-decoupled ACM-GCN on clients; Fisher- and homophily-bias-weighted averaging."""

    tasks = ("node-classification",)
    whole_graph = "builds its shared structure statistics from the client's whole graph"
    models = ("acm_gcn",)

    class Options(Algorithm.Options):
        decouple: bool = Field(True, description="SFPD: type edges by the training labels (false: every edge "
                                                 "unknown, the ablation)")
        aggregation: Literal["hbda", "samples"] = Field(
            "hbda", description="hbda: the paper's bias-driven weights; samples: the sample-weighted mean (ablation)")
        bias: Literal["deviation", "energy"] = Field(
            "deviation", description="homophily bias of the non-attention tensors: |S_i - weighted mean S| "
                                     "(the statistic the authors' code names), or S_i itself (what it runs)")
        feature_fraction: float = Field(0.2, gt=0.0, le=1.0, description="share of feature columns in the energy")
        fisher_nodes: Literal["train", "all"] = Field(
            "train", description="labels of the Fisher information: training nodes, or every node (the authors', "
                                 "reads held-out labels)")

    def native(self) -> bool:
        """Whether HBDA aggregates (else the configured aggregator or the sample-weighted mean)."""
        return self.options.aggregation == "hbda" and self.config.aggregator == "mean"

    # ------------------------------------------------------------------ client side
    def setup_client(self, ctx: ClientContext) -> None:
        """Types the client's edges for the model and measures its high-frequency energy."""
        x, edge_index = ctx.task.node_inputs(ctx.data)
        if self.options.decouple:
            train, y = ctx.task.labelled(ctx.data)
            ctx.model.set_edge_types(edge_index, label_edge_types(edge_index, y, train))
        generator = torch.Generator().manual_seed(derive_seed(self.config.seed, COLUMN_SEED, ctx.client_id))
        ctx.state["fedspa_energy"] = high_frequency_energy(x, edge_index, self.options.feature_fraction, generator)

    def fisher(self, ctx: ClientContext) -> dict[str, Tensor]:
        """Per attention group, the squared gradient of the labels' mean log-likelihood (evaluation mode)."""
        task, data, model = ctx.task, ctx.data, ctx.model
        model.eval()
        train, y = task.labelled(data)
        nodes = train if self.options.fisher_nodes == "train" else y >= 0
        log_probs = F.log_softmax(task.classify(model, task.encode(model, data), data)[nodes], dim=1)
        likelihood = log_probs.gather(1, y[nodes].unsqueeze(1)).mean()
        named = {group: [p for n, p in model.named_parameters() if attention_group(n) == group]
                 for group in ATTENTION_GROUPS}
        grads = torch.autograd.grad(likelihood, [p for params in named.values() for p in params])
        out, start = {}, 0
        for group, params in named.items():
            out[group] = torch.cat([g.reshape(-1) for g in grads[start:start + len(params)]]).square()
            start += len(params)
        return out

    def upload(self, ctx: ClientContext) -> dict[str, Tensor]:
        """The energy and the attention groups' Fisher information, when HBDA aggregates."""
        if not self.native():
            return {}
        fisher = self.fisher(ctx)
        return {"energy": ctx.state["fedspa_energy"].reshape(1)} | {f"fisher_{g}": f for g, f in fisher.items()}

    def declared_stats(self, num_classes: int, hidden: int, num_features: int) -> dict[str, tuple[int, ...]]:
        size = attention_size(num_classes, self.config.hidden, self.config.num_layers)
        return {"energy": (1,)} | {f"fisher_{group}": (size,) for group in ATTENTION_GROUPS}

    # ------------------------------------------------------------------ server side
    def setup_server(self, server) -> None:
        self.energies: dict[int, tuple[float, int]] = {}

    def hbda_weights(self, updates: Sequence[ClientUpdate]) -> dict[str, Tensor]:
        """Client weights per part: each attention group by Fisher, ``other`` by homophily bias."""
        energy = torch.tensor([float(u.stats["energy"]) for u in updates], dtype=torch.float64)
        if self.options.bias == "deviation":
            values, counts = (torch.tensor(v, dtype=torch.float64) for v in zip(*self.energies.values()))
            bias = (energy - sample_weights(counts) @ values).abs()
        else:
            bias = energy.abs()
        weights = {"other": bias_weights(bias)}
        for group in ATTENTION_GROUPS:
            fishers = torch.stack([u.stats[f"fisher_{group}"].double() for u in updates])
            weights[group] = bias_weights(fisher_differences(fishers))
        return weights

    def aggregate(self, server, updates: Sequence[ClientUpdate]) -> None:
        """HBDA, tensor by tensor; the configured aggregator unless HBDA is on with ``mean``."""
        if not self.native():
            server.aggregate_with_aggregator(updates)
            return
        self.energies |= {u.client_id: (float(u.stats["energy"]), u.num_samples) for u in updates}
        weights = self.hbda_weights(updates)
        current = server.models[GLOBAL]
        merged = {part: server.combine(GLOBAL, current, updates, w) for part, w in weights.items()}
        params = merged["other"].params.clone()
        for name, part in server.layout.slices().items():
            group = attention_group(name)
            if group is not None:
                params[part] = merged[group].params[part]
        server.models[GLOBAL] = ModelState(params, merged["other"].buffers)
        server.aggregation_weights = {u.client_id: float(w) for u, w in zip(updates, weights["other"])}
