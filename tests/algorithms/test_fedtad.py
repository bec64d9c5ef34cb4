"""FedTAD: topology-aware class-wise reliability, the generated graph, the distillation losses, and the
server-side distillation that reduces to FedAvg when it takes no steps."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call

from fgl_ray.algorithms import fedtad
from fgl_ray.algorithms.fedtad import (
    class_labels,
    class_reliability,
    discrepancy,
    diversity,
    knn_graph,
    node_reliability,
    normalised_weights,
    rwse,
    semantic_loss,
    walk_ids,
)
from fgl_ray.messages import GLOBAL, ClientUpdate, ModelState
from fgl_ray.params import load_trainable_vector, trainable_vector
from fgl_ray.runtime.local_backend import LocalBackend

NUM_CLASSES = 3


def _edges(pairs, both=True):
    edges = torch.tensor(pairs).T
    return torch.cat([edges, edges.flip(0)], dim=1) if both else edges


EDGES = _edges([[0, 1], [1, 2], [2, 3], [3, 0], [4, 5], [1, 5]])   # node 6 is isolated


def test_rwse_is_the_diagonal_of_the_random_walk_powers(monkeypatch):
    n = 7
    a = torch.eye(n)
    a[EDGES[0], EDGES[1]] = 1.0
    walk = a / a.sum(1, keepdim=True)
    expected = torch.stack([torch.linalg.matrix_power(walk, k).diagonal() for k in range(1, 5)], dim=1)
    torch.testing.assert_close(rwse(EDGES, n, 4), expected)
    monkeypatch.setattr(fedtad, "RWSE_ENTRIES", 2 * n)        # two columns per block
    torch.testing.assert_close(rwse(EDGES, n, 4), expected)
    torch.testing.assert_close(expected[6], torch.ones(4))      # an isolated node always returns


def test_the_authors_walk_ids_start_at_the_node_and_ignore_the_edges():
    n, steps = 30, 4
    ring = _edges([[i, (i + 1) % n] for i in range(n)])
    shuffled = _edges([[i, (i + 7) % n] for i in range(n)])     # another graph with the same degrees
    torch.manual_seed(0)
    ids = walk_ids(ring, n, steps)
    torch.manual_seed(0)
    assert torch.equal(ids, walk_ids(shuffled, n, steps))
    assert ids.shape == (n, steps * (steps + 1) // 2)
    starts = [sum(range(1, length)) for length in range(1, steps + 1)]    # first column of each walk
    for column in starts:
        assert torch.equal(ids[:, column], torch.arange(n).float())
    assert ids.min() >= 0 and ids.max() < n
    # most steps leave the node even though it has only two neighbours: the walk jumps anywhere
    jumped = (ids[:, 1:] != ids[:, :-1]).float().mean()
    assert jumped > 0.5


def test_a_walk_stays_with_the_probability_of_the_node_it_is_at():
    # two nodes: node 1 has 999 out-edges, so it stays half the time; node 0 (no edges) stays with e / (e + 1)
    edges = _edges([[1, 0]] * 999, both=False)
    stay = [math.e / (math.e + 1), math.exp(1 / 1000) / (math.exp(1 / 1000) + 1)]
    torch.manual_seed(0)
    at_zero = sum(float(walk_ids(edges, 2, 3)[1, 5] == 0) for _ in range(3000)) / 3000   # node 1's walk, step 2
    expected = (1 - stay[1]) * stay[0] + stay[1] * (1 - stay[1])
    assert abs(at_zero - expected) < 0.04 and abs(at_zero - 0.5) > 0.07    # 0.5: staying with the start's probability


def test_node_reliability_is_the_authors_neighbour_loop():
    torch.manual_seed(1)
    h = torch.randn(7, 5)
    got = node_reliability(h, EDGES)
    for v in range(7):
        neighbours = EDGES[1][EDGES[0] == v]
        total = 1.0 + sum(float(torch.cosine_similarity(h[v], h[u], dim=0)) for u in neighbours)
        assert float(got[v]) == pytest.approx(total / (neighbours.numel() + 1), rel=1e-5)
    assert float(got[6]) == 1.0


def test_class_reliability_sums_the_training_nodes_of_each_class():
    torch.manual_seed(2)
    x = torch.rand(7, 4)
    train = torch.tensor([True, True, False, True, True, False, True])
    y = torch.tensor([0, 2, 1, 0, 2, 2, 0])
    got = class_reliability(x, EDGES, train, y, NUM_CLASSES, "rwse", 3)
    per_node = node_reliability(torch.cat([x, rwse(EDGES, 7, 3)], dim=1), EDGES)
    expected = torch.stack([per_node[train & (y == c)].sum() for c in range(NUM_CLASSES)])
    torch.testing.assert_close(got, expected)
    assert float(got[1]) == 0.0 and bool((got[[0, 2]] > 0).all())     # class 1 has no training node


@pytest.mark.parametrize("topology", ["rwse", "walk_ids"])
def test_uploaded_reliability_has_the_declared_shape_whatever_the_node_count(make_config, uploads_by_size, topology):
    for stats in uploads_by_size(make_config("fedtad", algorithm_options={"topology": topology})):
        assert stats["reliability"].shape == (NUM_CLASSES,) and bool((stats["reliability"] >= 0).all())
        assert float(stats["reliability"].sum()) > 0


def test_weights_normalise_over_clients_or_over_classes():
    reliability = torch.tensor([[2.0, 0.0, 1.0], [6.0, 0.0, 3.0]])
    torch.testing.assert_close(normalised_weights(reliability, "clients"),
                               torch.tensor([[0.25, 0.0, 0.25], [0.75, 0.0, 0.75]]))
    torch.testing.assert_close(normalised_weights(reliability, "classes"),
                               torch.tensor([[2 / 3, 0.0, 1 / 3], [2 / 3, 0.0, 1 / 3]]))


def test_labels_spread_evenly_with_the_remainder_on_the_last_class():
    assert torch.bincount(class_labels(100, 3)).tolist() == [33, 33, 34]
    assert class_labels(7, 7).tolist() == list(range(7))


def test_the_generated_graph_is_the_symmetrised_cosine_top_k():
    torch.manual_seed(3)
    x = torch.randn(12, 4)
    edges = knn_graph(x, 3)
    adjacency = torch.zeros(12, 12, dtype=torch.bool)
    adjacency[edges[0], edges[1]] = True
    assert torch.equal(adjacency, adjacency.T) and not adjacency.diagonal().any()
    similarity = F.cosine_similarity(x.unsqueeze(1), x.unsqueeze(0), dim=2)
    expected = torch.zeros(12, 12, dtype=torch.bool)
    for i in range(12):
        for j in similarity[i].argsort(descending=True)[:3].tolist():
            if j != i:
                expected[i, j] = expected[j, i] = True
    assert torch.equal(adjacency, expected)


def test_diversity_is_the_authors_pairwise_formula():
    torch.manual_seed(4)
    z, g = torch.randn(6, 5), torch.randn(6, 3)
    total = sum(float(((z[i] - z[j]) ** 2).mean()) * float((g[i] - g[j]).abs().mean())
                for i in range(6) for j in range(6))
    assert float(diversity(z, g)) == pytest.approx(math.exp(-total / 36), rel=1e-5)


def test_losses_are_the_authors_per_client_per_class_loops():
    torch.manual_seed(5)
    labels = class_labels(10, NUM_CLASSES)
    student, teachers = torch.randn(10, NUM_CLASSES), torch.randn(2, 10, NUM_CLASSES)
    weights = torch.rand(2, NUM_CLASSES)
    l1 = ce = 0.0
    for k in range(2):
        for c in range(NUM_CLASSES):
            rows = labels == c
            l1 += weights[k, c] * torch.mean(torch.mean(torch.abs(student[rows] - teachers[k][rows]), dim=1))
            ce += weights[k, c] * torch.nn.CrossEntropyLoss()(teachers[k][rows], labels[rows])
    torch.testing.assert_close(discrepancy(student, teachers, labels, weights), l1)
    torch.testing.assert_close(semantic_loss(teachers, labels, weights), ce)


# ---------------------------------------------------------------------- server side
def _server(make_config, tiny_data, changes=None, **options):
    return LocalBackend(make_config("fedtad", algorithm_options=options, **(changes or {})), tiny_data).server


def _updates(server, steps, reliability):
    """Client ``k`` moved the global model by ``steps[k]`` (a flat vector) and reports ``reliability[k]``."""
    lr = server.config.lr
    return [ClientUpdate(k, GLOBAL, 10, -step / lr, server.models[GLOBAL].buffers, {"reliability": r})
            for k, (step, r) in enumerate(zip(steps, reliability))]


def test_teachers_run_the_trained_weights_through_the_one_backbone(make_config, tiny_data):
    server = _server(make_config, tiny_data)
    algorithm = server.algorithm
    vector = torch.randn(server.layout.size)
    x, edges = torch.randn(9, 6), knn_graph(torch.randn(9, 6), 3)
    algorithm.backbone.eval()
    got = functional_call(algorithm.backbone, algorithm.named_tensors(vector, torch.zeros(0)), (x, edges))
    reference = algorithm.backbone.net
    before = trainable_vector(reference)
    load_trainable_vector(reference, vector)
    torch.testing.assert_close(got, reference(x, edges))
    load_trainable_vector(reference, before)


def test_each_phase_trains_only_its_own_model(make_config, tiny_data):
    server = _server(make_config, tiny_data, student_lr=0.05)
    algorithm = server.algorithm
    size = server.layout.size
    teachers = [algorithm.named_tensors(server.models[GLOBAL].params + 0.1 * torch.randn(size), torch.zeros(0))
                for _ in range(2)]
    weights, labels = torch.rand(2, NUM_CLASSES), class_labels(30, NUM_CLASSES)
    z = torch.randn(30, 32)
    student = trainable_vector(algorithm.backbone.net)
    generator = [p.detach().clone() for p in algorithm.generator.parameters()]
    algorithm.train_generator(z, labels, teachers, weights)
    assert torch.equal(trainable_vector(algorithm.backbone.net), student)
    assert all(p.grad is None for p in algorithm.backbone.parameters())
    moved = [p.detach().clone() for p in algorithm.generator.parameters()]
    assert any(not torch.equal(a, b) for a, b in zip(generator, moved))

    def gap():
        with torch.no_grad():
            g = algorithm.generator(z, labels)
            edges = knn_graph(g, 5)
            outputs = algorithm.teacher_outputs(teachers, g, edges)
            return float(discrepancy(algorithm.backbone(g, edges), outputs, labels, weights))

    before = gap()
    algorithm.train_student(z, labels, teachers, weights)
    assert all(torch.equal(a, b.detach()) for a, b in zip(moved, algorithm.generator.parameters()))
    assert not torch.equal(trainable_vector(algorithm.backbone.net), student)
    assert gap() < before


def test_teachers_equal_to_the_aggregate_leave_it_where_it_is(make_config, tiny_data):
    """Both clients took the same step, so both teachers are the FedAvg model, bit for bit (weights 1/2,
    lr 1/2): zero discrepancy (no dropout in the student's train mode), and without weight decay the
    student's Adam steps are zero (Adam would turn any rounding gap into a full step)."""
    server = _server(make_config, tiny_data, {"dropout": 0.0, "lr": 0.5}, server_weight_decay=0.0)
    base = server.models[GLOBAL].params.clone()
    step = 0.01 * torch.randn(server.layout.size)
    reliability = [torch.tensor([1.0, 2.0, 0.0]), torch.tensor([3.0, 1.0, 1.0])]
    server.algorithm.aggregate(server, _updates(server, [step] * 2, reliability))
    assert torch.equal(server.models[GLOBAL].params, base + step)


def test_distillation_repeats_per_round_and_leaves_the_global_rng_alone(make_config, tiny_data):
    server = _server(make_config, tiny_data)
    steps = [0.05 * torch.randn(server.layout.size) for _ in range(3)]
    reliability = [torch.rand(NUM_CLASSES) for _ in range(3)]
    generator = {name: value.clone() for name, value in server.algorithm.generator.state_dict().items()}
    results = []
    for _ in range(2):
        server.models[GLOBAL] = ModelState(torch.zeros(server.layout.size), torch.zeros(0))
        server.algorithm.generator.load_state_dict(generator)
        server.algorithm.generator_optimizer.state.clear()
        server.algorithm.student_optimizer.state.clear()
        rng = torch.get_rng_state()
        server.algorithm.aggregate(server, _updates(server, steps, reliability))
        assert torch.equal(torch.get_rng_state(), rng)
        results.append(server.models[GLOBAL].params)
    assert torch.equal(*results)
    fedavg = sum(steps) / 3
    assert not torch.allclose(results[0], fedavg)              # the distillation moved it


@pytest.mark.parametrize("options", [{"distill_epochs": 0}, {"student_steps": 0}])
def test_without_student_steps_a_run_is_fedavg(make_config, tiny_data, fedavg_after, run_local, options):
    fedavg = fedavg_after(3).server
    server = run_local(make_config("fedtad", algorithm_options=options), tiny_data, 3).server
    assert torch.equal(server.models[GLOBAL].params, fedavg.models[GLOBAL].params)


def test_default_distillation_changes_the_fedavg_run(make_config, tiny_data, fedavg_after, run_local):
    fedavg = fedavg_after(1).server
    server = run_local(make_config("fedtad"), tiny_data, 1).server
    assert not torch.allclose(server.models[GLOBAL].params, fedavg.models[GLOBAL].params)


def test_representation_mode_distils_only_the_classifier_layer(make_config, tiny_data, fedavg_after, run_local):
    config = make_config("fedtad", algorithm_options={"mode": "representation"})
    server = run_local(config, tiny_data, 1).server
    assert server.algorithm.generator.out.out_features == config.hidden
    assert server.algorithm.backbone.head_only
    fedavg = fedavg_after(1).server.models[GLOBAL].params
    moved = (server.models[GLOBAL].params - fedavg).abs() > 0
    head = server.layout.slices()
    classifier = [name for name in head if name.startswith("convs.1.")]
    assert classifier and all(bool(moved[head[name]].any()) for name in classifier)       # the head is distilled
    assert not any(bool(moved[part].any()) for name, part in head.items() if name not in classifier)
