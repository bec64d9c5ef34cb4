"""The dataset registry: names, domains, default splits and offline-capable PyG loaders.

Every loader takes ``(root, cache_dir)``: ``root`` is a folder in PyG layout (it may be
read-only, see :mod:`fgl_ray.data.storage`), ``cache_dir`` receives copies of read-only
folders. Node-task loaders return one cleaned :class:`DomainGraph` per domain: ``x`` float32,
``y`` int64, ``edge_index`` undirected (both directions) without self-loops or duplicates.
Graph-task loaders return ``{dataset name: list of graphs}`` (one entry, or one per member
of a group such as ``tu-molecules``).
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import zipfile
from functools import partial
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.datasets import (
    EmailEUCore,
    HeterophilousGraphDataset,
    Planetoid,
    TUDataset,
    Twitch,
    WikipediaNetwork,
)
from torch_geometric.utils import remove_self_loops, to_undirected

from fgl_ray.data.embeddings import netmf_embedding, structural_features
from fgl_ray.data.graphsets import one_hot_degree
from fgl_ray.data.multimodal import MODALITIES, MultimodalOptions, generate_multimodal, pack, two_view
from fgl_ray.data.storage import writable_root
from fgl_ray.data.synthetic import (SyntheticOptions, domain_names, generate_domains, generate_graphs,
                                    generate_planted_groups, planted_clients)
from fgl_ray.data.types import DatasetSpec, DatasetUnavailable, DomainGraph
from fgl_ray.registry import Registry, UnknownNameError

DATASETS: Registry[DatasetSpec] = Registry("dataset")

SYNTHETIC = "synthetic"
SYNTHETIC_MM = "synthetic-mm"
MULTIMODAL_PREFIX = "mm:"
MULTIMODAL_ROOT = "MultimodalGraph"
MULTIMODAL_FILES = ("nodes.csv", "edges.csv", "visual.npy", "text.npy")
STRUCTURE_VIEW = 128
SYNTHETIC_GRAPHS = "synthetic-graphs"
PLANTED_GRAPHS = "synthetic-graphs-planted"
COLLAB_ZIP = "TUDataset/_original/COLLAB.zip"
GRAPH_SPLIT = (0.8, 0.1, 0.1)
TU_SETS = ("MUTAG", "PROTEINS", "ENZYMES", "NCI1", "PTC_MR", "IMDB-BINARY", "IMDB-MULTI", "COX2", "BZR", "DD",
           "COLLAB", "DHFR", "AIDS")
#: GCFL's multi-dataset groups as the paper has them (one client per member): 7, 10 and 13 datasets.
_MOLECULES = ("MUTAG", "BZR", "COX2", "DHFR", "PTC_MR", "AIDS", "NCI1")
TU_GROUPS = {
    "molecules": _MOLECULES,
    "biochem": _MOLECULES + ("ENZYMES", "DD", "PROTEINS"),
    "mix": _MOLECULES + ("ENZYMES", "DD", "PROTEINS", "IMDB-BINARY", "IMDB-MULTI", "COLLAB"),
}
TWITCH_LANGUAGES = ("DE", "EN", "ES", "FR", "PT", "RU")
WIKIPEDIA_PAGES = ("chameleon", "squirrel", "crocodile")
SPLIT = (0.6, 0.2, 0.2)
TWITCH_SPLIT = (0.6, 0.1, 0.3)
SYNTHETIC_SPLIT = (0.1, 0.2, 0.7)
"""Label-scarce on purpose: with few labels per client, local training is data-limited and
a federation that pools the shared signal pays off; pass ``split`` to change it."""
EMAIL_FEATURES = 128


def available_offline(spec: DatasetSpec, root: Path) -> bool:
    """Whether ``spec`` can load from ``root`` without downloading anything."""
    return not spec.needs_files or all((Path(root) / name).is_file() for name in spec.files)


@contextlib.contextmanager
def processing_lock(cache_dir: Path, name: str) -> Iterator[None]:
    """An exclusive lock per dataset (a ``flock`` on ``<cache_dir>/.locks/<name>.lock``) held while
    PyG downloads or processes it, so that concurrent runs and Tune trials never race on one
    ``processed/`` file: the first processes, the others then read its result."""
    folder = Path(cache_dir).expanduser() / ".locks"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{name.replace('/', '_').replace(':', '_')}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def load_spec(spec: DatasetSpec, root: Path, cache_dir: Path):
    """``spec.load(root, cache_dir)``, with a failure said in one line: files missing from a
    read-only root, a download that failed (no network), or files present but unreadable.

    Raises:
        DatasetUnavailable: naming the dataset, the root and the fix; the cause is chained.
    """
    offline = available_offline(spec, root)
    try:
        with processing_lock(cache_dir, spec.name):
            return spec.load(root, cache_dir)
    except DatasetUnavailable:
        raise
    except FileNotFoundError as error:
        raise DatasetUnavailable(str(error)) from error
    except OSError as error:
        if offline:
            raise DatasetUnavailable(f"reading dataset {spec.name!r} from {root} failed ({error}); check the "
                                     "files and their permissions") from error
        raise DatasetUnavailable(
            f"dataset {spec.name!r} is not under {root} and fetching it failed ({type(error).__name__}: {error}); "
            "put its files there (`fgl-ray datasets --data-dir DIR` shows what is offline) or check the network"
        ) from error
    except Exception as error:  # a parser's own error type, re-raised with the files it could not read
        if not offline:
            raise
        raise DatasetUnavailable(
            f"reading dataset {spec.name!r} from {root} failed ({type(error).__name__}: {error}); its files "
            f"({', '.join(spec.files)}) may be corrupt or truncated: restore them, and delete any copy of them "
            f"under {cache_dir}"
        ) from error


def clean_graph(x: Tensor, edge_index: Tensor, y: Tensor) -> Data:
    """A graph with float32 ``x``, int64 ``y`` and an undirected, loop-free, coalesced ``edge_index``."""
    edge_index, _ = remove_self_loops(edge_index)
    return Data(x=x.float(), edge_index=to_undirected(edge_index, num_nodes=x.size(0)), y=y.long())


# ---------------------------------------------------------------------------- loaders
def _load_synthetic(root: Path | None, cache_dir: Path | None) -> list[DomainGraph]:
    """The generator with default options and seed 0 (``build_federated_data`` passes the config's)."""
    return generate_domains(SyntheticOptions(), seed=0)


def _load_twitch(languages: tuple[str, ...], root: Path, cache_dir: Path) -> list[DomainGraph]:
    base = writable_root(root, [f"Twitch/{language}" for language in languages], cache_dir) / "Twitch"
    graphs = []
    for language in languages:
        data = Twitch(str(base), language)[0]
        graphs.append(DomainGraph(language, clean_graph(data.x, data.edge_index, data.y)))
    return graphs


def _load_wikipedia(pages: tuple[str, ...], root: Path, cache_dir: Path) -> list[DomainGraph]:
    base = writable_root(root, [f"WikipediaNetwork/{page}" for page in pages], cache_dir) / "WikipediaNetwork"
    graphs = []
    for page in pages:
        dataset = WikipediaNetwork(str(base), page, geom_gcn_preprocess=False)
        data = dataset[0]
        y = traffic_classes(dataset.raw_paths[0], data.y)
        graphs.append(DomainGraph(page, clean_graph(data.x, data.edge_index, y)))
    return graphs


def traffic_classes(npz_path: str, traffic: Tensor, bins: int = 5) -> Tensor:
    """Five traffic classes of a Wikipedia page: the npz's ``label5`` when present, else the
    same quantile bins of the traffic (PyG's non-geom ``y`` is the raw float traffic)."""
    with np.load(npz_path) as raw:
        if "label5" in raw.files:
            return torch.from_numpy(raw["label5"]).long()
    values = traffic.numpy()
    edges = np.quantile(values, np.arange(1, bins) / bins)
    return torch.from_numpy(np.searchsorted(edges, values, side="right")).long()


def _load_planetoid(name: str, root: Path, cache_dir: Path) -> list[DomainGraph]:
    base = writable_root(root, [f"Planetoid/{name}"], cache_dir) / "Planetoid"
    data = Planetoid(str(base), name)[0]
    return [DomainGraph(name.lower(), clean_graph(data.x, data.edge_index, data.y))]


def _load_heterophilous(name: str, root: Path, cache_dir: Path) -> list[DomainGraph]:
    folder = name.lower()
    base = writable_root(root, [f"HeterophilousGraphDataset/{folder}"], cache_dir) / "HeterophilousGraphDataset"
    data = HeterophilousGraphDataset(str(base), name)[0]
    return [DomainGraph(folder, clean_graph(data.x, data.edge_index, data.y))]


def _load_email(root: Path, cache_dir: Path) -> list[DomainGraph]:
    """EmailEUCore has no node features; nodes get 128-dim NetMF (DeepWalk-equivalent)
    embeddings of the whole graph, the dimension the FedEPD paper lists for Email (Table 1),
    standardised over the graph's nodes."""
    data = EmailEUCore(str(writable_root(root, ["EmailEUCore"], cache_dir) / "EmailEUCore"))[0]
    graph = clean_graph(torch.empty(data.num_nodes, 0), data.edge_index, data.y)
    x = netmf_embedding(graph.edge_index, graph.num_nodes, dim=EMAIL_FEATURES)
    graph.x = (x - x.mean(dim=0)) / x.std(dim=0).clamp_min(1e-6)
    return [DomainGraph("email-eu-core", graph)]


def _load_synthetic_mm(root: Path | None, cache_dir: Path | None) -> list[DomainGraph]:
    """The generator with default options and seed 0 (``build_federated_data`` passes the config's)."""
    return generate_multimodal(MultimodalOptions(), seed=0)


def _load_two_view(name: str, root: Path, cache_dir: Path) -> list[DomainGraph]:
    """A Planetoid graph as two views: bag-of-words (text) and 128-dim NetMF of the whole graph."""
    (graph,) = _load_planetoid(name, root, cache_dir)
    return [two_view(graph, structural_features(graph.data.edge_index, graph.data.num_nodes, STRUCTURE_VIEW))]


def _load_multimodal_folder(folder_name: str, root: Path, cache_dir: Path) -> list[DomainGraph]:
    """A multimodal graph in the on-disk format of :mod:`fgl_ray.data.multimodal`.

    Raises:
        ValueError: naming the file and the problem when a file is missing or inconsistent.
    """
    folder = Path(root) / MULTIMODAL_ROOT / folder_name
    missing = [name for name in MULTIMODAL_FILES if not (folder / name).is_file()]
    if missing:
        raise DatasetUnavailable(f"multimodal graph folder {str(folder)!r} lacks {', '.join(missing)} "
                         f"(it needs {', '.join(MULTIMODAL_FILES)})")
    nodes, edges = pd.read_csv(folder / "nodes.csv"), pd.read_csv(folder / "edges.csv")
    n = len(nodes)
    if sorted(nodes["node"]) != list(range(n)):
        raise DatasetUnavailable(f"{folder / 'nodes.csv'}: column 'node' must hold 0..{n - 1} once each")
    views = [np.load(folder / f"{name}.npy") for name in MODALITIES]
    for name, view in zip(MODALITIES, views):
        if view.ndim != 2 or view.shape[0] != n:
            raise DatasetUnavailable(f"{folder / (name + '.npy')}: expected one row per node ({n}), got shape "
                                     f"{view.shape}")
    ids = edges[["src", "dst"]].to_numpy().T
    if ids.size and (ids.min() < 0 or ids.max() >= n):
        raise DatasetUnavailable(f"{folder / 'edges.csv'}: node ids outside 0..{n - 1}")
    labels = nodes.sort_values("node")["label"].to_numpy()
    if (labels < 0).any() and not (labels < 0).all():
        raise DatasetUnavailable(f"{folder / 'nodes.csv'}: give every node a label, or none (all -1: unlabelled)")
    y = torch.from_numpy(np.clip(labels, 0, None)).long()
    x = pack(torch.from_numpy(views[0]), torch.from_numpy(views[1]))
    graph = clean_graph(x, torch.from_numpy(ids).long().reshape(2, -1), y)
    return [DomainGraph(folder_name, graph, modality_dims=(views[0].shape[1], views[1].shape[1]),
                        labelled=bool((labels >= 0).all()))]


def dataset_spec(name: str) -> DatasetSpec:
    """The registered dataset ``name``, or the on-disk multimodal graph ``mm:<folder>``.

    Raises:
        UnknownNameError: listing the valid names and the ``mm:<folder>`` form.
    """
    if name.startswith(MULTIMODAL_PREFIX) and len(name) > len(MULTIMODAL_PREFIX):
        folder = name[len(MULTIMODAL_PREFIX):]
        return DatasetSpec(name, "node", (folder,), SPLIT, partial(_load_multimodal_folder, folder),
                           files=tuple(f"{MULTIMODAL_ROOT}/{folder}/{f}" for f in MULTIMODAL_FILES),
                           description=f"multimodal graph read from {MULTIMODAL_ROOT}/{folder}", shared_features=False,
                           multimodal=True)
    try:
        return DATASETS.get(name)
    except UnknownNameError as error:
        raise UnknownNameError(f"{error}; or mm:<folder> for a multimodal graph stored under "
                               f"<data_dir>/{MULTIMODAL_ROOT}/<folder>") from None


def _load_tu_graphs(name: str, root: Path, cache_dir: Path) -> list[Data]:
    if name == "COLLAB":
        return _load_collab(root, cache_dir)
    return list(TUDataset(str(writable_root(root, [f"TUDataset/{name}"], cache_dir) / "TUDataset"), name))


def _load_tu(names: tuple[str, ...], root: Path, cache_dir: Path) -> dict[str, list[Data]]:
    return {name: _load_tu_graphs(name, root, cache_dir) for name in names}


def _load_collab(root: Path, cache_dir: Path) -> list[Data]:
    """COLLAB from ``TUDataset/_original/COLLAB.zip`` (DGCNN text format), expanded once into the
    cache as ``TUDataset/COLLAB/processed/fgl_graphs.pt``; a TU-format ``COLLAB/raw`` folder is
    read by PyG as usual when present."""
    if (Path(root) / "TUDataset/COLLAB/raw/COLLAB_A.txt").is_file():
        return list(TUDataset(str(writable_root(root, ["TUDataset/COLLAB"], cache_dir) / "TUDataset"), "COLLAB"))
    cached = Path(cache_dir) / "TUDataset/COLLAB/processed/fgl_graphs.pt"
    if not cached.is_file():
        graphs = read_dgcnn_zip(Path(root) / COLLAB_ZIP, "COLLAB")
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(".tmp")
        torch.save(graphs, partial)
        partial.replace(cached)
    return torch.load(cached, weights_only=False)


def read_dgcnn_zip(path: Path, name: str) -> list[Data]:
    """Graphs of a DGCNN-format zip (``name/name.txt``: the graph count, then per graph ``n label``
    and ``n`` lines ``tag m neighbour_1 .. neighbour_m``, 0-based), with one-hot degree features."""
    graphs = []
    with zipfile.ZipFile(path) as archive, io.TextIOWrapper(archive.open(f"{name}/{name}.txt")) as text:
        for _ in range(int(text.readline())):
            num_nodes, label = map(int, text.readline().split())
            sources, targets = [], []
            for node in range(num_nodes):
                row = np.array(text.readline().split(), dtype=np.int64)
                sources.append(np.full(row[1], node))
                targets.append(row[2:])
            edge_index = torch.from_numpy(np.stack([np.concatenate(sources), np.concatenate(targets)]))
            graphs.append(Data(x=one_hot_degree(edge_index, num_nodes), edge_index=edge_index,
                               y=torch.tensor([label]), num_nodes=num_nodes))
    return graphs


def _load_synthetic_graphs(root: Path | None, cache_dir: Path | None) -> dict[str, list[Data]]:
    """The generator with default options and seed 0 (the data builder passes the config's seed)."""
    return {SYNTHETIC_GRAPHS: generate_graphs(seed=0)}


def _load_planted_graphs(root: Path | None, cache_dir: Path | None) -> dict[str, list[Data]]:
    """The planted groups with seed 0 (the data builder passes the config's seed)."""
    return generate_planted_groups(seed=0)


# ---------------------------------------------------------------------------- registry
def _add(spec: DatasetSpec) -> None:
    DATASETS.register(spec.name)(spec)


_add(DatasetSpec(
    SYNTHETIC, "node", tuple(domain_names(SyntheticOptions().num_domains)), SYNTHETIC_SPLIT, _load_synthetic,
    description="generated multi-domain graphs (config `synthetic` options); needs no files",
    needs_files=False,
))
_add(DatasetSpec(
    "twitch", "node", TWITCH_LANGUAGES, TWITCH_SPLIT, partial(_load_twitch, TWITCH_LANGUAGES),
    files=tuple(f"Twitch/{lang}/raw/{lang}.npz" for lang in TWITCH_LANGUAGES),
    description="Twitch gamers, 6 language domains, mature-content label (2 classes)",
))
for _language in TWITCH_LANGUAGES:
    _add(DatasetSpec(
        f"twitch-{_language.lower()}", "node", (_language,), TWITCH_SPLIT, partial(_load_twitch, (_language,)),
        files=(f"Twitch/{_language}/raw/{_language}.npz",),
        description=f"Twitch gamers, {_language} only (2 classes)",
    ))
_add(DatasetSpec(
    "wikinet", "node", WIKIPEDIA_PAGES, SPLIT, partial(_load_wikipedia, WIKIPEDIA_PAGES),
    files=tuple(f"WikipediaNetwork/{page}/raw/{page}.npz" for page in WIKIPEDIA_PAGES),
    description="Wikipedia chameleon/squirrel/crocodile, 5 traffic classes, features aligned by SVD",
    shared_features=False,
))
for _name, _key in (("cora", "Cora"), ("citeseer", "CiteSeer")):
    _add(DatasetSpec(
        _name, "node", (_name,), SPLIT, partial(_load_planetoid, _key),
        files=tuple(f"Planetoid/{_key}/raw/ind.{_name}.{part}"
                    for part in ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")),
        description=f"Planetoid {_key} citation graph",
    ))
_add(DatasetSpec(
    "email-eu-core", "node", ("email-eu-core",), SPLIT, _load_email,
    files=("EmailEUCore/raw/email-Eu-core.txt", "EmailEUCore/raw/email-Eu-core-department-labels.txt"),
    description="EU research e-mail graph, 42 departments, 128-dim NetMF structural node features",
))
for _name, _key in (("tolokers", "Tolokers"), ("minesweeper", "Minesweeper")):
    _add(DatasetSpec(
        _name, "node", (_name,), SPLIT, partial(_load_heterophilous, _key),
        files=(f"HeterophilousGraphDataset/{_name}/raw/{_name}.npz",),
        description=f"heterophilous benchmark {_key} (2 classes)",
    ))
def _tu_files(name: str) -> tuple[str, ...]:
    if name == "COLLAB":
        return (COLLAB_ZIP,)
    return tuple(f"TUDataset/{name}/raw/{name}_{part}.txt" for part in ("A", "graph_indicator", "graph_labels"))


_add(DatasetSpec(
    SYNTHETIC_MM, "node", (SYNTHETIC_MM,), SPLIT, _load_synthetic_mm, needs_files=False, shared_features=False,
    multimodal=True, description="generated multimodal graph (visual + text views of class-conditioned latents); "
                                 "needs no files",
))
for _name, _key in (("cora-mm", "Cora"), ("citeseer-mm", "CiteSeer")):
    _add(DatasetSpec(
        _name, "node", (_name,), SPLIT, partial(_load_two_view, _key), shared_features=False, multimodal=True,
        structure_view=STRUCTURE_VIEW,
        files=tuple(f"Planetoid/{_key}/raw/ind.{_key.lower()}.{part}"
                    for part in ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")),
        description=f"Planetoid {_key} as two views: bag-of-words (text) and 128-dim NetMF structure (visual)",
    ))
_add(DatasetSpec(
    SYNTHETIC_GRAPHS, "graph", (SYNTHETIC_GRAPHS,), GRAPH_SPLIT, _load_synthetic_graphs, needs_files=False,
    description="generated graph-classification set (3 classes of random graphs); needs no files",
))
_add(DatasetSpec(
    PLANTED_GRAPHS, "graph", planted_clients(), GRAPH_SPLIT, _load_planted_graphs, needs_files=False,
    description="two planted groups of 3 clients whose graph labels follow different rules (clustered FL's "
                "premise); share every layer: --model-options '{share: all}'",
))
for _key in TU_SETS:
    _add(DatasetSpec(
        f"tu-{_key.lower()}", "graph", (_key,), GRAPH_SPLIT, partial(_load_tu, (_key,)), files=_tu_files(_key),
        description=f"TU graph classification {_key}" + (" (expanded from its zip into the cache on first use)"
                                                          if _key == "COLLAB" else ""),
    ))
for _group, _members in TU_GROUPS.items():
    _add(DatasetSpec(
        f"tu-{_group}", "graph", _members, GRAPH_SPLIT, partial(_load_tu, _members), shared_features=False,
        files=tuple(f for member in _members for f in _tu_files(member)),
        description=f"GCFL's {_group.upper()} group, one client per dataset: {', '.join(_members)}",
    ))


from fgl_ray.data import longtail  # noqa: E402,F401  (registers the long-tailed variants; it reads this registry)
from fgl_ray.data import ogb  # noqa: E402,F401  (registers the OGB node datasets; it reads this registry)
