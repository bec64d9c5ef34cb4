"""Aligning the feature spaces of domains whose feature dimensions differ."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import scipy.sparse as sp
import torch
from torch import Tensor
from torch.nn.functional import pad

from fgl_ray.data.types import DomainGraph


def align_features(domains: Sequence[DomainGraph], dim: int, seed: int) -> list[DomainGraph]:
    """Gives every domain a ``dim``-wide feature matrix when their widths differ.

    Each domain is reduced on its own by truncated SVD: its features are projected onto their
    top-``dim`` right singular vectors (``X V_dim``, signs fixed by scikit-learn's ``svd_flip``),
    so column ``k`` of every domain is that domain's ``k``-th principal direction. The feature
    vocabularies of different domains (different Wikipedia pages, different words) have no
    common coordinates, so no shared projection exists; per-domain SVD is the usual choice in
    cross-domain federated graph learning. A domain with ``dim`` or fewer features (or nodes)
    keeps them and is padded with zero columns. Domains that already share one width are
    returned unchanged.

    Args:
        domains: the domains' graphs.
        dim: target feature dimension.
        seed: seed of the randomized SVD, for determinism.

    Returns:
        New :class:`DomainGraph` objects (inputs are not modified).
    """
    if len({domain.data.num_features for domain in domains}) <= 1:
        return list(domains)
    aligned = []
    for domain in domains:
        data = copy.copy(domain.data)
        data.x = reduce_features(domain.data.x, dim, seed)
        aligned.append(DomainGraph(domain.name, data))
    return aligned


def shared_svd_features(domains: Sequence[DomainGraph], dim: int, seed: int) -> list[DomainGraph]:
    """Projects every domain onto one ``dim``-wide truncated SVD fitted on the union of all domains.

    Unlike :func:`align_features`, the projection is shared, so column ``k`` means the same in
    every domain; it needs domains whose raw features share coordinates (Twitch's games, one
    vocabulary). Deterministic from ``seed`` (randomized SVD); signs fixed by scikit-learn.

    Raises:
        ValueError: the domains' feature widths differ.
    """
    widths = sorted({domain.data.num_features for domain in domains})
    if len(widths) > 1:
        raise ValueError(f"a shared SVD needs one feature width across domains, got widths {widths}")
    union = sp.vstack([sp.csr_matrix(domain.data.x.numpy()) for domain in domains]).tocsr()
    rank = min(dim, union.shape[0], union.shape[1] - 1)
    from sklearn.decomposition import TruncatedSVD   # here: importing sklearn costs 0.7 s, every run would pay it

    svd = TruncatedSVD(n_components=rank, random_state=seed).fit(union)
    projected = []
    for domain in domains:
        data = copy.copy(domain.data)
        x = torch.from_numpy(svd.transform(sp.csr_matrix(domain.data.x.numpy())))
        data.x = pad(x.float(), (0, dim - rank))
        projected.append(DomainGraph(domain.name, data))
    return projected


def reduce_features(x: Tensor, dim: int, seed: int) -> Tensor:
    """Truncated SVD of ``x`` to ``dim`` columns, or zero-padding when ``x`` is too small.

    Args:
        x: node features ``[n, f]``.
        dim: target width.
        seed: seed of the randomized SVD.

    Returns:
        float32 features ``[n, dim]``.
    """
    rank = min(dim, x.size(0))
    if x.size(1) > rank:
        from sklearn.decomposition import TruncatedSVD

        svd = TruncatedSVD(n_components=rank, random_state=seed)
        x = torch.from_numpy(svd.fit_transform(sp.csr_matrix(x.numpy())))
    return pad(x.float(), (0, dim - x.size(1)))
