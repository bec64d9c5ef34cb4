import torch

from fgl_ray.models import build_model
from fgl_ray.params import ParamLayout, load_trainable_vector, trainable_vector


def test_vector_roundtrip_and_layout_slices_match_named_parameters():
    model = build_model("gcn", 7, 3, hidden=5)
    layout = ParamLayout.of(model)
    vector = torch.randn(layout.size)
    load_trainable_vector(model, vector)
    assert torch.equal(trainable_vector(model), vector)
    named = dict(model.named_parameters())
    for name, part in layout.slices().items():
        assert torch.equal(named[name].detach().reshape(-1), vector[part])


def test_module_groups_cover_the_vector_once():
    layout = ParamLayout.of(build_model("mlp", 7, 3, hidden=5, num_layers=3))
    for by in ("tensor", "module"):
        covered = torch.zeros(layout.size, dtype=torch.int64)
        for part in layout.groups(by):
            covered[part] += 1
        assert bool((covered == 1).all())
    assert len(layout.groups("module")) == 3 and len(layout.groups("tensor")) == 6


def test_loading_copies_so_training_never_writes_into_the_source_vector():
    model = build_model("mlp", 7, 3, hidden=5)
    source = torch.randn(ParamLayout.of(model).size)
    kept = source.clone()
    load_trainable_vector(model, source)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(1.0)
    assert torch.equal(source, kept)
