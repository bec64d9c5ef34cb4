"""FedTAD (Zhu et al., "FedTAD: Topology-aware Data-free Knowledge Distillation for Subgraph Federated
Learning", IJCAI 2024).

Clients train the backbone as in FedAvg. Each client also measures how reliable its knowledge of
every class is, from the topology of its subgraph, and uploads that vector (``reliability [C]``):

* a topology-aware embedding of every node, ``h_v = [x_v || p_v]`` (features and topology
  embedding ``p_v``);
* the node's reliability ``r_v = (1 + sum_{u in N(v)} cos(h_v, h_u)) / (1 + |N(v)|)``: how much the
  node resembles its neighbourhood;
* the class-wise reliability ``R_c = sum of r_v over the training nodes of class c`` (so it grows
  with the class's training nodes and with its homophily).

The server first folds the updates into the global model with the configured aggregator (FedAvg
with ``mean``; ``--aggregator fedia`` replaces that step), then distils the participants' trained
models (the teachers: server model minus ``lr * update``, run through one backbone instance with
``torch.func.functional_call``) into it (the student), with the reliability normalised across the
round's participants per class, ``w_kc = R_kc / sum_j R_jc``. A conditional generator (label
embedding ``Embedding(C, C)`` and 32-d noise, then Linear 64, 128, 256 with Tanh each, and a linear
output layer of the feature width) makes ``num_gen`` nodes, labels spread evenly over the classes
(the remainder to the last class), joined by the symmetrised cosine top-``topk`` graph of the
generated features. Each round, ``distill_epochs`` times, with fresh noise:

* ``generator_steps`` Adam steps of the generator on
  ``lam1 * sum_kc w_kc CE_c(teacher_k) - sum_kc w_kc L1_c(student, teacher_k) + lam2 * K * diversity``
  (``CE_c`` / ``L1_c``: the mean over the generated nodes of class ``c`` of the teacher's
  cross-entropy / the mean absolute logit difference; ``diversity = exp(-mean_ij ||z_i - z_j||^2 / 32
  * |g_i - g_j|_1 / F)`` of noises ``z`` and generated features ``g``; teachers detached in the L1);
* ``student_steps`` Adam steps of the student on ``sum_kc w_kc L1_c(student, teacher_k)`` over the
  generated graph (teachers in eval mode, the student in train mode, as the authors run them).

The student's weights become the next global model; the generator, both Adam optimizers (kept
across rounds, as the authors keep them) and the backbone instance live on the algorithm object,
so the server's checkpoint holds them; each round's noise and the student's dropout draw from a
stream seeded by (seed, round), so a resumed run repeats them. ``distill_epochs: 0`` (or
``student_steps: 0``) leaves FedAvg's model as it is.

The paper's method section could not be read here; the formulas above are those of the authors'
code (``zyl24/FedTAD``), whose defaults they keep (5 x (1 generator step, 5 student steps), Adam
1e-3 with weight decay 5e-4 for both, 100 generated nodes, top-5 neighbours, ``lam1 = lam2 = 1``, 5
walk steps). Departures and choices:

* topology embedding ``p_v``: ``topology: rwse`` (default) is the random-walk structural encoding
  the paper's "topology-aware node embeddings" describe: the return probabilities
  ``[P_vv, (P^2)_vv, ..., (P^k)_vv]`` of the random walk ``P = D^-1 (A + I)`` on the subgraph.
  ``walk_ids`` is the authors' code: it builds ``T = (A + I) * pinv(D)`` elementwise (a diagonal
  matrix), so its softmax walks jump to almost uniformly random nodes whatever the edges, and it
  concatenates the ids of the visited nodes of walks of lengths 1..k as numbers; the embedding then
  carries no topology, and the reliability is close to a count of training nodes per class;
* a class whose reliability sums below zero (possible only with signed features) counts as zero,
  and a class no participant holds gets weight zero (the authors' division would give NaN);
* the reliability is computed once when the client is set up (it depends on the data only, as in
  the authors' code) and uploaded every round; weights are normalised over the round's
  participants (the authors' code runs every client every round). ``normalise: classes``
  normalises each client's vector over its classes instead (OpenFGL's port);
* the L1 on logits is the authors' code (their unused ``student_loss`` helper also offers KL);
* the diversity term enters once per teacher (``K`` times), as in the authors' code;
* the generated graph carries no self loops: each backbone adds its own (the authors' graph has
  them, which PyG's GCN replaces by one per node: the same graph);
* FedAvg weights clients by training nodes (the authors' code by all nodes: the same weights
  where every client labels the same share);
* ``mode: representation`` is the authors' ``rep_distill``: the generator makes representations
  of the backbone's ``representation_dim`` and the models run only their classifier layer;
* the authors' GCN applies dropout in eval mode too; here eval mode means no dropout;
* on ``pmlp_gcn`` FedTAD sets ``propagate_in_training: true`` (the authors' GCN propagates in
  training; an MLP-trained student would ignore the pseudo-graph it is distilled on).

With DP noise (``noise_multiplier > 0``) the teachers are the participants' un-noised models, so the
distilled global model does not keep the noised aggregate's guarantee: FedTAD and server-side DP do
not compose.
"""

from __future__ import annotations

from typing import Literal, Sequence

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn
from torch.func import functional_call
from torch_geometric.utils import add_self_loops, degree

from fgl_ray.algorithms.base import ALGORITHMS, NODE_BACKBONES, PMLP_PROPAGATES_IN_TRAINING, Algorithm, ClientContext
from fgl_ray.messages import GLOBAL, ClientUpdate, ModelState
from fgl_ray.models.base import quiet_sparse_warnings
from fgl_ray.params import (
    ParamLayout,
    buffer_vector,
    load_buffer_vector,
    load_trainable_vector,
    shared_parameters,
    trainable_vector,
)
from fgl_ray.runtime.seeding import derive_seed

GENERATOR_HIDDEN = (64, 128, 256)
GATHERED_ENTRIES = 1 << 23    # bounds the edge-by-feature blocks of the per-edge cosine similarities
RWSE_ENTRIES = 1 << 24        # entries of the dense block of random-walk columns propagated at once
SEED_TAG = -7                 # derive_seed part of FedTAD's server-side streams


# ---------------------------------------------------------------------- client side: reliability
def rwse(edge_index: Tensor, num_nodes: int, steps: int) -> Tensor:
    """``[N, steps]``: the return probabilities ``(P^k)_vv``, ``k = 1..steps``, of ``P = D^-1 (A + I)``."""
    index, _ = add_self_loops(edge_index, num_nodes=num_nodes)
    out_degree = degree(index[0], num_nodes)
    with quiet_sparse_warnings():
        walk = torch.sparse_coo_tensor(index, 1.0 / out_degree[index[0]], (num_nodes, num_nodes)).coalesce()
    out = torch.empty(num_nodes, steps)
    block = max(1, RWSE_ENTRIES // max(num_nodes, 1))
    for start in range(0, num_nodes, block):
        nodes = torch.arange(start, min(num_nodes, start + block))
        columns = torch.arange(nodes.numel())
        state = torch.zeros(num_nodes, nodes.numel())
        state[nodes, columns] = 1.0
        for k in range(steps):
            state = torch.sparse.mm(walk, state)
            out[nodes, k] = state[nodes, columns]
    return out


def walk_ids(edge_index: Tensor, num_nodes: int, steps: int) -> Tensor:
    """The authors' topology embedding: the node ids of walks of lengths ``1..steps`` from each node,
    each step staying with probability ``e^(1/d) / (e^(1/d) + N - 1)`` and otherwise jumping to a
    uniformly drawn other node (the softmax of the authors' diagonal ``T``)."""
    d = degree(edge_index[0], num_nodes) + 1.0
    stay = torch.exp(1.0 / d) / (torch.exp(1.0 / d) + num_nodes - 1)
    start = torch.arange(num_nodes)
    columns = []
    for length in range(1, steps + 1):
        current = start
        columns.append(current)
        for _ in range(length - 1):
            other = torch.randint(0, max(num_nodes - 1, 1), (num_nodes,))
            other = other + (other >= current).long()
            current = torch.where(torch.rand(num_nodes) < stay[current], current, other)   # the walker's node
            columns.append(current)
    return torch.stack(columns, dim=1).float()


def node_reliability(h: Tensor, edge_index: Tensor) -> Tensor:
    """``(1 + sum_{u in N(v)} cos(h_v, h_u)) / (1 + |N(v)|)`` for every node ``v`` (``N(v)``: the
    targets of ``v``'s edges)."""
    unit = F.normalize(h, dim=1)
    source, target = edge_index
    total = torch.zeros(h.shape[0], dtype=h.dtype)
    chunk = max(1, GATHERED_ENTRIES // h.shape[1])
    for start in range(0, source.numel(), chunk):
        s, t = source[start:start + chunk], target[start:start + chunk]
        total.index_add_(0, s, (unit[s] * unit[t]).sum(dim=1))
    return (1.0 + total) / (1.0 + degree(source, h.shape[0], dtype=h.dtype))


def class_reliability(x: Tensor, edge_index: Tensor, train: Tensor, y: Tensor, num_classes: int,
                      topology: str, steps: int) -> Tensor:
    """``[C]``: the summed node reliability of each class's training nodes (at least zero)."""
    x = (x.to_dense() if x.layout != torch.strided else x).float().cpu()
    edge_index, train, y = edge_index.cpu(), train.cpu(), y.cpu()
    embed = rwse if topology == "rwse" else walk_ids
    h = torch.cat([x, embed(edge_index, x.shape[0], steps)], dim=1)
    per_node = node_reliability(h, edge_index)
    return torch.zeros(num_classes).index_add_(0, y[train], per_node[train]).clamp_min(0.0)


def normalised_weights(reliability: Tensor, over: str) -> Tensor:
    """``[K, C]`` weights: each class's reliability over the clients' (``clients``), or each client's
    over its classes (``classes``); zero where the sum is zero."""
    total = reliability.sum(dim=0 if over == "clients" else 1, keepdim=True)
    return torch.where(total > 0, reliability / total.clamp_min(torch.finfo(reliability.dtype).tiny), 0.0)


# ---------------------------------------------------------------------- server side: the generated graph
def class_labels(num_gen: int, num_classes: int) -> Tensor:
    """``num_gen`` labels, ``num_gen // C`` per class in order, the remainder to the last class."""
    counts = torch.full((num_classes,), num_gen // num_classes)
    counts[-1] += num_gen - int(counts.sum())
    return torch.repeat_interleave(torch.arange(num_classes), counts)


def knn_graph(x: Tensor, k: int) -> Tensor:
    """Edges of the symmetrised top-``k`` cosine-similarity graph of the rows of ``x`` (each row's
    top ``k`` includes itself, as in the authors' code), without self loops."""
    unit = F.normalize(x, dim=1)
    nearest = (unit @ unit.T).topk(min(k, x.shape[0]), dim=1).indices
    adjacency = torch.zeros(x.shape[0], x.shape[0], dtype=torch.bool)
    adjacency[torch.arange(x.shape[0]).unsqueeze(1), nearest] = True
    adjacency = adjacency | adjacency.T
    adjacency.fill_diagonal_(False)
    return adjacency.nonzero().T


def diversity(z: Tensor, g: Tensor) -> Tensor:
    """``exp(-mean_ij d_z(i, j) * d_g(i, j))`` with ``d_z`` the mean squared and ``d_g`` the mean
    absolute difference: small when nodes from distant noises come out far apart."""
    noise = (z.unsqueeze(1) - z.unsqueeze(0)).pow(2).mean(dim=2)
    generated = torch.cdist(g, g, p=1) / g.shape[1]
    return torch.exp(-(noise * generated).mean())


def class_means(values: Tensor, labels: Tensor, num_classes: int) -> Tensor:
    """``[K, C]``: the mean of ``values [K, N]`` over the nodes of each class (zero for a class
    without nodes)."""
    members = F.one_hot(labels, num_classes).to(values.dtype)
    return values @ members / members.sum(dim=0).clamp_min(1.0)


def discrepancy(student: Tensor, teachers: Tensor, labels: Tensor, weights: Tensor) -> Tensor:
    """``sum_kc w_kc`` times the class-``c`` mean of the nodes' mean absolute difference between the
    student's and teacher ``k``'s outputs (``teachers [K, N, D]``)."""
    per_node = (student.unsqueeze(0) - teachers).abs().mean(dim=2)
    return (weights * class_means(per_node, labels, weights.shape[1])).sum()


def semantic_loss(teachers: Tensor, labels: Tensor, weights: Tensor) -> Tensor:
    """``sum_kc w_kc`` times teacher ``k``'s mean cross-entropy on the generated nodes of class ``c``."""
    k, n, c = teachers.shape
    per_node = F.cross_entropy(teachers.reshape(k * n, c), labels.repeat(k), reduction="none").view(k, n)
    return (weights * class_means(per_node, labels, weights.shape[1])).sum()


class Generator(nn.Module):
    """The authors' conditional generator: ``[Embedding(C, C)(c) || z]`` -> Linear/Tanh 64, 128, 256 -> Linear."""

    def __init__(self, noise_dim: int, num_classes: int, out_dim: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(num_classes, num_classes)
        dims = (noise_dim + num_classes, *GENERATOR_HIDDEN)
        layers = ((nn.Linear(a, b), nn.Tanh()) for a, b in zip(dims[:-1], dims[1:]))
        self.hidden = nn.Sequential(*(layer for pair in layers for layer in pair))
        self.out = nn.Linear(dims[-1], out_dim)

    def forward(self, z: Tensor, labels: Tensor) -> Tensor:
        return self.out(self.hidden(torch.cat([self.embedding(labels), z], dim=1)))


class Backbone(nn.Module):
    """The run's backbone on generated nodes: the whole model, or (``head_only``) its classifier layer."""

    def __init__(self, net: nn.Module, head_only: bool) -> None:
        super().__init__()
        self.net = net
        self.head_only = head_only

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        return self.net.classify(x, edge_index) if self.head_only else self.net(x, edge_index)


@ALGORITHMS.register("fedtad")
class FedTAD(Algorithm):
    """FedAvg (any aggregator), then data-free distillation of the reliability-weighted participants."""

    tasks = ("node-classification",)
    whole_graph = "scores class-wise knowledge reliability over the client's whole graph"
    models = NODE_BACKBONES
    #: The authors' GCN propagates in training: the student's distillation runs over the pseudo-graph.
    model_defaults = PMLP_PROPAGATES_IN_TRAINING

    class Options(Algorithm.Options):
        distill_epochs: int = Field(5, ge=0, description="distillation epochs per round, each a generator and a "
                                                         "student phase (authors' glb_epochs); 0: FedAvg")
        generator_steps: int = Field(1, ge=0, description="generator steps per epoch (authors' it_g)")
        student_steps: int = Field(5, ge=0, description="student steps per epoch (authors' it_d)")
        generator_lr: float = Field(1e-3, gt=0.0, description="Adam learning rate of the generator (lr_g)")
        student_lr: float = Field(1e-3, gt=0.0, description="Adam learning rate of the global model (lr_d)")
        server_weight_decay: float = Field(5e-4, ge=0.0, description="weight decay of both server-side Adams")
        num_gen: int = Field(100, ge=1, description="generated nodes per epoch")
        noise_dim: int = Field(32, ge=1, description="width of the generator's noise")
        topk: int = Field(5, ge=1, description="cosine neighbours of each generated node (itself included)")
        lam1: float = Field(1.0, ge=0.0, description="weight of the teachers' cross-entropy in the generator's loss")
        lam2: float = Field(1.0, ge=0.0, description="weight of the diversity term in the generator's loss")
        mode: Literal["raw", "representation"] = Field(
            "raw", description="raw: generate features, run whole models; representation: generate representations, "
                               "run the classifier layer (authors' rep_distill)")
        topology: Literal["rwse", "walk_ids"] = Field(
            "rwse", description="topology embedding: random-walk return probabilities (the paper), or the ids of "
                                "edge-blind random walks (the authors' code)")
        walk_steps: int = Field(5, ge=1, description="random-walk steps of the topology embedding (max_walk_length)")
        normalise: Literal["clients", "classes"] = Field(
            "clients", description="reliability weights normalised per class over the clients (authors), or per "
                                   "client over the classes (OpenFGL)")

    # ------------------------------------------------------------------ client side
    def setup_client(self, ctx: ClientContext) -> None:
        """The class-wise reliability of the client's subgraph (its data only: computed once)."""
        x, edge_index = ctx.task.node_inputs(ctx.data)
        train, y = ctx.task.labelled(ctx.data)
        ctx.state["fedtad_reliability"] = class_reliability(x, edge_index, train, y, ctx.num_classes,
                                                            self.options.topology, self.options.walk_steps)

    def declared_stats(self, num_classes: int, hidden: int, num_features: int) -> dict[str, tuple[int, ...]]:
        return {"reliability": (num_classes,)}

    def upload(self, ctx: ClientContext) -> dict[str, Tensor]:
        return {"reliability": ctx.state["fedtad_reliability"]}

    # ------------------------------------------------------------------ server side
    def setup_server(self, server) -> None:
        """The backbone instance (student, and teachers through functional calls), generator, optimizers."""
        from fgl_ray.runtime.client import build_config_model

        options, representation = self.options, self.options.mode == "representation"
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(self.config.seed, SEED_TAG))
            net = build_config_model(self.config, server.num_features, server.num_classes)
            width = net.representation_dim if representation else server.num_features
            self.generator = Generator(options.noise_dim, server.num_classes, width)
        self.backbone = Backbone(net, head_only=representation)
        self.layout = ParamLayout.of(net)
        self.buffer_layout = [(name, b.shape) for name, b in net.named_buffers() if b.is_floating_point()]
        self.generator_optimizer = torch.optim.Adam(self.generator.parameters(), lr=options.generator_lr,
                                                    weight_decay=options.server_weight_decay)
        self.student_optimizer = torch.optim.Adam(shared_parameters(net), lr=options.student_lr,
                                                  weight_decay=options.server_weight_decay)

    def named_tensors(self, params: Tensor, buffers: Tensor) -> dict[str, Tensor]:
        """A flat model state as the backbone's named parameters and buffers (for ``functional_call``)."""
        named = {f"net.{name}": params[part].view(shape)
                 for (name, part), shape in zip(self.layout.slices().items(), self.layout.shapes)}
        start = 0
        for name, shape in self.buffer_layout:
            size = int(torch.Size(shape).numel())
            named[f"net.{name}"] = buffers[start:start + size].view(shape)
            start += size
        return named

    def aggregate(self, server, updates: Sequence[ClientUpdate]) -> None:
        """The configured aggregator, then the distillation of the participants into the global model."""
        if not updates:
            return
        lr = self.config.lr
        teachers = [self.named_tensors(server.models[u.model_key].params - lr * u.update, u.buffers) for u in updates]
        reliability = torch.stack([u.stats["reliability"] for u in updates]).float()
        server.aggregate_with_aggregator(updates)
        weights = normalised_weights(reliability, self.options.normalise)
        server.models[GLOBAL] = self.distill(server.models[GLOBAL], teachers, weights, server.round_index)

    def distill(self, state: ModelState, teachers: list[dict[str, Tensor]], weights: Tensor,
                round_index: int) -> ModelState:
        """``state`` after the round's ``distill_epochs`` of generator and student phases."""
        net, options = self.backbone.net, self.options
        load_trainable_vector(net, state.params)
        load_buffer_vector(net, state.buffers)
        labels = class_labels(options.num_gen, weights.shape[1])
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(self.config.seed, SEED_TAG, round_index))
            for _ in range(options.distill_epochs):
                z = torch.randn(options.num_gen, options.noise_dim)
                self.train_generator(z, labels, teachers, weights)
                self.train_student(z, labels, teachers, weights)
        return ModelState(trainable_vector(net).to(state.params.dtype), buffer_vector(net).to(state.buffers.dtype))

    def teacher_outputs(self, teachers: list[dict[str, Tensor]], x: Tensor, edge_index: Tensor) -> Tensor:
        """``[K, N, D]``: every teacher's outputs on the generated graph (backbone in eval mode)."""
        self.backbone.eval()
        return torch.stack([functional_call(self.backbone, teacher, (x, edge_index)) for teacher in teachers])

    def generator_loss(self, z: Tensor, labels: Tensor, teachers: list[dict[str, Tensor]], weights: Tensor) -> Tensor:
        """The generator's objective on one generated graph (the student frozen, in eval mode)."""
        g = self.generator(z, labels)
        edge_index = knn_graph(g.detach(), self.options.topk)
        outputs = self.teacher_outputs(teachers, g, edge_index)
        frozen = {name: p.detach() for name, p in self.backbone.named_parameters()}
        student = functional_call(self.backbone, frozen, (g, edge_index))
        return (self.options.lam1 * semantic_loss(outputs, labels, weights)
                - discrepancy(student, outputs.detach(), labels, weights)
                + self.options.lam2 * len(teachers) * diversity(z, g))

    def train_generator(self, z: Tensor, labels: Tensor, teachers: list[dict[str, Tensor]], weights: Tensor) -> None:
        self.generator.train()
        for _ in range(self.options.generator_steps):
            self.generator_optimizer.zero_grad(set_to_none=True)
            self.generator_loss(z, labels, teachers, weights).backward()
            self.generator_optimizer.step()

    def train_student(self, z: Tensor, labels: Tensor, teachers: list[dict[str, Tensor]], weights: Tensor) -> None:
        """``student_steps`` steps of the global model towards the weighted teachers on a fixed generated graph."""
        self.generator.eval()
        with torch.no_grad():
            g = self.generator(z, labels)
            edge_index = knn_graph(g, self.options.topk)
            outputs = self.teacher_outputs(teachers, g, edge_index)
        self.backbone.train()
        for _ in range(self.options.student_steps):
            self.student_optimizer.zero_grad(set_to_none=True)
            discrepancy(self.backbone(g, edge_index), outputs, labels, weights).backward()
            self.student_optimizer.step()
