"""build_federated_data from validated configs (synthetic: needs no files)."""

import pytest
import torch

from fgl_ray.config import ConfigError, load_config
from fgl_ray.data import build_federated_data, dataset_domains
from fgl_ray.data.datasets import DATASETS

SMALL = {"synthetic": {"nodes_per_domain": 200}}


def _masks(data):
    return [torch.stack([c.data.train_mask, c.data.val_mask, c.data.test_mask]) for c in data.clients]


def test_default_synthetic_federation():
    config = load_config({})
    data = build_federated_data(config)
    spec = DATASETS.get("synthetic")
    assert data.domains == list(spec.domains)
    assert len(data.clients) == config.clients_per_domain * len(spec.domains)
    assert [c.client_id for c in data.clients] == list(range(len(data.clients)))
    assert [c.domain for c in data.clients] == [d for d in spec.domains for _ in range(config.clients_per_domain)]
    assert data.num_features == data.clients[0].data.x.size(1)
    assert data.num_classes == int(torch.cat([c.data.y for c in data.clients]).max()) + 1
    train_fraction = sum(c.num_train for c in data.clients) / sum(c.data.num_nodes for c in data.clients)
    assert abs(train_fraction - config.resolved_split()[0]) < 0.01


@pytest.mark.parametrize("partition", ["random", "louvain", "label-dirichlet"])
def test_node_partitioners_give_num_clients(partition):
    config = load_config(SMALL | {"partition": partition, "num_clients": 5, "dirichlet_alpha": 1.0})
    data = build_federated_data(config)
    assert len(data.clients) == 5
    assert sum(c.data.num_nodes for c in data.clients) == sum(data.meta["domain_nodes"].values())
    order = [data.domains.index(c.domain) for c in data.clients]
    assert order == sorted(order)


def test_domain_ratios_multiply_clients():
    ratios = [3, 1, 2]
    config = load_config(SMALL | {"domain_ratios": ratios, "clients_per_domain": 2})
    data = build_federated_data(config)
    counts = [sum(c.domain == d for c in data.clients) for d in data.domains]
    assert counts == [r * config.clients_per_domain for r in ratios]


def test_num_domains_override_changes_domains():
    config = load_config({"synthetic": {"num_domains": 5, "nodes_per_domain": 100}})
    data = build_federated_data(config)
    assert data.domains == dataset_domains(config)
    assert len(data.domains) == 5 and len(data.clients) == 5 * config.clients_per_domain


def test_data_seed_decides_partition_and_splits():
    first, again = (build_federated_data(load_config(SMALL)) for _ in range(2))
    other = build_federated_data(load_config(SMALL | {"data_seed": 1}))
    assert all(torch.equal(a, b) for a, b in zip(_masks(first), _masks(again)))
    assert all(torch.equal(a.data.x, b.data.x) for a, b in zip(first.clients, again.clients))
    assert not torch.equal(first.clients[0].data.x, other.clients[0].data.x)


def test_a_node_only_algorithm_on_a_graph_dataset_is_refused_when_the_config_is_built():
    with pytest.raises(ConfigError, match="algorithm 'fedepd' does not support task 'graph-classification'.*fedavg"):
        load_config({"dataset": "tu-mutag", "algorithm": "fedepd"})
