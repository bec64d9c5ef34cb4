"""OGB node datasets read from a small fixture in OGB's on-disk layout, written by the tests themselves."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

pytest.importorskip("ogb")

from fgl_ray.config import ConfigError, load_config  # noqa: E402
from fgl_ray.data import build_federated_data, check_files  # noqa: E402
from fgl_ray.data.datasets import DATASETS, load_spec  # noqa: E402
from fgl_ray.data.ogb import YEAR_BINS, year_domains  # noqa: E402
from fgl_ray.data.types import DatasetUnavailable  # noqa: E402
from fgl_ray.results import read_metrics  # noqa: E402
from fgl_ray.runtime import run_experiment  # noqa: E402

NODES, EDGES, BLOCKS, FEATURES, CLASSES = 320, 2000, 4, 16, 5


def _csv(path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(path, header=False, index=False, compression="gzip")


def _arrays(seed: int) -> dict:
    """A graph of four planted blocks (most edges inside a block), with a few self-loops and
    repeated edges for the cleaning to remove, years 2010-2020 and a random split."""
    rng = np.random.default_rng(seed)
    block = np.arange(NODES) % BLOCKS
    source = rng.integers(0, NODES, EDGES)
    same = rng.random(EDGES) < 0.9
    members = [np.flatnonzero(block == b) for b in range(BLOCKS)]
    target = np.where(same, [rng.choice(members[block[s]]) for s in source], rng.integers(0, NODES, EDGES))
    target[:5] = source[:5]                                          # self-loops
    edges = np.concatenate([np.stack([source, target], 1), np.stack([target[5:15], source[5:15]], 1)])
    order = rng.permutation(NODES)
    return {"edges": edges, "x": rng.normal(size=(NODES, FEATURES)).astype(np.float32),
            "y": rng.integers(0, CLASSES, NODES), "year": rng.integers(2010, 2021, NODES),
            "split": {"train": order[:160], "valid": order[160:220], "test": order[220:]}}


def write_arxiv(root, seed: int = 0) -> dict:
    """``root/ogbn_arxiv`` in OGB's CSV layout; returns the arrays written."""
    arrays, folder = _arrays(seed), root / "ogbn_arxiv"
    for name, rows in (("edge", arrays["edges"]), ("node-feat", arrays["x"]), ("node-label", arrays["y"]),
                       ("node_year", arrays["year"]), ("num-node-list", [NODES]),
                       ("num-edge-list", [len(arrays["edges"])])):
        _csv(folder / "raw" / f"{name}.csv.gz", rows)
    for part, nodes in arrays["split"].items():
        _csv(folder / "split" / "time" / f"{part}.csv.gz", nodes)
    (folder / "RELEASE_v1.txt").write_text("fixture\n")
    return arrays


def write_papers(root, seed: int = 1) -> dict:
    """``root/ogbn_papers100M`` in OGB's binary layout; a third of the nodes unlabelled (NaN)."""
    arrays, folder = _arrays(seed), root / "ogbn_papers100M"
    labels = arrays["y"].astype(np.float32)
    labels[np.arange(NODES) % 3 == 0] = np.nan
    arrays["labelled"] = np.flatnonzero(~np.isnan(labels))
    arrays["split"] = {part: np.intersect1d(nodes, arrays["labelled"]) for part, nodes in arrays["split"].items()}
    (folder / "raw").mkdir(parents=True)
    np.savez(folder / "raw" / "data.npz", edge_index=arrays["edges"].T, num_nodes_list=np.array([NODES]),
             num_edges_list=np.array([len(arrays["edges"])]), node_feat=arrays["x"], node_year=arrays["year"][:, None])
    np.savez(folder / "raw" / "node-label.npz", node_label=labels[:, None])
    for part, nodes in arrays["split"].items():
        _csv(folder / "split" / "time" / f"{part}.csv.gz", nodes)
    (folder / "RELEASE_v1.txt").write_text("fixture\n")
    return arrays


@pytest.fixture
def arxiv(tmp_path):
    root = tmp_path / "ogb-root"
    return root, write_arxiv(root)


def _global_ids(x: torch.Tensor, written: np.ndarray) -> list[int]:
    """Fixture node ids of the rows of ``x`` (every written feature row is distinct)."""
    index = {row.tobytes(): node for node, row in enumerate(written)}
    return [index[row.tobytes()] for row in x.numpy()]


def _undirected(edges, keep=lambda node: True) -> set[tuple[int, int]]:
    """Both directions of every non-loop edge whose ends ``keep`` accepts."""
    return {pair for s, t in edges.tolist() if s != t and keep(s) and keep(t) for pair in ((s, t), (t, s))}


def _edge_set(edge_index, ids) -> set[tuple[int, int]]:
    return {(ids[s], ids[t]) for s, t in edge_index.t().tolist()}


def test_loader_gives_the_fixture_with_undirected_edges_and_ogb_masks(arxiv, tmp_path):
    root, written = arxiv
    (domain,) = load_spec(DATASETS.get("ogbn-arxiv"), root, tmp_path / "cache")
    graph = domain.data
    assert graph.x.dtype == torch.float32 and graph.y.dtype == torch.int64
    assert torch.equal(graph.x, torch.from_numpy(written["x"]))
    assert graph.y.tolist() == written["y"].tolist()
    assert _edge_set(graph.edge_index, range(NODES)) == _undirected(written["edges"])
    assert graph.edge_index.size(1) == len(_undirected(written["edges"]))     # no duplicates left
    for mask, part in (("train_mask", "train"), ("val_mask", "valid"), ("test_mask", "test")):
        assert sorted(graph[mask].nonzero().flatten().tolist()) == sorted(written["split"][part].tolist())
    assert not list(root.rglob("processed")), "a named root is never written"


def _config(root, tmp_path, **changes):
    return load_config(dict(dataset="ogbn-arxiv", data_dir=str(root), partition="louvain", num_clients=3, hidden=16,
                            rounds=2, local_epochs=1, torch_threads=1, output_dir=str(tmp_path / "runs")) | changes)


def test_ogb_datasets_default_to_their_own_split_and_others_keep_random(arxiv, tmp_path):
    root, _ = arxiv
    assert _config(root, tmp_path).split_mode == "dataset"
    assert _config(root, tmp_path, split_mode="stratified").split_mode == "stratified"
    assert _config(root, tmp_path, dataset="ogbn-arxiv-years").split_mode == "random"
    assert load_config({"dataset": "synthetic"}).split_mode == "random"


def test_louvain_clients_keep_exactly_the_ogb_split(arxiv, tmp_path):
    root, written = arxiv
    data = build_federated_data(_config(root, tmp_path))
    assert len(data.clients) == 3
    seen = []
    for client in data.clients:
        ids = _global_ids(client.data.x, written["x"])
        seen += ids
        for mask, part in (("train_mask", "train"), ("val_mask", "valid"), ("test_mask", "test")):
            members = set(written["split"][part].tolist())
            assert client.data[mask].tolist() == [node in members for node in ids]
        assert _edge_set(client.data.edge_index, ids) == _undirected(written["edges"], set(ids).__contains__)
    assert sorted(seen) == list(range(NODES))


@pytest.mark.parametrize("backend", ["local", "ray"])
def test_a_federation_on_the_fixture_runs_two_rounds(request, arxiv, tmp_path, backend):
    if backend == "ray":
        request.getfixturevalue("ray_session")
    root, _ = arxiv
    result = run_experiment(_config(root, tmp_path, backend=backend), progress=False)
    frame = read_metrics(result.run_dir)
    tested = frame[(frame.split == "test") & (frame.metric == "accuracy")]
    assert sorted(tested["round"].unique()) == [0, 1]
    assert set(tested.client_id) == {"0", "1", "2", "server"}
    assert frame[frame.metric == "failed"].empty


def _year_bin(year: int) -> int:
    if year <= 2015:
        return 0
    if year <= 2017:
        return 1
    return year - 2016                                                 # 2018 -> 2, 2019 -> 3, 2020 -> 4


def test_year_domains_are_the_bins_and_count_the_dropped_edges(arxiv, tmp_path):
    root, written = arxiv
    bins = [_year_bin(year) for year in written["year"].tolist()]
    domains = load_spec(DATASETS.get("ogbn-arxiv-years"), root, tmp_path / "cache")
    assert [domain.name for domain in domains] == list(YEAR_BINS)
    for index, domain in enumerate(domains):
        ids = _global_ids(domain.data.x, written["x"])
        assert ids == [node for node in range(NODES) if bins[node] == index]
        assert _edge_set(domain.data.edge_index, ids) == _undirected(written["edges"], lambda n: bins[n] == index)
        assert "train_mask" not in domain.data
    (whole,) = load_spec(DATASETS.get("ogbn-arxiv"), root, tmp_path / "cache")
    crossing = {(min(s, t), max(s, t)) for s, t in written["edges"].tolist() if bins[s] != bins[t]}
    assert 0 < len(crossing)
    assert year_domains(whole.data, torch.from_numpy(written["year"]))[1] == len(crossing)


def test_papers_subset_keeps_seeded_labelled_nodes_their_edges_and_split(tmp_path):
    root = tmp_path / "ogb-root"
    written = write_papers(root)
    spec = DATASETS.get("ogbn-papers100M")
    (full,) = load_spec(spec, root, tmp_path / "cache")
    assert _global_ids(full.data.x, written["x"]) == written["labelled"].tolist()
    subsets = [spec.load_subset(root, tmp_path / "cache", 40, seed)[0].data for seed in (3, 3, 4)]
    ids = _global_ids(subsets[0].x, written["x"])
    assert len(ids) == 40 and set(ids) <= set(written["labelled"].tolist()) and ids == sorted(ids)
    assert ids == _global_ids(subsets[1].x, written["x"]) != _global_ids(subsets[2].x, written["x"])
    assert subsets[0].y.tolist() == written["y"][ids].tolist()
    assert _edge_set(subsets[0].edge_index, ids) == _undirected(written["edges"], set(ids).__contains__)
    for mask, part in (("train_mask", "train"), ("val_mask", "valid"), ("test_mask", "test")):
        assert subsets[0][mask].tolist() == [node in set(written["split"][part].tolist()) for node in ids]


def test_max_nodes_reaches_the_loader_and_is_refused_where_it_does_not_apply(arxiv, tmp_path):
    root, written = arxiv
    data = build_federated_data(_config(root, tmp_path, max_nodes=200, partition="random"))
    assert sum(client.data.num_nodes for client in data.clients) == 200
    with pytest.raises(ConfigError, match="max_nodes cuts a seeded node subset.*ogbn-arxiv"):
        load_config({"dataset": "synthetic", "max_nodes": 100})
    with pytest.raises(ConfigError, match="max_nodes"):
        _config(root, tmp_path, max_nodes=0)


def test_split_mode_dataset_is_refused_for_a_dataset_without_masks(tmp_path):
    with pytest.raises(ConfigError, match="split_mode 'dataset' keeps a dataset's own.*'synthetic' has none"):
        load_config({"dataset": "synthetic", "split_mode": "dataset"})


def test_a_named_root_without_the_files_is_refused(arxiv, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DatasetUnavailable, match=r"ogbn_arxiv/RELEASE_v1.txt is missing, and fgl-ray never writes"):
        check_files(_config(empty, tmp_path))
    root, _ = arxiv
    (root / "ogbn_arxiv" / "raw" / "node-feat.csv.gz").unlink()
    with pytest.raises(DatasetUnavailable, match=r"node-feat.csv.gz is missing .*unzip OGB's archive"):
        load_spec(DATASETS.get("ogbn-arxiv"), root, tmp_path / "cache")


def test_the_default_root_downloads_the_archive_and_names_its_folder_as_ogb_does(tmp_path, monkeypatch):
    import shutil

    import ogb.utils.url

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    from fgl_ray.data.types import default_data_dir

    staging = tmp_path / "staging"
    written = write_arxiv(staging)
    (staging / "ogbn_arxiv").rename(staging / "arxiv")                   # OGB's archive holds arxiv/
    archive = shutil.make_archive(str(tmp_path / "arxiv"), "zip", staging)
    fetched = []

    def offline_download(url, folder, log=True):
        fetched.append(url)
        return shutil.copy(archive, folder)

    monkeypatch.setattr(ogb.utils.url, "download_url", offline_download)
    (domain,) = load_spec(DATASETS.get("ogbn-arxiv"), default_data_dir(), tmp_path / "cache")
    assert fetched == ["http://snap.stanford.edu/ogb/data/nodeproppred/arxiv.zip"]
    assert (default_data_dir() / "ogbn_arxiv" / "RELEASE_v1.txt").is_file()
    assert not (default_data_dir() / "arxiv.zip").exists()
    assert domain.data.y.tolist() == written["y"].tolist()
