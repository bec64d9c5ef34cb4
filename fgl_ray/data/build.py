"""Builds a federation's client data: load a dataset's domains, align features, partition, split per client."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from torch_geometric.data import Data

from fgl_ray.data.datasets import (DATASETS, PLANTED_GRAPHS, SYNTHETIC, SYNTHETIC_GRAPHS, SYNTHETIC_MM,
                                   available_offline, dataset_spec, load_spec)
from fgl_ray.data.features import align_features, shared_svd_features
from fgl_ray.data.graphsets import graph_federation
from fgl_ray.data.missing import apply_missing
from fgl_ray.data.multimodal import MultimodalOptions, generate_multimodal, link_prediction_view
from fgl_ray.data.longtail import apply_imbalance, global_class_counts
from fgl_ray.data.partition import (PARTITIONERS, PRESETS, PartitionError, PartitionParams, build_clients, client_nodes,
                                   union_graph)
from fgl_ray.data.storage import resolve_cache_dir
from fgl_ray.data.synthetic import (SyntheticOptions, domain_names, generate_domains, generate_graphs,
                                    generate_planted_groups)
from fgl_ray.data.types import DatasetUnavailable, DomainGraph, FederatedGraphData, default_data_dir

if TYPE_CHECKING:
    from fgl_ray.config import ExperimentConfig


def build_federated_data(config: ExperimentConfig) -> FederatedGraphData:
    """The config's federation: node-task datasets through :func:`build_node_data`, graph-task
    datasets through :func:`build_graph_data`."""
    if dataset_spec(config.dataset).task == "graph":
        return build_graph_data(config)
    return build_node_data(config)


def build_graph_data(config: ExperimentConfig) -> FederatedGraphData:
    """Loads the config's graph dataset (or group) and cuts it into client graph sets.

    Reads ``dataset``, ``partition`` (``chunks`` or ``datasets``), ``num_clients``,
    ``resolved_split()``, ``split_mode``, ``data_seed`` and ``max_graphs``.

    Raises:
        PartitionError: the partition settings do not fit the dataset.
    """
    data = graph_federation(load_graph_dataset(config.dataset, config.resolved_data_dir(), data_seed=config.data_seed),
                            config.partition, config.num_clients, tuple(config.resolved_split()), config.split_mode,
                            config.data_seed, config.max_graphs)
    data.meta["dataset"] = config.dataset
    return data


def build_node_data(config: ExperimentConfig) -> FederatedGraphData:
    """Loads, aligns, partitions and splits the config's node-classification dataset.

    Reads only ``dataset``, ``resolved_data_dir()``, ``partition``, ``num_clients``,
    ``clients_per_domain``, ``domain_ratios``, ``dirichlet_alpha``, ``resolved_split()``,
    ``features``, ``feature_dim``, ``data_seed``, ``split_mode``, ``max_nodes``, ``synthetic``, ``imbalance_ratio`` (long-tailed variants,
    :mod:`fgl_ray.data.longtail`) and ``resolved_task()`` (two-view link prediction's structure
    view, :func:`~fgl_ray.data.multimodal.link_prediction_view`) from ``config``. ``meta["class_counts"]`` holds the global
    training nodes per class.

    Args:
        config: an ``ExperimentConfig``.

    Returns:
        The clients (ids ``0..K-1`` in domain order) and the facts models need.

    Raises:
        PartitionError: the partition settings do not fit the dataset.
    """
    loaded = load_domains(config)
    if not all(domain.labelled for domain in loaded) and config.resolved_task() == "node-classification":
        raise PartitionError(f"{config.dataset} has no node labels, so node classification cannot run; use "
                             "--task link-prediction, modality-matching or modality-retrieval")
    if config.features == "svd":
        domains = shared_svd_features(loaded, config.feature_dim, config.data_seed)
    else:
        domains = align_features(loaded, config.feature_dim, config.data_seed)
    partitioner, params = _partition_settings(config, len(domains))
    names, dims = [domain.name for domain in domains], loaded[0].modality_dims
    domain_meta = {
        "domain_nodes": {domain.name: domain.data.num_nodes for domain in loaded},
        "raw_feature_dims": {domain.name: domain.data.num_features for domain in loaded},
        "features_aligned": any(a.data is not b.data for a, b in zip(domains, loaded)),
    }
    graph = union_graph(domains)
    del loaded, domains   # the union graph is the only copy from here on (gigabytes at millions of nodes)
    assignments = PARTITIONERS.get(partitioner)(graph, params)
    split = tuple(config.resolved_split())
    clients = build_clients(graph, assignments, names, split, config.data_seed, config.split_mode)
    width = dataset_spec(config.dataset).structure_view
    if width and config.resolved_task() == "link-prediction":
        clients = link_prediction_view(graph, clients, client_nodes(graph, assignments), width, split, config.data_seed)
    num_classes = int(graph.y.max()) + 1
    clients = apply_imbalance(config.dataset, clients, num_classes, config.imbalance_ratio, config.data_seed)
    if config.missing is not None:
        clients = apply_missing(clients, config.missing, dims, config.data_seed)
    return FederatedGraphData(
        clients=clients,
        domains=names,
        num_features=graph.num_features,
        num_classes=num_classes,
        meta={
            "dataset": config.dataset,
            "partitioner": partitioner,
            "split": split,
            **domain_meta,
            "features": config.features,
            "class_counts": global_class_counts(clients, num_classes).tolist(),
            "missing": config.missing,
            "model_options": {"modality_dims": list(dims)} if dims else {},
        },
    )


def load_domains(config: ExperimentConfig) -> list[DomainGraph]:
    """The config's dataset as one cleaned graph per domain, before alignment and partitioning
    (cut to ``max_nodes`` seeded nodes when it is set)."""
    if config.dataset == SYNTHETIC:
        return generate_domains(SyntheticOptions(**config.synthetic), config.data_seed)
    if config.dataset == SYNTHETIC_MM:
        return generate_multimodal(MultimodalOptions(**config.synthetic), config.data_seed)
    spec = dataset_spec(config.dataset)
    if config.max_nodes is not None:
        spec = replace(spec, load=partial(spec.load_subset, max_nodes=config.max_nodes, seed=config.data_seed))
    return load_spec(spec, config.resolved_data_dir(), resolve_cache_dir())


def dataset_domains(config: ExperimentConfig) -> list[str]:
    """The domain names the config's dataset really has (``synthetic`` follows ``num_domains``)."""
    if config.dataset == SYNTHETIC:
        return domain_names(SyntheticOptions(**config.synthetic).num_domains)
    return list(dataset_spec(config.dataset).domains)


def load_graph_dataset(name: str, root: Path, cache_dir: Path | None = None,
                       data_seed: int = 0) -> dict[str, list[Data]]:
    """A graph-classification dataset (``tu-mutag``, a group such as ``tu-molecules``, or
    ``synthetic-graphs``) as ``{dataset name: graphs}``.

    Args:
        name: registry name of a graph-task dataset.
        root: dataset root in PyG layout (may be read-only).
        cache_dir: where read-only folders are copied; default :func:`resolve_cache_dir`.
        data_seed: the seed of ``synthetic-graphs``.
    """
    spec = dataset_spec(name)
    if spec.task != "graph":
        graph_sets = ", ".join(n for n in DATASETS.names() if DATASETS.get(n).task == "graph")
        raise ValueError(f"dataset {name!r} is a node-classification set; graph datasets: {graph_sets}")
    if name == SYNTHETIC_GRAPHS:
        return {SYNTHETIC_GRAPHS: generate_graphs(data_seed)}
    if name == PLANTED_GRAPHS:
        return generate_planted_groups(data_seed)
    return load_spec(spec, Path(root), cache_dir or resolve_cache_dir())


def _partition_settings(config: ExperimentConfig, num_domains: int) -> tuple[str, PartitionParams]:
    """The partitioner name and its parameters; a preset overrides ratios and clients per domain."""
    if config.partition in PRESETS:
        preset = PRESETS[config.partition]
        name, ratios, per_domain = preset.partitioner, preset.domain_ratios, preset.clients_per_domain
    else:
        name, per_domain = config.partition, config.clients_per_domain
        ratios = tuple(config.domain_ratios or (1,) * num_domains)
    if len(ratios) != num_domains:
        raise ValueError(
            f"domain_ratios has {len(ratios)} entries but dataset {config.dataset!r} has {num_domains} domains; "
            "give one ratio per domain"
        )
    return name, PartitionParams(
        num_clients=config.num_clients,
        clients_per_domain=per_domain,
        domain_ratios=ratios,
        dirichlet_alpha=config.dirichlet_alpha,
        seed=config.data_seed,
    )


def check_files(config: ExperimentConfig) -> None:
    """Refuses a dataset whose files are missing from a data root the user named (fgl-ray never
    downloads into one), before anything starts; the default root downloads as usual.

    Raises:
        DatasetUnavailable: naming the first missing file, the root and the fix.
    """
    if config.dataset.startswith("mm:"):
        return
    spec, root = dataset_spec(config.dataset), config.resolved_data_dir()
    if root.resolve() == default_data_dir().resolve() or available_offline(spec, root):
        return
    missing = next(name for name in spec.files if not (root / name).is_file())
    raise DatasetUnavailable(
        f"{root / missing} is missing, and fgl-ray never writes into a data root you name, so it cannot download "
        f"it there: add the files to {root}, or leave --data-dir and FGL_DATA_DIR unset to download into "
        f"{default_data_dir()}")


def expected_clients(config: ExperimentConfig) -> int:
    """How many clients the config's partition makes, known without loading the data (it lets the
    client workers start while the data is being built)."""
    spec = dataset_spec(config.dataset)
    if spec.task == "graph":
        return len(spec.domains) if config.partition == "datasets" else config.num_clients
    name, params = _partition_settings(config, len(dataset_domains(config)))
    if name == "domain":
        return sum(params.domain_ratios) * params.clients_per_domain
    return params.num_clients
