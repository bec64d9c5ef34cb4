"""A multi-domain node-classification generator that needs no files.

Every domain shares the same classes, but the domains differ in

* feature distribution: class means mix a part shared by all domains (``shared_signal``)
  with a domain-specific part, and each domain adds its own offset (``domain_shift``);
* label balance: class proportions drawn per domain from Dirichlet(``label_alpha``);
* degree: mean degrees spread evenly over ``mean_degree`` from the first domain to the last;
* homophily: the share of intra-class edges spreads evenly over ``homophily``.

Node features are noisy, so a GCN gains from aggregating neighbours (most in homophilous
domains). The dataset's default split labels only 10% of the nodes: with so few labels a
client training alone is data-limited, and a federation gains from pooling the shared part of
the class signal (with 60% labels a local GCN already reaches the noise ceiling here).

It scales to millions of nodes with a peak memory near its output's size: features are drawn a
chunk at a time into one float32 tensor, and edges are deduplicated through int64 pair keys
sorted in place. The values equal one whole-matrix draw, so chunking changes no output.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch_geometric.data import Data

from fgl_ray.data.graphsets import one_hot_degree
from fgl_ray.data.types import DomainGraph

UNIFORM_FLOOR = 0.2
"""Share of each domain's class proportions spread uniformly, so every class occurs."""

FEATURE_CHUNK = 1 << 22
"""Feature values drawn at a time, in whole rows (bounds the float64 temporaries to 32 MiB each)."""


class SyntheticOptions(BaseModel):
    """Knobs of :func:`generate_domains` (the config's ``synthetic`` mapping)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_domains: int = Field(3, ge=1, description="number of domains")
    nodes_per_domain: int = Field(600, ge=20, description="nodes in each domain")
    num_classes: int = Field(4, ge=2, description="classes, shared by all domains")
    num_features: int = Field(32, ge=1, description="feature dimension, shared by all domains")
    mean_degree: tuple[float, float] = Field((4.0, 12.0), description="mean degree of the first and last domain")
    homophily: tuple[float, float] = Field((0.8, 0.4), description="intra-class edge share, first and last domain")
    label_alpha: float = Field(3.0, gt=0, description="Dirichlet concentration of class proportions; small = skewed")
    shared_signal: float = Field(0.8, ge=0, le=1, description="share of class-mean variance common to all domains")
    class_separation: float = Field(1.5, gt=0, description="norm of each class mean")
    domain_shift: float = Field(0.5, ge=0, description="norm of each domain's feature offset")
    noise: float = Field(1.0, ge=0, description="standard deviation of per-feature node noise")

    @model_validator(mode="after")
    def _ranges(self) -> SyntheticOptions:
        if min(self.mean_degree) <= 0:
            raise ValueError(f"mean_degree values must be > 0, got {self.mean_degree}")
        if not all(0.0 <= h <= 1.0 for h in self.homophily):
            raise ValueError(f"homophily values must lie in [0, 1], got {self.homophily}")
        if self.nodes_per_domain < self.num_classes:
            raise ValueError(
                f"nodes_per_domain ({self.nodes_per_domain}) must be >= num_classes ({self.num_classes}) "
                "so that every class occurs in every domain"
            )
        needed, memory = generator_bytes(self), machine_memory()
        if needed > memory:
            raise ValueError(
                f"generating {self.num_domains} domains of {self.nodes_per_domain:,} nodes ({self.num_features} "
                f"features, mean degree up to {max(self.mean_degree):g}) needs about {_size(needed)}, more than this "
                f"machine's {_size(memory)} of memory; lower nodes_per_domain, num_features or "
                "mean_degree"
            )
        return self


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**30:.1f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.0f} MiB"


def machine_memory() -> int:
    """This machine's physical memory in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def generator_bytes(options: SyntheticOptions) -> int:
    """An upper estimate of :func:`generate_domains`'s peak memory in bytes.

    Every domain's output (float32 features, int64 labels, an int64 edge index holding both
    directions of at most ``E`` pairs: 32 bytes per drawn pair) plus the largest domain's
    temporaries: the edge draw's sources, targets, class picks and pair keys (about 41 bytes per
    drawn pair) and one feature chunk's float64 arrays.
    """
    n, width = options.nodes_per_domain, options.num_features
    pairs = [round(n * degree / 2) for degree in np.linspace(*options.mean_degree, options.num_domains)]
    outputs = sum(4 * n * width + 8 * n + 32 * drawn for drawn in pairs)
    return outputs + 41 * max(pairs) + 16 * n + 3 * 8 * min(n * width, FEATURE_CHUNK)


def domain_names(num_domains: int) -> list[str]:
    """Names of the generated domains: ``syn-0``, ``syn-1``, ..."""
    return [f"syn-{index}" for index in range(num_domains)]


def generate_domains(options: SyntheticOptions, seed: int) -> list[DomainGraph]:
    """Generates ``options.num_domains`` graphs, deterministically from ``seed``.

    Args:
        options: generator knobs.
        seed: the only source of randomness.

    Returns:
        One :class:`DomainGraph` per domain with ``x`` float32, ``y`` int64 and an undirected
        ``edge_index`` without self-loops or duplicates.
    """
    shared_seed, *domain_seeds = np.random.SeedSequence(seed).spawn(1 + options.num_domains)
    shared_means = _unit_rows(np.random.default_rng(shared_seed), options.num_classes, options.num_features)
    degrees = np.linspace(*options.mean_degree, options.num_domains)
    homophilies = np.linspace(*options.homophily, options.num_domains)
    return [
        DomainGraph(name, _domain(options, np.random.default_rng(domain_seed), shared_means, degree, homophily))
        for name, domain_seed, degree, homophily in zip(
            domain_names(options.num_domains), domain_seeds, degrees, homophilies
        )
    ]


def _domain(options: SyntheticOptions, rng: np.random.Generator, shared_means: np.ndarray,
            mean_degree: float, homophily: float) -> Data:
    n, classes = options.nodes_per_domain, options.num_classes
    proportions = (1 - UNIFORM_FLOOR) * rng.dirichlet(np.full(classes, options.label_alpha)) + UNIFORM_FLOOR / classes
    y = rng.permutation(np.concatenate([np.arange(classes), rng.choice(classes, size=n - classes, p=proportions)]))
    own_means = _unit_rows(rng, classes, options.num_features)
    means = options.class_separation * (
        np.sqrt(options.shared_signal) * shared_means + np.sqrt(1 - options.shared_signal) * own_means
    )
    offset = options.domain_shift * _unit_rows(rng, 1, options.num_features)
    x = _features(rng, y, means + offset, options.noise)
    edge_index = _edges(rng, y, round(n * mean_degree / 2), homophily)
    return Data(x=x, edge_index=edge_index, y=torch.from_numpy(y))


def _features(rng: np.random.Generator, y: np.ndarray, centres: np.ndarray, noise: float) -> torch.Tensor:
    """``centres[y] + noise * N(0, I)`` as float32, about ``FEATURE_CHUNK`` values at a time.

    Each chunk is drawn and summed in float64 and rounded once into the preallocated output, so
    the values equal one whole-matrix float64 draw (the generator's stream is the same) while
    only one chunk's float64 temporaries exist at a time.
    """
    x = torch.empty(len(y), centres.shape[1], dtype=torch.float32)
    out, step = x.numpy(), max(1, FEATURE_CHUNK // centres.shape[1])
    for start in range(0, len(y), step):
        rows = centres[y[start:start + step]]
        draw = rng.standard_normal(rows.shape)
        draw *= noise
        rows += draw
        out[start:start + step] = rows
    return x


def _edges(rng: np.random.Generator, y: np.ndarray, num_edges: int, homophily: float) -> torch.Tensor:
    """Draws ``num_edges`` undirected edges; a share ``homophily`` joins two nodes of one class.

    Self-loops and repeated pairs are dropped; the result holds both directions of every pair,
    sorted by (row, column), as PyG's ``remove_self_loops`` then ``to_undirected`` return it.
    """
    return _both_directions(_drawn_pairs(rng, y, num_edges, homophily), len(y))


def _drawn_pairs(rng: np.random.Generator, y: np.ndarray, num_edges: int, homophily: float) -> np.ndarray:
    """The :func:`_pair_keys` of ``num_edges`` drawn node pairs (the draws end with this frame)."""
    n = len(y)
    source = rng.integers(n, size=num_edges)
    target = np.empty(num_edges, dtype=np.int64)
    intra = rng.random(num_edges) < homophily
    by_class = np.argsort(y, kind="stable")
    counts = np.bincount(y)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    own = y[source[intra]]
    picked = (rng.random(own.size) * counts[own]).astype(np.int64)
    picked += starts[own]
    target[intra] = by_class[picked]
    del own, picked
    pending = np.flatnonzero(~intra)
    while pending.size:  # rejection sampling of a node from another class
        target[pending] = rng.integers(n, size=pending.size)
        pending = pending[y[target[pending]] == y[source[pending]]]
    return _pair_keys(source, target, n)


def _pair_keys(source: np.ndarray, target: np.ndarray, n: int) -> np.ndarray:
    """The sorted distinct keys ``low * n + high`` of the pairs ``{source[i], target[i]}`` that
    are not self-loops, sorted in place (``target`` is overwritten)."""
    keys = np.minimum(source, target)
    np.maximum(source, target, out=target)
    loops = keys == target
    keys *= n
    keys += target
    keys = keys[~loops]
    keys.sort()
    return keys[np.concatenate(([True], keys[1:] != keys[:-1]))] if keys.size else keys


def _both_directions(keys: np.ndarray, n: int) -> torch.Tensor:
    """The int64 ``[2, 2 K]`` edge index of the ``K`` pair keys in both directions, sorted by
    (row, column); built and sorted inside the output, so the peak is the output plus ``keys``."""
    pairs = keys.size
    edge_index = torch.empty(2, 2 * pairs, dtype=torch.long)
    rows, columns = edge_index.numpy()
    columns[:pairs] = keys                                  # directed keys row * n + column ...
    np.divmod(keys, n, out=(rows[:pairs], columns[pairs:]))
    columns[pairs:] *= n
    columns[pairs:] += rows[:pairs]                         # ... and their reverses
    columns.sort()
    np.floor_divide(columns, n, out=rows)                   # ... split into rows and columns
    np.remainder(columns, n, out=columns)
    return edge_index


def _unit_rows(rng: np.random.Generator, rows: int, columns: int) -> np.ndarray:
    vectors = rng.standard_normal((rows, columns))
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def generate_graphs(seed: int, num_graphs: int = 240, num_classes: int = 3, nodes: tuple[int, int] = (8, 24),
                    degree_cap: int = 15) -> list[Data]:
    """A small graph-classification set that needs no files (tests, the embedded default).

    Graph ``i`` has class ``i % num_classes``, a size drawn from ``nodes`` and random edges with
    a probability that grows with the class (``0.08 + 0.1 c``, jittered by ±0.04), so classes
    differ in density and degree profile and overlap a little; node features are one-hot
    degrees capped at ``degree_cap``. Deterministic from ``seed``.
    """
    rng = np.random.default_rng(seed)
    graphs = []
    for index in range(num_graphs):
        label = index % num_classes
        size = int(rng.integers(nodes[0], nodes[1] + 1))
        probability = 0.08 + 0.1 * label + rng.uniform(-0.04, 0.04)
        upper = np.triu(rng.random((size, size)) < probability, k=1)
        src, dst = np.nonzero(upper | upper.T)
        edge_index = torch.from_numpy(np.stack([src, dst])).long()
        graphs.append(Data(x=one_hot_degree(edge_index, size, degree_cap), edge_index=edge_index,
                           y=torch.tensor([label]), num_nodes=size))
    return graphs


def planted_clients(clients_per_group: int = 3) -> tuple[str, ...]:
    """The client names of :func:`generate_planted_groups`: ``a0, a1, .., b0, ..``."""
    return tuple(f"{group}{index}" for group in "ab" for index in range(clients_per_group))


def generate_planted_groups(seed: int, clients_per_group: int = 3, graphs_per_client: int = 48,
                            num_classes: int = 3) -> dict[str, list[Data]]:
    """Two planted groups of clients whose labels follow different rules (GCFL's premise).

    Every client holds its own :func:`generate_graphs` draw; in group ``a`` a graph's class is
    its density class, in group ``b`` the next one (``(c + 1) mod C``). With every layer shared
    (``model_options: {share: all}``) one model cannot fit both rules, while the clients of a
    group agree: clustered FL should find the groups. Keys ``a0, a1, .., b0, ..``, one client each.
    """
    names = iter(planted_clients(clients_per_group))
    groups = {}
    for shift in (0, 1):                  # group a, then group b
        for index in range(clients_per_group):
            graphs = generate_graphs(seed * 1000 + 500 * shift + index, num_graphs=graphs_per_client,
                                     num_classes=num_classes)
            for graph in graphs:
                graph.y = (graph.y + shift) % num_classes
            groups[next(names)] = graphs
    return groups
