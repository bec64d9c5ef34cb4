"""FGGP (Wan et al., "Federated Graph Learning under Domain Shift with Generalizable Prototypes", AAAI 2024).

Client, each local step (full batch), with ``h`` the task's representations and ``p`` the class
probabilities of the original graph ``G``:

* a second view ``G2``: every ``knn_frequency`` rounds the client links each node to its
  ``neighbours`` nearest nodes (cosine) under the global model received that round and joins these
  edges to its own (``A``, self-loops included). A learnable edge generator (GAug; two dense GCN
  layers on ``A``, ``S = H H^T``) samples ``G2`` from ``0.5 S / max S + 0.5 A`` (the hard value of a
  relaxed Bernoulli, i.e. a Bernoulli draw; symmetrised) and is trained to reconstruct ``A``
  (``L_rec``: weighted binary cross-entropy of ``S`` against ``A``, GAug's weights);
* ``CE(G) + CE(G2)`` on the training nodes;
* prototype alignment ``L_pa`` (temperature 0.5): per class, the confidence-weighted mean of ``h``
  over all nodes (a training node counts with its label and weight 1, any other with its predicted
  class and its top probability) on ``G`` and on ``G2``; each class's pair is a positive, the other
  classes' prototypes of both views its negatives;
* ``L_global`` (InfoNCE, temperature 0.02): each training node against the server's clustered
  prototypes, its own class's clusters the positives.

    loss = CE(G) + CE(G2) + L_pa + L_rec + L_global     (each weight an option; all four at 0: FedAvg)

It uploads the confidence-weighted prototypes ``[C, d]`` (after training, dropout off) and their
weights ``[C]``. The server aggregates the model with the configured aggregator and clusters each
class's prototypes with FINCH (cosine, its coarsest level; cluster centres are member means): at most one
centre per client, so the bank ``[C, clients, d]`` has a fixed size. The centres also enter a
per-class first-in-first-out bank of ``bank_size`` slots that survives rounds; a client predicts by
a ``k``-nearest-neighbour vote over it (cosine, top ``knn``, weights ``softmax(sim / 0.1)``) on the
global model's representations (``predict: classifier`` uses the classifier instead; so does a
run before any bank exists).

From the authors' code (``GuanchengWan/FGGP``) where the paper is silent: the kNN graph (k = 3,
cosine, directed), GAug's edge probabilities and loss weights, the alignment loss, the prediction
rule and its temperature, the loss weights of 1. Deviations, each noted there too: the second view
enters the backbone as the sampled edge list (its forward is the authors' hard sample, so only the
straight-through gradient from the losses on ``G2`` into the edge generator is dropped: the backbones
take edge lists); ``L_global`` is the paper's InfoNCE with the clustered prototypes (T = 0.02),
which the authors' code leaves as a stub (``global_weight: 0`` is their code); prototypes are
keyed by class (their code keys by position); the bank keeps per-class slots and starts empty
(their shared ring starts with random vectors labelled 0); the classifier is aggregated like every
layer (their code resets it to its initial weights each round); the edge generator stays with its
client (their code averages it with the model, of which it is a part there; here the backbone is
any registered model, and the generator's first layer is as wide as the features). The authors' optimiser settings
(SGD, lr 0.003, momentum 0.9, 6 local epochs, hidden 128) are the run's, not this algorithm's.
Their PMLP-GCN propagates in training as well (a GCN with batch norm), so FGGP sets
``propagate_in_training: true`` on ``pmlp_gcn`` (:attr:`model_defaults`): with the paper's PMLP,
which trains as an MLP, ``G2`` would not change the representations and the bank (prototypes of the
training phase) would be queried in another space (evaluation propagates); ``--model-options
"{propagate_in_training: false}"`` still gives that. Smaller departures: ``knn`` 30 and
``bank_size`` 10 are their command-line defaults (their runs set 20 on citation graphs, 40 and a
queue of 20 on Twitch, 100 on arxiv; with two classes and a bank of 10 the vote of 30 covers the
whole bank, as 40 covers their 40 slots); ``knn_frequency`` 10 is their citation and Twitch setting
(default 20, arxiv 50); the kNN graph and the uploaded prototypes are computed with dropout off
(theirs on, and their prototypes take the labels from before the last step); the classifier of
``G2`` runs on the sampled edges (theirs on the unsampled joined graph); ``L_global`` is InfoNCE
alone (their FPL adds an MSE to the class mean; their FGGP leaves the loss empty); the model
average weights clients by training nodes (theirs by all nodes).
OpenFGL's port predicts with the classifier and never uses the clusters. The edge generator is
dense in the client's node count (``augmentor: false`` uses the joined graph as ``G2`` and drops
``L_rec``).
"""

from __future__ import annotations

import copy
from typing import Literal, Sequence

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from fgl_ray.algorithms.base import ALGORITHMS, NODE_BACKBONES, PMLP_PROPAGATES_IN_TRAINING, Algorithm, ClientContext
from fgl_ray.algorithms.finch import finch
from fgl_ray.algorithms.prototypes import training_phase
from fgl_ray.messages import Broadcast, ClientUpdate

#: Temperature of the prediction vote over the prototype bank (the authors').
VOTE_TEMPERATURE = 0.1
#: Largest client the dense edge generator takes (a few n x n float matrices: about 8 GB at this size).
MAX_DENSE_NODES = 20_000


def knn_edges(h: Tensor, k: int) -> Tensor:
    """``[2, n*k]`` edges from each node to its ``k`` nearest other nodes by cosine similarity."""
    unit = F.normalize(h, dim=1)
    similarity = unit @ unit.T
    similarity.fill_diagonal_(-float("inf"))
    k = min(k, h.shape[0] - 1)
    nearest = similarity.topk(k, dim=1).indices
    return torch.stack([torch.arange(h.shape[0], device=h.device).repeat_interleave(k), nearest.flatten()])


def dense_adjacency(edge_index: Tensor, n: int) -> Tensor:
    """The 0/1 matrix of ``edge_index`` with self-loops."""
    adjacency = torch.eye(n, device=edge_index.device)
    adjacency[edge_index[0], edge_index[1]] = 1.0
    return adjacency


def symmetric_normalised(matrix: Tensor) -> Tensor:
    """``D^-1/2 M D^-1/2`` of a dense matrix, ``D`` its row sums."""
    degree = matrix.sum(1).rsqrt()
    return degree.unsqueeze(1) * matrix * degree.unsqueeze(0)


class EdgeGenerator(nn.Module):
    """GAug's edge model: ``H = relu(A_n (A_n X W1) W2)``, logits ``S = H H^T`` (``A_n`` symmetric-normalised)."""

    def __init__(self, in_dim: int, hidden: int) -> None:
        super().__init__()
        self.first = nn.Linear(in_dim, hidden, bias=False)
        self.second = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x: Tensor, adjacency: Tensor) -> Tensor:
        normalised = symmetric_normalised(adjacency)
        h = normalised @ self.first(x.to_dense() if x.layout != torch.strided else x)
        h = torch.relu(normalised @ self.second(h))
        return h @ h.T


def sample_view(logits: Tensor, adjacency: Tensor) -> Tensor:
    """Edges ``[2, m]`` of a symmetric hard sample of ``0.5 S / max S + 0.5 A``: the authors' relaxed
    Bernoulli thresholded at 0.5 is a Bernoulli draw of the same probabilities, whatever its temperature."""
    probs = (0.5 * logits.detach() / (logits.detach().max() + 1e-6) + 0.5 * adjacency).clamp(0.0, 1.0)
    upper = torch.bernoulli(probs).bool().triu(1)
    return (upper | upper.T).nonzero().T


def reconstruction_loss(logits: Tensor, adjacency: Tensor) -> Tensor:
    """GAug's ``norm_w * BCE(S, A)`` with positives weighted ``(n^2 - |A|) / |A|``."""
    total, edges = adjacency.numel(), adjacency.sum()
    weight = total / (2 * (total - edges))
    return weight * F.binary_cross_entropy_with_logits(logits, adjacency, pos_weight=(total - edges) / edges)


def weighted_prototypes(h: Tensor, probs: Tensor, train: Tensor, y: Tensor, num_classes: int) -> tuple[Tensor, Tensor]:
    """``(prototypes [C, d], weights [C])``: per class the confidence-weighted mean of ``h`` over all
    nodes (training nodes: their label, weight 1; others: argmax, top probability)."""
    confidence, predicted = probs.max(dim=1)
    label = torch.where(train, y, predicted)
    weight = torch.where(train, torch.ones_like(confidence), confidence)
    sums = h.new_zeros(num_classes, h.shape[1]).index_add_(0, label, weight.unsqueeze(1) * h)
    totals = h.new_zeros(num_classes).index_add_(0, label, weight)
    return sums / (totals.unsqueeze(1) + 1e-6), totals


def alignment_loss(view: Tensor, original: Tensor, temperature: float) -> Tensor:
    """``L_pa``: each class's ``view`` prototype against its ``original`` one, the other classes'
    prototypes of both views the negatives (classes absent from the rows are not passed in)."""
    g, o = F.normalize(view, dim=1), F.normalize(original, dim=1)
    n = g.shape[0]
    if n < 2:
        return view.new_zeros(())
    others = ~torch.eye(n, dtype=torch.bool, device=g.device)
    positive = (g * o).sum(1, keepdim=True)
    negatives = torch.cat([(g @ g.T)[others].view(n, n - 1), (g @ o.T)[others].view(n, n - 1)], dim=1)
    logits = torch.cat([positive, negatives], dim=1) / temperature
    return F.cross_entropy(logits, torch.zeros(n, dtype=torch.long, device=g.device))


def global_prototype_loss(h: Tensor, y: Tensor, bank: Tensor, valid: Tensor, temperature: float) -> Tensor:
    """InfoNCE of each row of ``h`` against the clustered prototypes ``bank [C, K, d]`` (``valid [C, K]``):
    ``-log sum_{own class} exp(cos / T) / sum_{all} exp(cos / T)``; rows whose class has none count 0."""
    centres, labels = bank[valid], valid.nonzero()[:, 0]
    similarity = F.normalize(h, dim=1) @ F.normalize(centres, dim=1).T / temperature
    own = labels.unsqueeze(0) == y.unsqueeze(1)
    has = own.any(dim=1)
    if not bool(has.any()):
        return h.new_zeros(())
    positive = similarity.masked_fill(~own, -float("inf")).logsumexp(dim=1)
    return (similarity.logsumexp(dim=1) - positive)[has].mean()


def knn_vote(h: Tensor, bank: Tensor, valid: Tensor, k: int, num_classes: int) -> Tensor:
    """Log-scores ``[n, C]`` of a top-``k`` cosine vote over the bank, weights ``softmax(sim / 0.1)``."""
    centres, labels = bank[valid], valid.nonzero()[:, 0]
    similarity = F.normalize(h, dim=1) @ F.normalize(centres, dim=1).T
    top, index = similarity.topk(min(k, centres.shape[0]), dim=1)
    weights = torch.softmax(top / VOTE_TEMPERATURE, dim=1)
    scores = h.new_zeros(h.shape[0], num_classes).scatter_add_(1, labels[index], weights)
    return (scores + 1e-5).clamp(max=1.0).log()


@ALGORITHMS.register("fggp")
class FGGP(Algorithm):
    """Generalisable prototypes: a kNN-augmented view, prototype alignment, clustered prototype banks."""

    tasks = ("node-classification",)
    whole_graph = "generates edges and prototypes over the client's whole graph"
    models = NODE_BACKBONES
    #: The authors' PMLP-GCN propagates in training too (a GCN with batch norm): without it the
    #: second view would not change the representations, and the bank would hold MLP prototypes
    #: that the propagating evaluation queries.
    model_defaults = PMLP_PROPAGATES_IN_TRAINING

    class Options(Algorithm.Options):
        neighbours: int = Field(3, ge=1, description="k of the global-knowledge kNN graph")
        knn_frequency: int = Field(10, ge=1, description="rebuild the kNN graph every this many rounds")
        augmentor: bool = Field(True, description="sample the second view with the learnable edge generator")
        align_temperature: float = Field(0.5, gt=0.0, description="temperature of the prototype alignment")
        global_temperature: float = Field(0.02, gt=0.0, description="temperature of the clustered-prototype InfoNCE")
        view_weight: float = Field(1.0, ge=0.0, description="weight of the cross-entropy on the second view")
        align_weight: float = Field(1.0, ge=0.0, description="weight of the prototype alignment")
        reconstruction_weight: float = Field(1.0, ge=0.0, description="weight of the edge generator's loss")
        global_weight: float = Field(1.0, ge=0.0, description="weight of the InfoNCE (0: the authors' code)")
        predict: Literal["knn", "classifier"] = Field("knn", description="vote over the prototype bank, or classify")
        knn: int = Field(30, ge=1, description="k of the prediction vote")
        bank_size: int = Field(10, ge=1, description="slots per class of the prediction bank")

    # ------------------------------------------------------------------ client side
    def setup_client(self, ctx: ClientContext) -> None:
        x = ctx.task.node_inputs(ctx.data)[0]
        if self.options.augmentor and x.shape[0] > MAX_DENSE_NODES:
            raise ValueError(f"FGGP's edge generator is dense in a client's nodes: client {ctx.client_id} has "
                             f"{x.shape[0]} (> {MAX_DENSE_NODES}); use more clients, or algorithm_options "
                             "{augmentor: false} (the joined kNN graph as the second view)")
        ctx.state["fggp_generator"] = EdgeGenerator(x.shape[1], ctx.model.representation_dim).to(ctx.device)

    def receive(self, ctx: ClientContext, broadcast: Broadcast) -> None:
        """Loads the model; rebuilds the joined graph from it every ``knn_frequency`` rounds."""
        super().receive(ctx, broadcast)
        if broadcast.round % self.options.knn_frequency == 0 or "fggp_joined" not in ctx.state:
            data = ctx.data
            with torch.no_grad(), training_phase(ctx.model) as model:        # the model just received
                h = ctx.task.encode(model, data)
            edges = torch.cat([data.edge_index, knn_edges(h, self.options.neighbours)], dim=1)
            ctx.state["fggp_joined"] = torch.unique(edges, dim=1)

    def local_train(self, ctx: ClientContext) -> dict[str, float]:
        """The base loop; the edge generator takes a step, with an optimizer of the same kind, after each
        of the model's."""
        generator = ctx.state["fggp_generator"]
        optimizer = type(ctx.optimizer)(generator.parameters(), **ctx.optimizer.defaults)

        def step_generator(*_) -> None:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        handle = ctx.optimizer.register_step_post_hook(step_generator)
        try:
            return super().local_train(ctx)
        finally:
            handle.remove()

    def objective(self, ctx: ClientContext, batch, z: Tensor, logits: Tensor) -> Tensor:
        """``CE(G) + view * CE(G2) + align * L_pa + reconstruction * L_rec + global * L_global``; a term
        whose weight is 0 is not computed (all four at 0: FedAvg's step)."""
        task, options = ctx.task, self.options
        loss = self.loss(ctx, batch, logits)
        train, y = task.labelled(batch)
        if options.view_weight > 0 or options.align_weight > 0:
            view, rec = self.second_view(ctx, batch, z.shape[0])
            loss = loss + options.reconstruction_weight * rec
            z2 = task.encode(ctx.model, view)
            if options.view_weight > 0:
                loss = loss + options.view_weight * self.loss(ctx, view, task.classify(ctx.model, z2, view))
            if options.align_weight > 0:
                probs = torch.softmax(logits, dim=1)
                original, weights = weighted_prototypes(z, probs, train, y, ctx.num_classes)
                second, _ = weighted_prototypes(z2, probs, train, y, ctx.num_classes)
                present = weights > 0
                loss = loss + options.align_weight * alignment_loss(second[present], original[present],
                                                                    options.align_temperature)
        stats = ctx.server_stats
        if options.global_weight > 0 and "bank" in stats and bool(stats["bank_valid"].any()):
            loss = loss + options.global_weight * global_prototype_loss(
                z[train], y[train], stats["bank"].to(z.device), stats["bank_valid"].to(z.device),
                options.global_temperature)
        return loss

    def second_view(self, ctx: ClientContext, batch, n: int):
        """``(G2, L_rec)``: the generator's sample of the joined graph and its reconstruction loss (the
        joined graph itself and 0 without the generator)."""
        joined, view = ctx.state["fggp_joined"], copy.copy(batch)
        if not self.options.augmentor:
            view.edge_index = joined
            return view, torch.zeros((), device=joined.device)
        adjacency = dense_adjacency(joined, n)
        logits = ctx.state["fggp_generator"](ctx.task.node_inputs(batch)[0], adjacency)
        view.edge_index = sample_view(logits, adjacency)
        return view, reconstruction_loss(logits, adjacency)

    @torch.no_grad()
    def upload(self, ctx: ClientContext) -> dict[str, Tensor]:
        """Confidence-weighted prototypes and their weights (dropout off)."""
        task = ctx.task
        with training_phase(ctx.model) as model:
            z = task.encode(model, ctx.data)
            probs = torch.softmax(task.classify(model, z, ctx.data), dim=1)
        train, y = task.labelled(ctx.data)
        prototypes, weights = weighted_prototypes(z, probs, train, y, ctx.num_classes)
        return {"prototypes": prototypes, "weights": weights}

    def declared_stats(self, num_classes: int, hidden: int, num_features: int) -> dict[str, tuple[int, ...]]:
        return {"prototypes": (num_classes, hidden), "weights": (num_classes,)}

    @torch.no_grad()
    def predict(self, ctx: ClientContext, batch) -> Tensor:
        """A vote over the prototype bank on the model's representations (the classifier without a bank)."""
        stats = ctx.server_stats
        if self.options.predict == "classifier" or "vote_bank" not in stats or not bool(stats["vote_valid"].any()):
            return super().predict(ctx, batch)
        ctx.model.eval()
        z = ctx.task.encode(ctx.model, batch)
        return knn_vote(z, stats["vote_bank"].to(z.device), stats["vote_valid"].to(z.device), self.options.knn,
                        ctx.num_classes)

    # ------------------------------------------------------------------ server side
    def setup_server(self, server) -> None:
        hidden = server.declared["prototypes"][1]
        count = len(server.client_ids)
        self.bank = torch.zeros(server.num_classes, count, hidden)
        self.bank_valid = torch.zeros(server.num_classes, count, dtype=torch.bool)
        self.vote_bank = torch.zeros(server.num_classes, self.options.bank_size, hidden)
        self.vote_valid = torch.zeros(server.num_classes, self.options.bank_size, dtype=torch.bool)
        self.vote_next = [0] * server.num_classes

    def aggregate(self, server, updates: Sequence[ClientUpdate]) -> None:
        """The model by the aggregator; each class's prototypes clustered by FINCH into the banks."""
        server.aggregate_with_aggregator(updates)
        self.bank.zero_()
        self.bank_valid.zero_()
        for c in range(server.num_classes):
            members = [u.stats["prototypes"][c] for u in updates if float(u.stats["weights"][c]) > 0]
            if not members:
                continue
            points = torch.stack(members).double()
            labels = torch.as_tensor(finch(points.numpy())[-1])
            for cluster in range(int(labels.max()) + 1):
                centre = points[labels == cluster].mean(0).to(self.bank.dtype)
                self.bank[c, cluster], self.bank_valid[c, cluster] = centre, True
                slot = self.vote_next[c]
                self.vote_bank[c, slot], self.vote_valid[c, slot] = centre, True
                self.vote_next[c] = (slot + 1) % self.options.bank_size

    def server_stats(self, server) -> dict[str, Tensor]:
        return {"bank": self.bank.clone(), "bank_valid": self.bank_valid.clone(),
                "vote_bank": self.vote_bank.clone(), "vote_valid": self.vote_valid.clone()}
