import pytest
import torch
from torch_geometric.nn import GCNConv
from torch_geometric.utils import to_undirected

from fgl_ray.models import MODELS, build_model


def _graph(num_nodes=12, num_features=6, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(num_nodes, num_features, generator=generator)
    ring = torch.stack([torch.arange(num_nodes), (torch.arange(num_nodes) + 1) % num_nodes])
    return x, to_undirected(ring)


@pytest.mark.parametrize("name", MODELS.names())
def test_every_model_maps_nodes_to_class_logits_and_encodes_at_hidden_width(name):
    x, edge_index = _graph()
    model = build_model(name, 6, 3, hidden=8).eval()
    assert model(x, edge_index).shape == (12, 3)
    assert model.encode(x, edge_index).shape == (12, 8)


def test_unknown_model_option_lists_the_valid_ones():
    with pytest.raises(ValueError, match="propagate_in_training"):
        build_model("pmlp_gcn", 6, 3, colour="red")


def test_pmlp_trains_without_the_graph_and_propagates_at_evaluation():
    x, edge_index = _graph()
    other_edges = to_undirected(torch.tensor([[0, 3, 5], [7, 9, 11]]))
    model = build_model("pmlp_gcn", 6, 3, hidden=8, dropout=0.0)
    model.train()
    torch.testing.assert_close(model(x, edge_index), model(x, other_edges))
    model.eval()
    assert not torch.allclose(model(x, edge_index), model(x, other_edges))
    always = build_model("pmlp_gcn", 6, 3, hidden=8, dropout=0.0, propagate_in_training=True).train()
    assert not torch.allclose(always(x, edge_index), always(x, other_edges))


def test_pmlp_propagation_equals_pyg_gcnconv_with_the_same_weights():
    x, edge_index = _graph()
    model = build_model("pmlp_gcn", 6, 3, hidden=8).eval()
    with torch.no_grad():
        model.biases[0].copy_(torch.randn(8))
    conv = GCNConv(6, 8)
    with torch.no_grad():
        conv.lin.weight.copy_(model.linears[0].weight)
        conv.bias.copy_(model.biases[0])
    torch.testing.assert_close(model._layer(0, x, edge_index), conv(x, edge_index))


def test_pmlp_batchnorm_has_no_parameters_or_buffers():
    model = build_model("pmlp_gcn", 6, 3, hidden=8)
    assert not [b for b in model.buffers() if b.is_floating_point()]
    assert all("norms" not in name for name, _ in model.named_parameters())
