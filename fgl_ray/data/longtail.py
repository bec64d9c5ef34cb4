"""Long-tailed node-classification datasets (FedEPD's setting) and global training class counts.

Registered here (importing :mod:`fgl_ray.data.datasets` registers them):

* ``cora-lt``, ``citeseer-lt``, ``chameleon-lt``: the base graph with its TRAINING labels
  down-sampled per class along a geometric profile to ``config.imbalance_ratio`` (IR).
* ``chameleon``: the standard geom-gcn Chameleon (2277 nodes, 2325 features, 5 classes,
  PyG ``WikipediaNetwork(geom_gcn_preprocess=True)``), single domain. The FedEPD paper does not
  use Chameleon (its heterophilic graph is Roman-Empire, absent offline); the geom-gcn version is
  the one heterophily papers mean by "chameleon". Its classes are nearly balanced (IR 1.35), so
  ``chameleon-lt`` is the long-tailed variant. (The multi-domain ``wikinet`` dataset keeps the
  MUSAE graph with 5 traffic bins.)

Email-Eu-core (``email-eu-core``, naturally long-tailed, 42 classes) is registered in
:mod:`fgl_ray.data.datasets`.

**Where the down-sampling happens.** The FedEPD paper defines IR on the unpartitioned graph
(``max_c N_c / min_c N_c``, its Eq. 17) and injects no imbalance per client, so the profile is
imposed on the GLOBAL training set: the union of every client's training nodes after the
Louvain partition and the per-client 60/20/20 splits (Louvain ignores labels and masks, so this
equals down-sampling the global training split before partitioning). Per-client IRs then vary
as the partition makes them, the non-IID long tail FedEPD targets. Down-sampled nodes stay in
their client's graph (features and edges) without a label; validation and test masks are
untouched.

**The profile.** Classes are ranked by their global training count (most frequent first, ties
by class index); rank ``r`` of ``C`` keeps ``n_r = max(1, round(n_0 IR^{-r/(C-1)}))`` nodes,
with ``n_0`` the largest head size for which every class has enough nodes
(``n_0 = min_r floor(available_r IR^{r/(C-1)})``), so the counts are exactly geometric up to
rounding and ``n_0 / n_{C-1} ~ IR``. Which nodes stay is a uniform draw per class seeded by
``data_seed``.
"""

from __future__ import annotations

import copy
from functools import partial
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch_geometric.datasets import WikipediaNetwork

from fgl_ray.data.datasets import DATASETS, SPLIT, _load_planetoid, clean_graph
from fgl_ray.data.storage import writable_root
from fgl_ray.data.types import ClientGraph, DatasetSpec, DomainGraph

#: long-tailed name -> base name.
LONGTAIL_DATASETS = {"cora-lt": "cora", "citeseer-lt": "citeseer", "chameleon-lt": "chameleon"}
CHAMELEON_FILES = tuple(f"WikipediaNetwork/chameleon/geom_gcn/raw/{name}"
                        for name in ("out1_node_feature_label.txt", "out1_graph_edges.txt"))
PLANETOID_PARTS = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")


def is_longtail(dataset: str) -> bool:
    return dataset in LONGTAIL_DATASETS


def _load_chameleon(root: Path, cache_dir: Path) -> list[DomainGraph]:
    """Geom-gcn Chameleon: 5 classes, node order and edges of the geom-gcn release."""
    base = writable_root(root, ["WikipediaNetwork/chameleon"], cache_dir) / "WikipediaNetwork"
    data = WikipediaNetwork(str(base), "chameleon", geom_gcn_preprocess=True)[0]
    return [DomainGraph("chameleon", clean_graph(data.x, data.edge_index, data.y))]


# ---------------------------------------------------------------------------- the profile
def geometric_profile(available: Sequence[int], imbalance_ratio: float) -> np.ndarray:
    """Per-rank training counts following ``n_0 IR^{-r/(C-1)}`` within what each rank has.

    Args:
        available: training nodes per class, most frequent class first.
        imbalance_ratio: ``IR >= 1``.

    Returns:
        int64 counts per rank, each ``<= available[r]`` and ``>= 1`` where ``available[r] >= 1``.
    """
    if imbalance_ratio < 1:
        raise ValueError(f"imbalance_ratio must be >= 1, got {imbalance_ratio}")
    have = np.asarray(available, dtype=np.int64)
    ranks = np.arange(have.size)
    decay = imbalance_ratio ** (-ranks / max(have.size - 1, 1))
    head = np.floor(np.min(have / decay) + 1e-9)
    counts = np.maximum(1, np.round(head * decay)).astype(np.int64)
    return np.minimum(counts, have)


def global_class_counts(clients: Sequence[ClientGraph], num_classes: int) -> np.ndarray:
    """Training nodes per class over all clients (int64 ``[C]``)."""
    total = torch.zeros(num_classes, dtype=torch.long)
    for client in clients:
        data = client.data
        total += torch.bincount(data.y[data.train_mask], minlength=num_classes)
    return total.numpy()


def downsample_training(clients: Sequence[ClientGraph], num_classes: int, imbalance_ratio: float,
                        seed: int) -> list[ClientGraph]:
    """Copies of ``clients`` whose global training set follows :func:`geometric_profile`.

    Only ``train_mask`` changes (down-sampled nodes lose their training label); the inputs are
    not modified.
    """
    owners, locals_, labels = [], [], []
    for position, client in enumerate(clients):
        nodes = client.data.train_mask.nonzero().squeeze(-1)
        owners.append(torch.full_like(nodes, position))
        locals_.append(nodes)
        labels.append(client.data.y[nodes])
    owner, local, label = torch.cat(owners), torch.cat(locals_), torch.cat(labels)
    counts = torch.bincount(label, minlength=num_classes).numpy()
    order = np.argsort(-counts, kind="stable")
    present = order[counts[order] > 0]
    targets = geometric_profile(counts[present], imbalance_ratio)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x17A11]))
    keep = torch.zeros(label.numel(), dtype=torch.bool)
    for cls, target in zip(present.tolist(), targets.tolist()):
        members = (label == cls).nonzero().squeeze(-1).numpy()
        chosen = rng.choice(members, size=int(target), replace=False)
        keep[torch.from_numpy(np.sort(chosen))] = True
    result = []
    for position, client in enumerate(clients):
        data = copy.copy(client.data)
        mask = torch.zeros_like(client.data.train_mask)
        mask[local[keep & (owner == position)]] = True
        data.train_mask = mask
        result.append(ClientGraph(client_id=client.client_id, domain=client.domain, data=data))
    return result


def apply_imbalance(dataset: str, clients: list[ClientGraph], num_classes: int, imbalance_ratio: float,
                    seed: int) -> list[ClientGraph]:
    """``clients`` down-sampled when ``dataset`` is a long-tailed variant, else unchanged."""
    if not is_longtail(dataset):
        return clients
    return downsample_training(clients, num_classes, imbalance_ratio, seed)


def training_class_counts(data) -> np.ndarray:
    """Global training counts of a :class:`FederatedGraphData`: ``meta["class_counts"]`` when the
    data layer recorded them, else counted from the clients."""
    counts = data.meta.get("class_counts") if data.meta else None
    if counts is not None:
        return np.asarray(counts, dtype=np.int64)
    return global_class_counts(data.clients, data.num_classes)


# ---------------------------------------------------------------------------- registry
def _add(spec: DatasetSpec) -> None:
    DATASETS.register(spec.name)(spec)


_add(DatasetSpec(
    "chameleon", "node", ("chameleon",), SPLIT, _load_chameleon, files=CHAMELEON_FILES,
    description="Wikipedia chameleon, geom-gcn version (5 classes, heterophilic)",
))
for _name, _key in (("cora", "Cora"), ("citeseer", "CiteSeer")):
    _add(DatasetSpec(
        f"{_name}-lt", "node", (_name,), SPLIT, partial(_load_planetoid, _key),
        files=tuple(f"Planetoid/{_key}/raw/ind.{_name}.{part}" for part in PLANETOID_PARTS),
        description=f"Planetoid {_key}, training labels down-sampled to a geometric long tail (imbalance_ratio)",
    ))
_add(DatasetSpec(
    "chameleon-lt", "node", ("chameleon",), SPLIT, _load_chameleon, files=CHAMELEON_FILES,
    description="geom-gcn chameleon, training labels down-sampled to a geometric long tail (imbalance_ratio)",
))
