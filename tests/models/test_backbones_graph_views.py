"""A backbone that caches its graph's normalisation must still follow another graph it is given."""

import pytest
import torch
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from fgl_ray.models.base import build_model


@pytest.mark.parametrize("name", ["gcn", "pmlp_gcn"])
def test_a_call_with_other_edges_is_normalised_anew_and_matches_a_fresh_model(name):
    torch.manual_seed(0)
    x = torch.randn(8, 5)
    ring = torch.stack([torch.arange(8), (torch.arange(8) + 1) % 8])
    ring = torch.cat([ring, ring.flip(0)], dim=1)
    star = torch.stack([torch.zeros(7, dtype=torch.long), torch.arange(1, 8)])
    star = torch.cat([star, star.flip(0)], dim=1)
    model = build_model(name, 5, 3, hidden=4).eval()
    fresh = build_model(name, 5, 3, hidden=4).eval()
    fresh.load_state_dict(model.state_dict())
    on_ring = model.classify(model.encode(x, ring), ring)
    on_star = model.classify(model.encode(x, star), star)
    assert not torch.allclose(on_ring, on_star)
    torch.testing.assert_close(on_star, fresh.classify(fresh.encode(x, star), star))
    torch.testing.assert_close(model.classify(model.encode(x, ring), ring), on_ring)


def test_gcn_propagates_with_the_symmetric_normalisation_of_its_graph():
    torch.manual_seed(1)
    x = torch.randn(6, 3)
    edges = torch.tensor([[0, 1, 1, 2, 3, 4], [1, 0, 2, 1, 4, 3]])
    model = build_model("gcn", 3, 2, hidden=4, num_layers=1).eval()
    conv = model.convs[0]
    index, weight = gcn_norm(edges, None, 6, add_self_loops=True)
    dense = torch.zeros(6, 6)
    dense[index[1], index[0]] = weight
    torch.testing.assert_close(model.classify(x, edges), dense @ conv.lin(x) + conv.bias)
