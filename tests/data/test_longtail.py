"""Long-tailed variants: the geometric profile, what the down-sampling touches, the real datasets."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from fgl_ray.config import ConfigError, load_config
from fgl_ray.data import build_federated_data
from fgl_ray.data.datasets import DATASETS
from fgl_ray.data.longtail import downsample_training, geometric_profile, global_class_counts
from fgl_ray.data.types import ClientGraph


@pytest.mark.parametrize("imbalance_ratio", [1, 10, 20, 50])
def test_profile_is_geometric_to_the_ratio_within_rounding(imbalance_ratio):
    available = [500, 300, 280, 200, 150, 120, 100]
    counts = geometric_profile(available, imbalance_ratio)
    ranks = np.arange(len(available))
    head = counts[0]
    # each rank is the rounded geometric value from the head (the head is an integer)
    assert counts.tolist() == np.maximum(1, np.round(head * imbalance_ratio ** (-ranks / 6))).astype(int).tolist()
    assert np.all(counts <= available)
    assert abs(counts[-1] - head / imbalance_ratio) <= 0.5                  # max/min = IR up to rounding the tail
    # the head is as large as the scarcest rank allows: n_0 = min_r floor(available_r IR^{r/(C-1)})
    assert head == np.floor(np.min(np.asarray(available) * imbalance_ratio ** (ranks / 6)))


def test_profile_rejects_ratios_below_one():
    with pytest.raises(ValueError, match="imbalance_ratio"):
        geometric_profile([5, 4], 0.5)


def synthetic_clients(num_clients=4, n=120, num_classes=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    clients = []
    for cid in range(num_clients):
        y = torch.randint(0, num_classes, (n,), generator=gen)
        split = torch.rand(n, generator=gen)
        data = Data(x=torch.randn(n, 3, generator=gen), edge_index=torch.zeros(2, 0, dtype=torch.long), y=y,
                    train_mask=split < 0.6, val_mask=(split >= 0.6) & (split < 0.8), test_mask=split >= 0.8)
        clients.append(ClientGraph(cid, "d", data))
    return clients


def test_downsampling_only_removes_training_labels_and_follows_the_profile():
    clients = synthetic_clients()
    before = global_class_counts(clients, 5)
    result = downsample_training(clients, 5, 10, seed=3)
    after = global_class_counts(result, 5)
    order = np.argsort(-before, kind="stable")
    assert after[order].tolist() == geometric_profile(before[order], 10).tolist()
    for old, new in zip(clients, result):
        assert torch.equal(new.data.val_mask, old.data.val_mask)
        assert torch.equal(new.data.test_mask, old.data.test_mask)
        assert not bool((new.data.train_mask & ~old.data.train_mask).any())   # a subset of the old training set
        assert new.data.x is old.data.x and new.data.edge_index is old.data.edge_index
        assert (old.data.train_mask.sum() > 0)
    assert sum(int(c.data.train_mask.sum()) for c in clients) == before.sum()  # inputs untouched
    again = downsample_training(clients, 5, 10, seed=3)
    assert all(torch.equal(a.data.train_mask, b.data.train_mask) for a, b in zip(result, again))


def test_imbalance_ratio_is_validated():
    with pytest.raises(ConfigError, match="imbalance_ratio"):
        load_config({"imbalance_ratio": 0})
    assert load_config({}).imbalance_ratio == 20


def test_registry_has_the_long_tailed_datasets():
    for name in ("cora-lt", "citeseer-lt", "chameleon", "chameleon-lt", "email-eu-core"):
        assert DATASETS.get(name).task == "node"


def _build(dataset, data_dir, **changes):
    return build_federated_data(load_config({"dataset": dataset, "partition": "louvain", "num_clients": 10,
                                             "data_dir": str(data_dir)} | changes))


@pytest.mark.parametrize("dataset,base", [("cora-lt", "cora"), ("citeseer-lt", "citeseer")])
@pytest.mark.parametrize("imbalance_ratio", [10, 20, 50])
def test_real_long_tailed_datasets(shared_datasets, dataset, base, imbalance_ratio):
    balanced = _build(base, shared_datasets)
    data = _build(dataset, shared_datasets, imbalance_ratio=imbalance_ratio)
    counts = np.asarray(data.meta["class_counts"])
    assert counts.tolist() == global_class_counts(data.clients, data.num_classes).tolist()
    assert abs(counts.min() - counts.max() / imbalance_ratio) <= 0.5
    order = np.argsort(-np.asarray(balanced.meta["class_counts"]), kind="stable")
    assert np.all(np.diff(counts[order]) <= 0)                              # the natural order is kept
    assert len(data.clients) == 10
    for lt, full in zip(data.clients, balanced.clients):
        assert torch.equal(lt.data.val_mask, full.data.val_mask)
        assert torch.equal(lt.data.test_mask, full.data.test_mask)
        assert lt.data.num_nodes == full.data.num_nodes
        assert not bool((lt.data.train_mask & ~full.data.train_mask).any())


def test_chameleon_is_the_geom_gcn_version(shared_datasets):
    data = _build("chameleon", shared_datasets)
    assert data.num_classes == 5 and data.num_features == 2325
    assert sum(c.data.num_nodes for c in data.clients) == 2277
