import math

import torch

from fgl_ray.diagnostics import (cosine_to_aggregate, jaccard_overlap, mean_off_diagonal, pairwise_cosine,
                                 random_overlap_reference, top_fraction_masks)


def test_jaccard_of_top_supports_by_hand():
    # 3 clients, 10 coordinates, top 20% = 2 coordinates each.
    updates = torch.zeros(3, 10)
    updates[0, [0, 1]] = torch.tensor([5.0, -4.0])   # support {0, 1}
    updates[1, [1, 2]] = torch.tensor([3.0, 6.0])    # support {1, 2}
    updates[2, [7, 8]] = torch.tensor([-1.0, 2.0])   # support {7, 8}
    overlap = jaccard_overlap(updates, 0.2)
    expected = torch.tensor([[1, 1 / 3, 0], [1 / 3, 1, 0], [0, 0, 1]], dtype=torch.float64)
    torch.testing.assert_close(overlap, expected)
    assert math.isclose(mean_off_diagonal(overlap), (2 / 3) / 6)


def test_masks_keep_ceil_fraction_and_random_reference_matches_simulation():
    generator = torch.Generator().manual_seed(0)
    updates = torch.randn(40, 2000, generator=generator)
    assert top_fraction_masks(updates, 0.05).sum(dim=1).eq(100).all()
    simulated = mean_off_diagonal(jaccard_overlap(updates, 0.05))
    assert abs(simulated - random_overlap_reference(0.05)) < 0.005
    assert math.isclose(random_overlap_reference(0.05), 0.05 / 1.95)


def test_cosines_signs_and_aggregate_projection():
    updates = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    cosine = pairwise_cosine(updates)
    assert cosine[0, 2] == -1 and cosine[0, 1] == 0 and cosine[1, 1] == 1
    to_mean = cosine_to_aggregate(updates, torch.tensor([0.5, 0.5, 0.0]))
    torch.testing.assert_close(to_mean, torch.tensor([1, 1, -1], dtype=torch.float64) / math.sqrt(2))
