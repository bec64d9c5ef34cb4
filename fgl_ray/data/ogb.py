"""OGB node-classification datasets, read through the ``ogb`` package (``pip install 'fgl-ray[ogb]'``).

Registered here (importing :mod:`fgl_ray.data.datasets` registers them):

* ``ogbn-arxiv``: 169,343 CS papers, 1,166,243 citations, 128 features, 40 classes; OGB's time
  split (train up to 2017: 90,941, valid 2018: 29,799, test 2019-2020: 48,603).
* ``ogbn-products``: 2,449,029 Amazon products, 61,859,140 co-purchases, 100 features, 47
  classes; OGB's sales-rank split (train 196,615, valid 39,323, test 2,213,091).
* ``ogbn-papers100M``: 111,059,956 papers, 1,615,685,872 citations, 128 features, 172 classes,
  of which only the 1,546,782 arXiv papers are labelled (train 1,207,179, valid 125,265, test
  214,338). The dataset keeps the labelled papers and the citations among them, and
  ``max_nodes`` cuts a seeded uniform subset of those. From FedGraph's loader
  (``fedgraph/data_process.py``) this takes the node subset with the edges inside it and OGB's
  split indices that fall in it (FedGraph's ``FEDGRAPH_SUBSAMPLE_NODES`` keeps the first N node
  ids; here the draw is uniform and seeded by ``data_seed``). FedGraph keeps unlabelled papers
  (label -1) as neighbours; here they are dropped, since all 109M of them cannot be federated
  on one machine, so a small subset is a sparse graph (a uniform share ``s`` of the papers keeps
  about ``s^2`` of their citations).
  Loading reads OGB's processed file whole: 111M x 128 float32 features (57 GB) plus 1.6B
  edges (26 GB as int64). **It needs more than 100 GB of RAM, whatever ``max_nodes`` is**;
  ``max_nodes`` only makes the federation small.
* ``ogbn-arxiv-years``: ogbn-arxiv with publication-year bins as domains (FedIA's
  domain-shift setting): ``upto2015``, ``2016-17``, ``2018``, ``2019``, ``2020``. OGB's split
  counts give 90,941 papers up to 2017 (the first two bins), 29,799 in 2018 and 48,603 in
  2019-2020 (the last two bins); the loader logs each bin's size and the dropped edges, which
  were not measured here (no download). Domains are disjoint graphs in this data layer, so
  every citation between two bins is dropped (:func:`year_domains` counts them). OGB's split is
  by year, so each bin would be wholly train, wholly valid or wholly test: this dataset has no
  split of its own and its clients get the usual per-client splits.

On disk every dataset is OGB's layout (``root/ogbn_arxiv/raw/*.csv.gz``, ``split/<kind>/``,
``RELEASE_v1.txt``; ``raw/data.npz`` and ``raw/node-label.npz`` for papers100M), as OGB's
archives unzip, renamed (``arxiv/`` to ``ogbn_arxiv/``, ``papers100M-bin/`` to
``ogbn_papers100M/``). The default data root downloads the
archive when the folder is missing; a named root (``--data-dir``, ``FGL_DATA_DIR``) is never
written: its folder is copied into the cache (:func:`~fgl_ray.data.storage.writable_root`) and
processed there. A folder without its ``RELEASE`` file is refused (``ogb`` would ask on stdin
whether to delete it and download again).

Cleaning: features float32, labels flattened to int64, edges undirected without self-loops
(:func:`~fgl_ray.data.datasets.clean_graph`), OGB's ``get_idx_split()`` as ``train_mask``,
``val_mask`` and ``test_mask`` (``split_mode: dataset`` keeps them per client, and is these
datasets' default).

Partitioning: ``louvain`` (networkx, pure Python) suits ogbn-arxiv. Measured on 2 shared CPU
cores, on generated graphs with planted communities: 20k nodes / 139k undirected edges 16 s and
0.6 GB peak; 80k / 555k 68 s, 0.95 GB; arxiv's size (169k / 1.16M) 180 s, 1.5 GB, so about
0.15 ms and 1 KB per edge. ogbn-products has 61.9M edges, 54 times arxiv's: about 3 hours and
55 GB at that rate, which does not fit a small machine. Use ``random`` or ``label-dirichlet``
there. METIS would need PyG's ``ClusterData``, with ``torch-sparse`` or ``pyg-lib`` built with
METIS. fgl-ray does not require either, so it does not offer METIS.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
from torch_geometric.data.storage import GlobalStorage
from torch_geometric.utils import subgraph

from fgl_ray.data.datasets import DATASETS, SPLIT, clean_graph, processing_lock
from fgl_ray.data.partition.base import SPLIT_MASKS
from fgl_ray.data.storage import writable_root
from fgl_ray.data.types import DatasetSpec, DatasetUnavailable, DomainGraph, default_data_dir

try:
    from numpy._core.multiarray import scalar as _numpy_scalar     # numpy >= 2
except ImportError:                                                 # pragma: no cover (numpy 1.x)
    from numpy.core.multiarray import scalar as _numpy_scalar

LOG = logging.getLogger(__name__)
#: The classes in the processed file ``ogb`` writes: it calls ``torch.load`` without
#: ``weights_only``, which since torch 2.6 refuses them unless they are allowed (OGB's binary
#: reader, papers100M's, leaves ``num_nodes`` a numpy int64).
OGB_FILE_CLASSES = [Data, DataEdgeAttr, DataTensorAttr, GlobalStorage, _numpy_scalar, np.dtype,
                    type(np.dtype(np.int64))]
OGB_SPLITS = ("train", "valid", "test")
CSV_RAW = ("edge", "node-feat", "node-label", "num-node-list", "num-edge-list")
#: Upper years of the arxiv-years bins (``torch.bucketize``: a year goes to the first bound >= it).
YEAR_BOUNDS = (2015, 2017, 2018, 2019)
YEAR_BINS = ("upto2015", "2016-17", "2018", "2019", "2020")


@dataclass(frozen=True)
class OgbSet:
    """What fgl-ray needs to know of one OGB node dataset."""

    name: str
    split: str
    raw: tuple[str, ...]
    fractions: tuple[float, float, float]
    archive_gb: float

    @property
    def folder(self) -> str:
        return self.name.replace("-", "_")

    @property
    def files(self) -> tuple[str, ...]:
        splits = () if self.name == PAPERS else tuple(f"split/{self.split}/{part}.csv.gz" for part in OGB_SPLITS)
        return tuple(f"{self.folder}/{path}" for path in ("RELEASE_v1.txt", *(f"raw/{r}" for r in self.raw), *splits))


PAPERS = "ogbn-papers100M"
OGB_SETS = {
    "ogbn-arxiv": OgbSet("ogbn-arxiv", "time", tuple(f"{r}.csv.gz" for r in (*CSV_RAW, "node_year")),
                         (0.537, 0.176, 0.287), 0.08),
    "ogbn-products": OgbSet("ogbn-products", "sales_ranking", tuple(f"{r}.csv.gz" for r in CSV_RAW),
                            (0.08, 0.016, 0.904), 1.4),
    PAPERS: OgbSet(PAPERS, "time", ("data.npz", "node-label.npz"), (0.78, 0.081, 0.139), 57.0),
}
"""The fractions are OGB's split sizes, used by ``split_mode: random|stratified`` when no
``split`` is given (papers100M: of its labelled nodes)."""


# ---------------------------------------------------------------------------- reading OGB's layout
def open_dataset(ogb_set: OgbSet, root: Path, cache_dir: Path):
    """``ogb``'s ``PygNodePropPredDataset`` over ``root`` (a named root's folder copied to the cache).

    Raises:
        FileNotFoundError: a file of OGB's layout is missing (the default root downloads first).
        DatasetUnavailable: ``ogb`` is not installed.
    """
    try:
        from ogb.nodeproppred import PygNodePropPredDataset
    except ImportError as error:
        raise DatasetUnavailable(f"dataset {ogb_set.name!r} is read by the ogb package, which is not installed: "
                                 "pip install 'fgl-ray[ogb]'") from error
    root = Path(root).expanduser()
    default = root.resolve() == default_data_dir().resolve()
    if default and not (root / ogb_set.folder).is_dir():
        _download(ogb_set, root)
    _check_layout(ogb_set, root, default)
    base = writable_root(root, [ogb_set.folder], cache_dir)
    # a lock per folder as well as per dataset: ogbn-arxiv and ogbn-arxiv-years process the same one
    with processing_lock(cache_dir, ogb_set.folder), torch.serialization.safe_globals(OGB_FILE_CLASSES):
        return PygNodePropPredDataset(ogb_set.name, root=str(base))


def _check_layout(ogb_set: OgbSet, root: Path, default: bool) -> None:
    missing = [name for name in ogb_set.files if not (root / name).is_file()]
    if not missing:
        return
    fix = (f"delete {root / ogb_set.folder} to download it again" if default else
           f"unzip OGB's archive into {root} and rename its folder to {ogb_set.folder}/ (fgl-ray never writes "
           "into a data root you name; leave --data-dir and FGL_DATA_DIR unset to download it)")
    raise FileNotFoundError(f"{root / missing[0]} is missing ({len(missing)} of the {len(ogb_set.files)} files "
                            f"{ogb_set.name} needs in OGB's layout are absent); {fix}")


def _download(ogb_set: OgbSet, root: Path) -> None:
    """OGB's archive unzipped into ``root/<folder>`` (``ogb``'s own download asks on stdin above 1 GB)."""
    import pandas as pd
    from ogb.nodeproppred import dataset_pyg
    from ogb.utils.url import download_url, extract_zip

    meta = pd.read_csv(Path(dataset_pyg.__file__).with_name("master.csv"), index_col=0,
                       keep_default_na=False)[ogb_set.name]
    LOG.warning("downloading %s (about %.2f GB) into %s", meta["url"], ogb_set.archive_gb, root)
    root.mkdir(parents=True, exist_ok=True)
    archive = download_url(meta["url"], str(root))
    extract_zip(archive, str(root))
    Path(archive).unlink()
    (root / meta["download_name"]).rename(root / ogb_set.folder)


# ---------------------------------------------------------------------------- cleaning
def split_masks(split: dict[str, Tensor], num_nodes: int) -> dict[str, Tensor]:
    """OGB's ``get_idx_split()`` as boolean ``train_mask``/``val_mask``/``test_mask``."""
    masks = {}
    for name, part in zip(SPLIT_MASKS, OGB_SPLITS):
        mask = torch.zeros(num_nodes, dtype=torch.bool)
        mask[split[part]] = True
        masks[name] = mask
    return masks


def labelled_nodes(y: Tensor) -> Tensor | None:
    """The nodes with a label (papers100M marks the others NaN); ``None`` when every node has one."""
    if not y.is_floating_point() or not bool(torch.isnan(y).any()):
        return None
    return torch.nonzero(~torch.isnan(y)).flatten()


def seeded_subset(nodes: Tensor, count: int, seed: int) -> Tensor:
    """``count`` of ``nodes`` drawn uniformly without replacement, sorted (all of them when fewer)."""
    if count >= nodes.numel():
        return nodes
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x0693]))
    return nodes[torch.from_numpy(np.sort(rng.choice(nodes.numel(), size=count, replace=False)))]


def ogb_graph(raw: Data, split: dict[str, Tensor], nodes: Tensor | None = None) -> Data:
    """The cleaned graph (over ``nodes`` only, with the edges among them, when given) with OGB's
    split as masks."""
    x, y, edge_index = raw.x, raw.y.view(-1), raw.edge_index
    masks = split_masks(split, raw.num_nodes)
    if nodes is not None:
        edge_index, _ = subgraph(nodes, edge_index, relabel_nodes=True, num_nodes=raw.num_nodes)
        x, y, masks = x[nodes], y[nodes], {name: mask[nodes] for name, mask in masks.items()}
    graph = clean_graph(x, edge_index, y)
    for name, mask in masks.items():
        graph[name] = mask
    return graph


def _kept_nodes(raw: Data, max_nodes: int | None, seed: int) -> Tensor | None:
    labelled = labelled_nodes(raw.y.view(-1))
    if max_nodes is None:
        return labelled
    return seeded_subset(torch.arange(raw.num_nodes) if labelled is None else labelled, max_nodes, seed)


def _load_ogb(ogb_set: OgbSet, root: Path, cache_dir: Path, max_nodes: int | None = None,
              seed: int = 0) -> list[DomainGraph]:
    dataset = open_dataset(ogb_set, root, cache_dir)
    raw = dataset[0]
    return [DomainGraph(ogb_set.name, ogb_graph(raw, dataset.get_idx_split(), _kept_nodes(raw, max_nodes, seed)))]


# ---------------------------------------------------------------------------- arxiv by year
def year_domains(graph: Data, year: Tensor) -> tuple[list[DomainGraph], int]:
    """``graph`` (undirected, as cleaned) cut into the :data:`YEAR_BINS` domains by publication ``year``.

    Returns:
        One domain per bin (nodes in id order, the edges among them; no masks), and the number
        of undirected edges dropped because their ends fall in different bins.

    Raises:
        DatasetUnavailable: a bin has no papers.
    """
    bins = torch.bucketize(year.view(-1), torch.tensor(YEAR_BOUNDS))
    source, target = graph.edge_index
    dropped = int((bins[source] != bins[target]).sum()) // 2       # each undirected edge is stored both ways
    domains = []
    for index, name in enumerate(YEAR_BINS):
        nodes = torch.nonzero(bins == index).flatten()
        if not nodes.numel():
            raise DatasetUnavailable(f"ogbn-arxiv-years: no paper falls in the year bin {name}")
        edge_index, _ = subgraph(nodes, graph.edge_index, relabel_nodes=True, num_nodes=graph.num_nodes)
        domains.append(DomainGraph(name, Data(x=graph.x[nodes], edge_index=edge_index, y=graph.y[nodes])))
    return domains, dropped


def _load_arxiv_years(root: Path, cache_dir: Path, max_nodes: int | None = None, seed: int = 0) -> list[DomainGraph]:
    dataset = open_dataset(OGB_SETS["ogbn-arxiv"], root, cache_dir)
    raw = dataset[0]
    nodes = _kept_nodes(raw, max_nodes, seed)
    graph = ogb_graph(raw, dataset.get_idx_split(), nodes)
    year = raw.node_year.view(-1)
    domains, dropped = year_domains(graph, year if nodes is None else year[nodes])
    LOG.info("ogbn-arxiv-years: %s papers per bin; %d cross-bin citations dropped",
             {domain.name: domain.data.num_nodes for domain in domains}, dropped)
    return domains


# ---------------------------------------------------------------------------- registry
def _add(spec: DatasetSpec) -> None:
    DATASETS.register(spec.name)(spec)


_DESCRIPTIONS = {
    "ogbn-arxiv": "OGB arXiv CS citations (169k nodes, 40 classes), OGB's time split",
    "ogbn-products": "OGB Amazon co-purchases (2.4M nodes, 47 classes), OGB's sales-rank split",
    PAPERS: "OGB papers100M's 1.5M labelled papers (172 classes), OGB's time split; max_nodes: a seeded subset; "
            "loading needs >100 GB RAM",
}
for _name, _set in OGB_SETS.items():
    _add(DatasetSpec(
        _name, "node", (_name,), _set.fractions, partial(_load_ogb, _set), files=_set.files,
        description=_DESCRIPTIONS[_name], own_split=True, load_subset=partial(_load_ogb, _set),
    ))
_add(DatasetSpec(
    "ogbn-arxiv-years", "node", YEAR_BINS, SPLIT, _load_arxiv_years, files=OGB_SETS["ogbn-arxiv"].files,
    description="ogbn-arxiv with 5 publication-year bins as domains (<=2015, 2016-17, 2018, 2019, 2020)",
    load_subset=_load_arxiv_years,
))
