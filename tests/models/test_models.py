import pytest
import torch
from torch_geometric.nn import GCNConv
from torch_geometric.utils import to_undirected

from fgl_ray.models import MODELS, build_model
from fgl_ray.models.base import model_options


def _graph(num_nodes=12, num_features=6, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(num_nodes, num_features, generator=generator)
    ring = torch.stack([torch.arange(num_nodes), (torch.arange(num_nodes) + 1) % num_nodes])
    return x, to_undirected(ring)


NODE_MODELS = [n for n in MODELS.names()
               if "node-classification" in MODELS.get(n).tasks and "modality_dims" not in model_options(n)]


@pytest.mark.parametrize("name", NODE_MODELS)
def test_every_node_model_maps_nodes_to_class_logits_and_encodes_at_hidden_width(name):
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


def _graphs():
    from torch_geometric.data import Batch, Data

    first = Data(x=torch.randn(5, 6, generator=torch.Generator().manual_seed(1)),
                 edge_index=to_undirected(torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])))
    second = Data(x=torch.randn(3, 6, generator=torch.Generator().manual_seed(2)),
                  edge_index=to_undirected(torch.tensor([[0, 1], [1, 2]])))
    permutation = torch.tensor([4, 2, 0, 3, 1])                    # the first graph with its nodes renumbered
    inverse = torch.argsort(permutation)
    shuffled = Data(x=first.x[permutation], edge_index=inverse[first.edge_index])
    return Batch.from_data_list([first, second, shuffled])


def test_gin_gives_one_row_per_graph_and_ignores_node_order():
    batch = _graphs()
    model = build_model("gin", 6, 3, hidden=8, num_layers=3).eval()
    z = model.encode(batch.x, batch.edge_index, batch.batch)
    assert z.shape == (3, 8) and model.classify(z).shape == (3, 3)
    torch.testing.assert_close(z[0], z[2])                          # sum pooling: invariant to node order
    assert not torch.allclose(z[0], z[1])


def test_gin_shares_only_its_convolutions_unless_told_otherwise():
    from fgl_ray.params import ParamLayout

    convs = ParamLayout.of(build_model("gin", 6, 3, hidden=8))
    assert convs.names and all(name.startswith("convs.") for name in convs.names)
    everything = ParamLayout.of(build_model("gin", 6, 3, hidden=8, share="all"))
    assert {"embedding.weight", "readout.weight"} <= set(everything.names)
    # the shared part does not depend on the input width or the label count
    assert ParamLayout.of(build_model("gin", 40, 7, hidden=8)) == convs


def test_mm_gnn_gives_readout_and_modality_views_and_needs_its_widths():
    from fgl_ray.data.multimodal import pack

    x, edge_index = _graph()
    packed = pack(x[:, :4], x[:, 4:])
    model = build_model("mm_gnn", 8, 3, hidden=8, modality_dims=(4, 2)).eval()
    z = model.encode(packed, edge_index)
    assert z.shape == (12, 24) and model.classify(z).shape == (12, 3)
    visual, text = model.modality_views(z)
    assert visual.shape == text.shape == (12, 8)
    assert model.score_links(z, edge_index).shape == (edge_index.shape[1],)
    with pytest.raises(ValueError, match="needs modality_dims"):
        build_model("mm_gnn", 8, 3)
    with pytest.raises(ValueError, match="2 availability bits"):
        build_model("mm_gnn", 9, 3, modality_dims=(4, 2))


def _multigraph(num_nodes=30, num_edges=160, seed=4):
    """Random directed edges with repeats and nodes without in-edges."""
    generator = torch.Generator().manual_seed(seed)
    edges = torch.randint(0, num_nodes - 5, (2, num_edges), generator=generator)   # the last 5 nodes: no in-edges
    edges[:, :20] = edges[:, 20:40]                                                 # repeated edges
    return torch.randn(num_nodes, 6, generator=generator), edges


@pytest.mark.parametrize("name", ["gcn", "sage"])
def test_csr_and_scatter_aggregation_agree_forward_and_backward(name):
    """The sparse-matrix product equals PyG's per-edge scatter: identical logits (whole graph,
    repeated edges, nodes without in-edges), gradients to float tolerance."""
    x, edge_index = _multigraph()
    torch.manual_seed(0)
    csr = build_model(name, 6, 3, hidden=8, dropout=0.0)
    scatter = build_model(name, 6, 3, hidden=8, dropout=0.0, aggregation="scatter")
    scatter.load_state_dict(csr.state_dict())
    outputs = []
    for model in (csr, scatter):
        out = model(x, edge_index)
        out.square().sum().backward()
        outputs.append((out.detach(), [p.grad for p in model.parameters()]))
    assert torch.equal(outputs[0][0], outputs[1][0])
    for a, b in zip(outputs[0][1], outputs[1][1]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_graphsage_csr_follows_the_graph_it_is_shown_and_its_sampled_hops_and_chunks():
    from fgl_ray.tasks.sampling import InEdgeChunks

    x, edge_index = _multigraph()
    other_x, other_edges = _multigraph(num_nodes=20, num_edges=90, seed=5)
    torch.manual_seed(0)
    csr = build_model("sage", 6, 3, hidden=8).eval()
    scatter = build_model("sage", 6, 3, hidden=8, aggregation="scatter").eval()
    scatter.load_state_dict(csr.state_dict())
    with torch.no_grad():
        assert torch.equal(csr(x, edge_index), scatter(x, edge_index))
        assert torch.equal(csr(other_x, other_edges), scatter(other_x, other_edges))   # not the cached graph
        chunks = InEdgeChunks(edge_index, x.shape[0], chunk=4)
        chunked = csr.classify(csr.encode(x, edge_index, chunks=chunks), edge_index, chunks=chunks)
        torch.testing.assert_close(chunked, scatter(x, edge_index), rtol=0, atol=1e-6)


def test_model_option_values_are_checked_against_their_annotations():
    with pytest.raises(ValueError, match="option aggregation: must be 'csr' or 'scatter', got 'dense'"):
        build_model("sage", 6, 3, aggregation="dense")
    with pytest.raises(ValueError, match="option aggregation: must be 'csr' or 'scatter', got 'mean'"):
        build_model("gcn", 6, 3, aggregation="mean")
    with pytest.raises(ValueError, match="option share: must be 'convs' or 'all'"):
        build_model("gin", 6, 3, share="some")
    with pytest.raises(ValueError, match="option propagate_in_training: input should be a valid boolean"):
        build_model("pmlp_gcn", 6, 3, propagate_in_training="maybe")
    with pytest.raises(ValueError, match="option propagate_in_training: input should be a valid boolean, got 'false'"):
        build_model("pmlp_gcn", 6, 3, propagate_in_training="false")    # a true string: refused, not taken as True
    assert build_model("mm_gnn", 8, 3, modality_dims=[4, 2]).modality_dims == (4, 2)   # YAML gives lists
    for name in ("gcn", "sage"):    # built directly, past the option check
        with pytest.raises(ValueError, match=f"{name} aggregation must be 'csr' or 'scatter', got 'dense'"):
            MODELS.get(name)(6, 3, aggregation="dense")


@pytest.mark.parametrize("name", ["gcn", "sage"])
def test_csr_and_scatter_agree_on_a_graph_without_edges(name):
    x = torch.randn(7, 6)
    torch.manual_seed(0)
    csr = build_model(name, 6, 3, hidden=8).eval()
    scatter = build_model(name, 6, 3, hidden=8, aggregation="scatter").eval()
    scatter.load_state_dict(csr.state_dict())
    with torch.no_grad():
        assert torch.equal(csr(x, torch.empty(2, 0, dtype=torch.long)),
                           scatter(x, torch.empty(2, 0, dtype=torch.long)))


@pytest.mark.parametrize("name", NODE_MODELS)
def test_a_used_model_copies_and_pickles_without_its_graph_cache(name):
    """Models keep the last graph's propagation (a sparse CSR matrix for gcn, sage, pmlp_gcn), which
    deepcopy cannot take: copies and pickles start with an empty cache and compute the same."""
    import copy
    import io

    x, edge_index = _graph()
    model = build_model(name, 6, 3, hidden=8, **({"propagate_in_training": True} if name == "pmlp_gcn" else {})).eval()
    with torch.no_grad():
        expected = model(x, edge_index)
        buffer = io.BytesIO()
        torch.save(model, buffer)
        buffer.seek(0)
        for twin in (copy.deepcopy(model), torch.load(buffer, weights_only=False)):
            assert torch.equal(twin(x, edge_index), expected)


def test_graph_cache_keeps_the_largest_graph_while_smaller_ones_pass_through():
    import pickle

    from fgl_ray.models.base import GraphCache

    builds = []
    cache = GraphCache()

    def get(edges, key=0):
        return cache.get(edges, key, lambda: builds.append(edges) or len(builds))

    whole, batches = torch.zeros(2, 3), [torch.zeros(2, 1) for _ in range(4)]
    for batch in batches[:2]:                          # training first, each batch asked for twice
        assert get(batch) == get(batch)
    assert get(whole) == get(whole) == 3
    for batch in batches[2:]:
        assert get(batch) == get(batch)
    assert get(whole) == 3 and len(builds) == 5        # the whole graph survived the batches
    assert get(batches[3]) == 5                        # and so did the latest batch
    assert get(whole, key=1) == 6                      # another key is another value
    larger = torch.zeros(2, 4)
    assert get(larger) == 7 and get(whole, key=1) == 6    # a larger graph keeps the one it replaced
    cache.clear()
    assert get(whole) == 8
    old = pickle.loads(pickle.dumps(cache).replace(b"empty", b"_entr"))   # a one-entry cache's pickle
    assert old.get(whole, 0, lambda: "built") == "built"


@pytest.mark.parametrize("name", ["gcn", "sage", "pmlp_gcn"])
def test_evaluation_between_sampled_batches_reuses_the_whole_graphs_matrix(name, monkeypatch):
    """Training on sampled batches (a new, smaller edge tensor each step, asked for by each layer)
    must not evict the whole graph's CSR matrix, or every evaluation rebuilds it."""
    import fgl_ray.models.base as base
    import fgl_ray.models.pmlp as pmlp
    import fgl_ray.models.sage as sage

    built = []
    original = base.in_edge_matrix

    def counting(edge_index, values, size):
        built.append(edge_index.shape[1])
        return original(edge_index, values, size)

    def normalise(edge_index, num_nodes, normalise=pmlp.NormalisedAdjacency._normalise):
        built.append(edge_index.shape[1])
        return normalise(edge_index, num_nodes)

    for module in (base, sage):
        monkeypatch.setattr(module, "in_edge_matrix", counting)
    monkeypatch.setattr(pmlp.NormalisedAdjacency, "_normalise", staticmethod(normalise))
    x, edge_index = _graph()
    options = {"propagate_in_training": True} if name == "pmlp_gcn" else {}
    model = build_model(name, 6, 3, hidden=8, **options)
    evaluations = []
    with torch.no_grad():
        for round_ in range(3):
            model.train()
            for step in range(2):
                model(x, edge_index[:, step::2])
            evaluations.append(model.eval()(x, edge_index))
    assert all(torch.equal(evaluation, evaluations[0]) for evaluation in evaluations)
    assert built.count(max(built)) == 1 and len(built) == 1 + 3 * 2   # one per batch, the whole graph once


def test_in_edges_by_target_lists_each_nodes_in_edges_in_their_original_order():
    from fgl_ray.models.base import in_edges_by_target

    generator = torch.Generator().manual_seed(3)
    edge_index = torch.randint(0, 9, (2, 60), generator=generator)     # repeats, and nodes 9-10 without in-edges
    colptr, order = in_edges_by_target(edge_index, 11)
    assert colptr.tolist()[-3:] == [60, 60, 60]
    for v in range(11):
        expected = (edge_index[1] == v).nonzero().flatten().tolist()
        assert order[colptr[v]:colptr[v + 1]].tolist() == expected
    # the GPU's pointers (a search in the sorted targets) equal the CPU's counts
    assert torch.equal(torch.searchsorted(edge_index[1][order], torch.arange(12)), colptr)
    empty = in_edges_by_target(torch.empty(2, 0, dtype=torch.long), 4)
    assert empty[0].tolist() == [0] * 5 and empty[1].numel() == 0


def test_feature_dropout_keeps_sparse_features_sparse_with_dense_dropouts_distribution():
    from fgl_ray.models.base import dropout_features

    torch.manual_seed(0)
    x = (torch.rand(400, 300) < 0.05).float() * torch.rand(400, 300)
    sparse = x.to_sparse_csr()
    assert torch.equal(dropout_features(sparse, 0.5, training=False).to_dense(), x)
    dropped = dropout_features(sparse, 0.5, training=True)
    assert dropped.layout == torch.sparse_csr
    dense = dropped.to_dense()
    assert torch.equal(dense[x == 0], torch.zeros(int((x == 0).sum())))            # a zero stays zero
    kept = dense[x != 0] != 0
    torch.testing.assert_close(dense[x != 0][kept], 2 * x[x != 0][kept])             # kept entries scale by 1/(1-p)
    assert abs(float(kept.float().mean()) - 0.5) < 0.05                                # each kept with 1 - p


def test_acm_gcn_gives_the_same_logits_and_gradients_on_sparse_features():
    torch.manual_seed(0)
    x = (torch.rand(60, 40) < 0.1).float()
    edge_index = to_undirected(torch.randint(0, 60, (2, 150)))
    model = build_model("acm_gcn", 40, 3, hidden=8, dropout=0.5).eval()
    outputs = {}
    for layout, features in (("dense", x), ("sparse", x.to_sparse_csr())):
        model.zero_grad()
        logits = model(features, edge_index)
        logits.square().sum().backward()
        outputs[layout] = logits.detach(), [p.grad.clone() for p in model.parameters()]
    torch.testing.assert_close(outputs["sparse"][0], outputs["dense"][0])
    for sparse_grad, dense_grad in zip(outputs["sparse"][1], outputs["dense"][1]):
        torch.testing.assert_close(sparse_grad, dense_grad)
