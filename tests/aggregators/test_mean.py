import torch

from fgl_ray.aggregators import build_aggregator
from fgl_ray.params import ParamLayout
from fgl_ray.models import build_model


def test_mean_of_descent_updates_equals_sample_weighted_model_average():
    layout = ParamLayout.of(build_model("mlp", 4, 2, hidden=3))
    torch.manual_seed(0)
    weights = torch.randn(layout.size, dtype=torch.float64)
    client_models = torch.randn(3, layout.size, dtype=torch.float64)
    lr = 0.05
    updates = -(client_models - weights) / lr  # the paper's convention u_k = -(W_k - W) / eta
    counts = torch.tensor([10.0, 30.0, 60.0])
    aggregator = build_aggregator("mean", {}, layout, [0, 1, 2])
    new = aggregator.aggregate(weights, updates, counts, [0, 1, 2], lr)
    expected = sum(c * m for c, m in zip(counts.double(), client_models)) / counts.sum()
    torch.testing.assert_close(new, expected)


def test_mean_with_zero_counts_is_uniform():
    layout = ParamLayout.of(build_model("mlp", 4, 2, hidden=3))
    weights = torch.zeros(layout.size)
    updates = torch.stack([torch.ones(layout.size), 3 * torch.ones(layout.size)])
    new = build_aggregator("mean", {}, layout, [0, 1]).aggregate(weights, updates, torch.zeros(2), [0, 1], 1.0)
    torch.testing.assert_close(new, -2 * torch.ones(layout.size))
