"""Partitioners as pure functions, the client builder and the presets."""

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import erdos_renyi_graph, to_undirected

from fgl_ray.data.partition import (
    PARTITIONERS,
    PRESETS,
    PartitionParams,
    build_clients,
    domain_partition,
    label_dirichlet_partition,
    louvain_partition,
    random_partition,
)


def _check_partition(parts, num_nodes):
    joined = torch.cat(parts)
    assert joined.numel() == num_nodes, "every node is assigned exactly once"
    assert torch.equal(joined.sort().values, torch.arange(num_nodes))


def _same(a, b):
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def _domains(sizes):
    return torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))


def _union(sizes, edge_prob=0.05, num_classes=3, seed=0):
    """A union of random domain graphs with node id i stored as feature x[i]."""
    torch.manual_seed(seed)
    offsets = torch.tensor([0] + list(sizes)).cumsum(0).tolist()
    edges = torch.cat([erdos_renyi_graph(n, edge_prob) + start for n, start in zip(sizes, offsets)], dim=1)
    num_nodes = offsets[-1]
    return Data(x=torch.arange(num_nodes, dtype=torch.float).unsqueeze(1), edge_index=to_undirected(edges),
                y=torch.randint(num_classes, (num_nodes,)), domain=_domains(sizes))


# ---------------------------------------------------------------- domain
def test_domain_partition_respects_ratios_and_sizes():
    sizes, ratios, per_domain = [50, 31, 20], [3, 1, 2], 2
    domain = _domains(sizes)
    parts = domain_partition(domain, ratios, per_domain, seed=0)
    _check_partition(parts, sum(sizes))
    assert len(parts) == sum(ratios) * per_domain
    owners = [torch.unique(domain[part]).tolist() for part in parts]
    assert all(len(owner) == 1 for owner in owners), "a domain client holds one domain only"
    for index, (size, ratio) in enumerate(zip(sizes, ratios)):
        mine = [part.numel() for part, owner in zip(parts, owners) if owner == [index]]
        assert len(mine) == ratio * per_domain
        assert sum(mine) == size and max(mine) - min(mine) <= 1
    assert [owner[0] for owner in owners] == sorted(owner[0] for owner in owners), "clients come in domain order"


def test_domain_partition_is_seeded():
    domain = _domains([40, 40])
    assert _same(domain_partition(domain, [1, 1], 2, seed=1), domain_partition(domain, [1, 1], 2, seed=1))
    assert not _same(domain_partition(domain, [1, 1], 2, seed=1), domain_partition(domain, [1, 1], 2, seed=2))


def test_domain_partition_rejects_more_clients_than_nodes():
    with pytest.raises(ValueError, match="clients_per_domain"):
        domain_partition(_domains([3, 40]), [1, 1], 4, seed=0)
    with pytest.raises(ValueError, match="one per domain"):
        domain_partition(_domains([30, 40]), [1], 2, seed=0)


# ---------------------------------------------------------------- random
def test_random_partition_is_near_equal_and_seeded():
    parts = random_partition(103, 10, seed=0)
    _check_partition(parts, 103)
    sizes = [part.numel() for part in parts]
    assert len(parts) == 10 and max(sizes) - min(sizes) <= 1
    assert _same(parts, random_partition(103, 10, seed=0))
    assert not _same(parts, random_partition(103, 10, seed=1))


# ---------------------------------------------------------------- louvain
def _cliques(count, size):
    """``count`` cliques of ``size`` nodes joined in a ring by single edges."""
    edges = [(c * size + i, c * size + j) for c in range(count) for i in range(size) for j in range(i + 1, size)]
    edges += [(c * size, ((c + 1) % count) * size + 1) for c in range(count)]
    return to_undirected(torch.tensor(edges).t()), count * size


def test_louvain_merges_communities_into_exactly_k_clients():
    edge_index, num_nodes = _cliques(8, 10)
    parts = louvain_partition(edge_index, num_nodes, 4, seed=0)
    _check_partition(parts, num_nodes)
    assert len(parts) == 4
    clique_of = torch.arange(num_nodes) // 10
    for part in parts:  # every clique is a community, kept whole; two cliques per client
        cliques = torch.unique(clique_of[part])
        assert part.numel() == 10 * cliques.numel() == 20
    assert _same(parts, louvain_partition(edge_index, num_nodes, 4, seed=0))


def test_louvain_is_seeded_and_runs_per_domain():
    graph = _union([120, 80], edge_prob=0.05)
    parts = louvain_partition(graph.edge_index, graph.num_nodes, 6, seed=0, domain=graph.domain)
    _check_partition(parts, graph.num_nodes)
    assert len(parts) == 6
    assert _same(parts, louvain_partition(graph.edge_index, graph.num_nodes, 6, seed=0, domain=graph.domain))
    others = [louvain_partition(graph.edge_index, graph.num_nodes, 6, seed=s, domain=graph.domain) for s in (1, 2, 3)]
    assert any(not _same(parts, other) for other in others)


def test_louvain_rejects_too_many_clients():
    edge_index, num_nodes = _cliques(3, 6)
    with pytest.raises(ValueError, match="fewer than num_clients"):
        louvain_partition(edge_index, num_nodes, 5, seed=0)


# ---------------------------------------------------------------- label-dirichlet
def _label_skew(parts, y):
    """Mean total-variation distance between each client's label distribution and the global one."""
    classes = int(y.max()) + 1
    overall = torch.bincount(y, minlength=classes).float() / y.numel()
    distances = []
    for part in parts:
        local = torch.bincount(y[part], minlength=classes).float() / part.numel()
        distances.append(0.5 * (local - overall).abs().sum())
    return float(torch.stack(distances).mean())


def test_label_dirichlet_min_size_coverage_and_skew():
    y = torch.arange(1000) % 5
    skewed = label_dirichlet_partition(y, 8, alpha=0.1, seed=0)
    mild = label_dirichlet_partition(y, 8, alpha=100.0, seed=0)
    for parts in (skewed, mild):
        _check_partition(parts, 1000)
        assert len(parts) == 8 and min(part.numel() for part in parts) >= 5
    assert _label_skew(skewed, y) > _label_skew(mild, y)
    assert _same(skewed, label_dirichlet_partition(y, 8, alpha=0.1, seed=0))
    assert not _same(skewed, label_dirichlet_partition(y, 8, alpha=0.1, seed=1))


def test_label_dirichlet_fails_clearly_when_clients_cannot_be_filled():
    with pytest.raises(ValueError, match="raise dirichlet_alpha or lower num_clients"):
        label_dirichlet_partition(torch.arange(20) % 2, 10, alpha=1.0, seed=0)


# ---------------------------------------------------------------- clients
@pytest.mark.parametrize("name", ["domain", "louvain", "random", "label-dirichlet"])
def test_clients_are_induced_subgraphs(name):
    graph = _union([150, 90, 60], edge_prob=0.06)
    params = PartitionParams(num_clients=5, clients_per_domain=2, domain_ratios=(1, 1, 1),
                             dirichlet_alpha=1.0, seed=0)
    assignments = PARTITIONERS.get(name)(graph, params)
    clients = build_clients(graph, assignments, ["a", "b", "c"], (0.6, 0.2, 0.2), seed=0)
    union_edges = set(map(tuple, graph.edge_index.t().tolist()))
    assert [client.client_id for client in clients] == list(range(len(assignments)))
    order = [["a", "b", "c"].index(client.domain) for client in clients]
    assert order == sorted(order), "client ids follow domain order"
    covered = []
    for client in clients:
        data = client.data
        ids = data.x[:, 0].long()  # the union graph stores each node's global id as its feature
        covered.append(ids)
        assert torch.equal(data.y, graph.y[ids])
        majority = torch.bincount(graph.domain[ids], minlength=3).argmax()
        assert client.domain == ["a", "b", "c"][int(majority)]
        assert data.edge_index.numel() == 0 or int(data.edge_index.max()) < data.num_nodes
        local = set(map(tuple, ids[data.edge_index].t().tolist()))
        inside = {(u, v) for u, v in union_edges if u in set(ids.tolist()) and v in set(ids.tolist())}
        assert local == inside, "exactly the union's edges between the client's own nodes"
        masks = torch.stack([data.train_mask, data.val_mask, data.test_mask]).int()
        assert torch.equal(masks.sum(0), torch.ones(data.num_nodes, dtype=torch.int))
    _check_partition(covered, graph.num_nodes)


def test_build_clients_rejects_overlap_and_empty_clients():
    graph = _union([20])
    with pytest.raises(ValueError, match="several clients"):
        build_clients(graph, [torch.arange(10), torch.arange(5, 20)], ["a"], (0.6, 0.2, 0.2), seed=0)
    with pytest.raises(ValueError, match="empty client"):
        build_clients(graph, [torch.arange(20), torch.empty(0, dtype=torch.long)], ["a"], (0.6, 0.2, 0.2), seed=0)


# ---------------------------------------------------------------- registry and presets
def test_registry_and_presets():
    assert PARTITIONERS.names() == sorted(["domain", "louvain", "random", "label-dirichlet"])
    for name, preset in PRESETS.items():
        assert preset.partitioner in PARTITIONERS, name
        domain = _domains([100] * len(preset.domain_ratios))
        parts = domain_partition(domain, preset.domain_ratios, preset.clients_per_domain, seed=0)
        assert len(parts) == sum(preset.domain_ratios) * preset.clients_per_domain
    assert PRESETS["twitch-S2"].domain_ratios[0] == 5 * PRESETS["twitch-S2"].domain_ratios[1]
    assert PRESETS["twitch-S3"].domain_ratios[0] == 10 * PRESETS["twitch-S3"].domain_ratios[1]


def test_own_edges_in_one_pass_equal_pyg_subgraph_per_client():
    from torch_geometric.utils import subgraph

    from fgl_ray.data.partition.clients import _own_edges

    generator = torch.Generator().manual_seed(0)
    for _ in range(30):
        num_nodes = int(torch.randint(5, 300, (), generator=generator))
        edge_index = torch.randint(0, num_nodes, (2, int(torch.randint(0, 2000, (), generator=generator))),
                                   generator=generator)
        assigned = torch.randperm(num_nodes, generator=generator)[int(torch.randint(0, num_nodes // 3 + 1, (),
                                                                                     generator=generator)):]
        parts = [nodes.sort().values for nodes in torch.tensor_split(assigned, min(12, assigned.numel()))]
        graph = Data(edge_index=edge_index, num_nodes=num_nodes)
        for nodes, edges in zip(parts, _own_edges(graph, parts)):
            expected, _ = subgraph(nodes, edge_index, relabel_nodes=True, num_nodes=num_nodes)
            assert torch.equal(edges, expected)
            assert edges.untyped_storage().nbytes() == edges.numel() * edges.element_size()   # no shared storage
