"""Aligning feature spaces of domains with different widths."""

import torch
from torch_geometric.data import Data

from fgl_ray.data.features import align_features
from fgl_ray.data.types import DomainGraph


def _domain(name, num_nodes, num_features, seed):
    generator = torch.Generator().manual_seed(seed)
    x = (torch.rand(num_nodes, num_features, generator=generator) < 0.1).float()
    return DomainGraph(name, Data(x=x, edge_index=torch.empty(2, 0, dtype=torch.long),
                                  y=torch.zeros(num_nodes, dtype=torch.long)))


def test_widths_become_dim_and_inputs_are_untouched():
    domains = [_domain("a", 80, 300, 0), _domain("b", 60, 150, 1)]
    before = [domain.data.x.clone() for domain in domains]
    aligned = align_features(domains, 16, seed=0)
    assert [domain.name for domain in aligned] == ["a", "b"]
    for domain, original in zip(aligned, domains):
        assert domain.data.x.shape == (original.data.num_nodes, 16)
        assert domain.data.x.dtype == torch.float32
        assert domain.data.y is original.data.y
    assert all(torch.equal(domain.data.x, x) for domain, x in zip(domains, before))


def test_alignment_is_deterministic():
    domains = [_domain("a", 80, 300, 0), _domain("b", 60, 150, 1)]
    first, second = align_features(domains, 16, seed=3), align_features(domains, 16, seed=3)
    assert all(torch.equal(a.data.x, b.data.x) for a, b in zip(first, second))


def test_narrow_domain_is_zero_padded():
    narrow = _domain("narrow", 50, 10, 2)
    aligned = align_features([_domain("wide", 80, 300, 0), narrow], 16, seed=0)
    x = aligned[1].data.x
    assert x.shape == (50, 16)
    assert torch.equal(x[:, :10], narrow.data.x)
    assert not x[:, 10:].any()


def test_equal_widths_are_left_alone():
    domains = [_domain("a", 30, 20, 0), _domain("b", 40, 20, 1)]
    aligned = align_features(domains, 8, seed=0)
    assert all(a.data is b.data for a, b in zip(aligned, domains))


def test_shared_svd_puts_every_domain_in_one_space():
    import numpy as np

    from fgl_ray.data.features import shared_svd_features

    domains = [_domain("a", 80, 40, 0), _domain("b", 60, 40, 1)]
    common_row = domains[0].data.x[3].clone()
    domains[1].data.x[5] = common_row                      # the same raw features in both domains
    projected = shared_svd_features(domains, 8, seed=0)
    assert [d.data.x.shape for d in projected] == [(80, 8), (60, 8)]
    torch.testing.assert_close(projected[0].data.x[3], projected[1].data.x[5])
    # the columns of the projected union have the norms of the union's top singular values
    union = torch.cat([d.data.x for d in domains]).numpy().astype(np.float64)
    singular = np.linalg.svd(union, compute_uv=False)[:8]
    norms = torch.cat([d.data.x for d in projected]).double().norm(dim=0).numpy()
    np.testing.assert_allclose(norms, singular, rtol=1e-3)
    again = shared_svd_features(domains, 8, seed=0)
    assert all(torch.equal(p.data.x, q.data.x) for p, q in zip(projected, again))


def test_shared_svd_refuses_different_widths():
    import pytest

    from fgl_ray.data.features import shared_svd_features

    with pytest.raises(ValueError, match="one feature width"):
        shared_svd_features([_domain("a", 30, 20, 0), _domain("b", 30, 10, 1)], 4, seed=0)
