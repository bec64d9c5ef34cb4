"""The multi-domain generator: determinism, domain differences, learnability, scale."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from sklearn.linear_model import LogisticRegression
from torch_geometric.utils import add_self_loops, degree, is_undirected

from fgl_ray.data.datasets import DATASETS
from fgl_ray.data.partition import build_clients, domain_partition, union_graph
from fgl_ray.data.synthetic import UNIFORM_FLOOR, SyntheticOptions, generate_domains


def _homophily(data):
    row, col = data.edge_index
    return float((data.y[row] == data.y[col]).float().mean())


def _mean_degree(data):
    return data.edge_index.size(1) / data.num_nodes


def _label_distribution(data, classes):
    return torch.bincount(data.y, minlength=classes).float() / data.num_nodes


def test_same_seed_same_graphs_other_seed_other_graphs():
    options = SyntheticOptions()
    first, again, other = (generate_domains(options, seed) for seed in (0, 0, 1))
    for a, b in zip(first, again):
        assert a.name == b.name
        assert all(torch.equal(a.data[key], b.data[key]) for key in ("x", "edge_index", "y"))
    assert not torch.equal(first[0].data.x, other[0].data.x)


def test_shapes_types_and_clean_edges():
    options = SyntheticOptions(num_domains=4, nodes_per_domain=100, num_classes=3, num_features=8)
    domains = generate_domains(options, seed=0)
    assert [domain.name for domain in domains] == [f"syn-{i}" for i in range(4)]
    for domain in domains:
        data = domain.data
        assert data.x.shape == (100, 8) and data.x.dtype == torch.float32
        assert data.y.dtype == torch.int64 and set(data.y.tolist()) == {0, 1, 2}
        assert is_undirected(data.edge_index) and not (data.edge_index[0] == data.edge_index[1]).any()
        assert data.edge_index.unique(dim=1).size(1) == data.edge_index.size(1)


def test_domains_differ_in_structure_labels_and_features():
    options = SyntheticOptions()
    domains = [domain.data for domain in generate_domains(options, seed=0)]
    homophily = [_homophily(data) for data in domains]
    degrees = [_mean_degree(data) for data in domains]
    assert homophily == sorted(homophily, reverse=True) and homophily[0] - homophily[-1] > 0.2
    assert degrees == sorted(degrees) and degrees[-1] > 2 * degrees[0]
    labels = [_label_distribution(data, options.num_classes) for data in domains]
    means = [data.x.mean(0) for data in domains]
    for i in range(len(domains)):
        for j in range(i + 1, len(domains)):
            assert 0.5 * (labels[i] - labels[j]).abs().sum() > 0.05
            assert (means[i] - means[j]).norm() > 0.3


def test_options_are_validated():
    with pytest.raises(ValidationError):
        SyntheticOptions(unknown=1)
    with pytest.raises(ValidationError, match="homophily"):
        SyntheticOptions(homophily=(1.2, 0.5))
    with pytest.raises(ValidationError, match="num_classes"):
        SyntheticOptions(nodes_per_domain=20, num_classes=30)


def _propagated(data, hops=2):
    """Features smoothed like a linear GCN (SGC): (D^-1/2 (A+I) D^-1/2)^hops X."""
    edge_index, _ = add_self_loops(data.edge_index, num_nodes=data.num_nodes)
    deg = degree(edge_index[0], data.num_nodes)
    weight = (deg[edge_index[0]] * deg[edge_index[1]]).rsqrt().unsqueeze(1)
    x = data.x
    for _ in range(hops):
        x = torch.zeros_like(x).index_add_(0, edge_index[1], x[edge_index[0]] * weight)
    return x.numpy()


@pytest.mark.parametrize("seed", [0, 1])
def test_learnable_and_pooling_clients_beats_local_training(seed):
    """With the dataset's default split, a linear GCN-like model beats the majority class clearly,
    and pooling all clients' training nodes beats training on each client alone."""
    domains = generate_domains(SyntheticOptions(), seed)
    graph = union_graph(domains)
    parts = domain_partition(graph.domain, [1] * len(domains), 2, seed)
    clients = build_clients(graph, parts, [d.name for d in domains], DATASETS.get("synthetic").default_split, seed)
    train, test = [], []
    for client in clients:
        x, y = _propagated(client.data), client.data.y.numpy()
        train.append((x[client.data.train_mask.numpy()], y[client.data.train_mask.numpy()]))
        test.append((x[client.data.test_mask.numpy()], y[client.data.test_mask.numpy()]))
    total = sum(len(y) for _, y in test)
    pooled = LogisticRegression(max_iter=1000).fit(np.concatenate([x for x, _ in train]),
                                                   np.concatenate([y for _, y in train]))
    pooled_accuracy = sum((pooled.predict(x) == y).sum() for x, y in test) / total
    local_accuracy = sum(
        (LogisticRegression(max_iter=1000).fit(*fit).predict(x) == y).sum() for fit, (x, y) in zip(train, test)
    ) / total
    majority = sum((y == np.bincount(fit_y).argmax()).sum() for (_, fit_y), (_, y) in zip(train, test)) / total
    assert local_accuracy > majority + 0.1
    assert pooled_accuracy > local_accuracy


def test_planted_groups_label_the_same_generator_by_two_rules():
    from fgl_ray.data.synthetic import generate_graphs, generate_planted_groups

    groups = generate_planted_groups(seed=0, clients_per_group=2, graphs_per_client=12, num_classes=3)
    assert list(groups) == ["a0", "a1", "b0", "b1"]
    for name, graphs in groups.items():
        shift = 0 if name.startswith("a") else 1
        assert [int(g.y) for g in graphs] == [(i % 3 + shift) % 3 for i in range(12)]
    assert not torch.equal(groups["a0"][0].edge_index, groups["a1"][0].edge_index)   # each client its own draw
    plain = generate_graphs(0, num_graphs=12, num_classes=3)                          # the generator is untouched
    assert [int(g.y) for g in plain] == [i % 3 for i in range(12)]


# ---------------------------------------------------------------- scale: contract and memory
def _expected_loss(y, homophily, draws):
    """The expected share of draws lost as self-loops or repeated pairs (to first order).

    An intra-class draw picks its partner uniformly in the source's class (self-loop with
    probability ``C / n`` over all sources), an inter-class one uniformly outside it. A repeat
    needs two draws of one unordered pair: at most ``draws / 2 * sum(pair probability ** 2)``
    per draw, with ``2 h^2 / n^2`` per class for intra pairs and at most
    ``2 (1 - h)^2 / (n (n - n_max))`` for inter pairs.
    """
    n, sizes = len(y), np.bincount(y)
    square_sum = len(sizes) * 2 * homophily ** 2 / n ** 2 + 2 * (1 - homophily) ** 2 / (n * (n - sizes.max()))
    return homophily * len(sizes) / n + draws / 2 * square_sum


def test_moderate_size_output_contract_homophily_and_degree():
    """At 20k nodes per domain: int64 edges in both directions, no self loops or repeats, and the
    requested mean degree and homophily, with tolerances derived from the options."""
    options = SyntheticOptions(num_domains=2, nodes_per_domain=20000, num_features=16, mean_degree=(6.0, 20.0),
                               homophily=(0.9, 0.3))
    n, classes = options.nodes_per_domain, options.num_classes
    for index, domain in enumerate(generate_domains(options, seed=3)):
        data = domain.data
        wanted_degree = 6.0 + (20.0 - 6.0) * index
        wanted_homophily = 0.9 + (0.3 - 0.9) * index
        assert data.edge_index.dtype == torch.int64 and data.edge_index.shape[0] == 2
        source, target = data.edge_index.numpy()
        keys, reverse = source * n + target, target * n + source
        assert np.unique(keys).size == keys.size, "no repeated edge"
        assert np.array_equal(np.sort(keys), np.sort(reverse)), "every edge in both directions"
        assert not (source == target).any()
        draws = round(n * wanted_degree / 2)
        lost = _expected_loss(data.y.numpy(), wanted_homophily, draws)
        # twice the expected loss: over 5 standard deviations of the (Poisson) lost count here
        assert draws * 2 * (1 - 2 * lost) / n <= _mean_degree(data) <= draws * 2 / n
        spread = 4 * np.sqrt(wanted_homophily * (1 - wanted_homophily) / draws)
        assert abs(_homophily(data) - wanted_homophily) <= spread + lost
        share = np.bincount(data.y.numpy(), minlength=classes) / n
        assert share.min() >= UNIFORM_FLOOR / classes - 4 * np.sqrt(0.25 / n), "every class keeps its floor"


def test_features_drawn_in_chunks_equal_one_draw_and_keep_the_noise(monkeypatch):
    import fgl_ray.data.synthetic as synthetic

    options = SyntheticOptions(num_domains=1, nodes_per_domain=5000, num_features=24, noise=0.7)
    whole = generate_domains(options, seed=1)[0].data
    monkeypatch.setattr(synthetic, "FEATURE_CHUNK", 777)      # 32 rows of 24 values
    chunked = generate_domains(options, seed=1)[0].data
    assert all(torch.equal(whole[key], chunked[key]) for key in ("x", "edge_index", "y"))
    residual = torch.cat([whole.x[whole.y == c] - whole.x[whole.y == c].mean(0) for c in range(options.num_classes)])
    assert abs(float(residual.std()) - 0.7) < 4 * 0.7 / np.sqrt(2 * residual.numel())


def test_pair_keys_give_what_pyg_remove_self_loops_and_to_undirected_give():
    from torch_geometric.utils import remove_self_loops, to_undirected

    from fgl_ray.data.synthetic import _both_directions, _pair_keys

    rng = np.random.default_rng(0)
    for n, draws in ((1, 3), (7, 40), (50, 400), (3000, 20000)):
        source, target = rng.integers(n, size=draws), rng.integers(n, size=draws)
        expected, _ = remove_self_loops(torch.from_numpy(np.stack([source, target])))
        assert torch.equal(_both_directions(_pair_keys(source, target.copy(), n), n),
                           to_undirected(expected, num_nodes=n))


MEMORY_PROBE = """
import json
from fgl_ray.data.synthetic import SyntheticOptions, generate_domains

def kib(field):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(field))

rows = []
for n in (50000, 200000):
    open("/proc/self/clear_refs", "w").write("5")        # resets the peak (VmHWM) to the current RSS
    before = kib("VmRSS:")
    data = generate_domains(SyntheticOptions(num_domains=1, nodes_per_domain=n, num_features=64,
                                             mean_degree=(20, 20)), 0)[0].data
    rows.append(((kib("VmHWM:") - before) * 1024, data.x.nbytes + data.edge_index.nbytes + data.y.nbytes))
    del data
print(json.dumps(rows))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="reads and resets peak RSS through Linux /proc")
def test_peak_memory_grows_with_the_output_not_with_dense_temporaries():
    """Peak RSS growth (peak during the call minus RSS before it) from 50k to 200k nodes stays
    within 2.5x the growth of the output itself (x + edge_index + y): measured 1.1-1.3x here, and
    3.4-3.7x for the earlier whole-matrix float64 features and coalesce through ``to_undirected``."""
    probe = subprocess.run([sys.executable, "-c", MEMORY_PROBE], capture_output=True, text=True, timeout=120,
                           check=True)
    (small_peak, small_size), (large_peak, large_size) = json.loads(probe.stdout.strip().splitlines()[-1])
    assert large_peak >= 0.8 * large_size, "the probe sees the output in its RSS"
    assert large_peak - small_peak <= 2.5 * (large_size - small_size)


ESTIMATE_PROBE = """
import json
from fgl_ray.data.synthetic import SyntheticOptions, generate_domains, generator_bytes

def kib(field):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(field))

rows = []
for domains, n, width, degrees in ((1, 300000, 64, (20, 20)), (3, 150000, 16, (4, 30))):
    options = SyntheticOptions(num_domains=domains, nodes_per_domain=n, num_features=width, mean_degree=degrees)
    open("/proc/self/clear_refs", "w").write("5")        # resets the peak (VmHWM) to the current RSS
    before = kib("VmRSS:")
    graphs = generate_domains(options, 0)
    rows.append(((kib("VmHWM:") - before) * 1024, generator_bytes(options)))
    del graphs
print(json.dumps(rows))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="reads and resets peak RSS through Linux /proc")
def test_the_memory_estimate_bounds_the_generators_peak_from_above_and_closely():
    """The estimate that refuses oversized graphs is at least the measured peak growth (so a graph it
    admits fits) and at most twice it (so it refuses only what is far too big): 1.45-1.55x here."""
    probe = subprocess.run([sys.executable, "-c", ESTIMATE_PROBE], capture_output=True, text=True, timeout=120,
                           check=True)
    for peak, estimate in json.loads(probe.stdout.strip().splitlines()[-1]):
        assert peak <= estimate <= 2 * peak


def test_a_graph_larger_than_the_machine_is_refused_before_anything_is_allocated(monkeypatch):
    from fgl_ray.data import synthetic

    fits = SyntheticOptions(nodes_per_domain=1000)
    monkeypatch.setattr(synthetic, "machine_memory", lambda: synthetic.generator_bytes(fits))
    SyntheticOptions(nodes_per_domain=1000)                                     # exactly the machine: admitted
    with pytest.raises(ValidationError, match=r"needs about \d+ MiB, more than this machine's \d+ MiB"):
        SyntheticOptions(nodes_per_domain=1001)
