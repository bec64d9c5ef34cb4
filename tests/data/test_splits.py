"""Per-client random train/val/test masks."""

import pytest
import torch

from fgl_ray.data.splits import client_generator, random_split_masks


@pytest.mark.parametrize("num_nodes", [10, 97, 300])
@pytest.mark.parametrize("fractions", [(0.6, 0.2, 0.2), (0.6, 0.1, 0.3), (0.1, 0.2, 0.7)])
def test_fractions_disjoint_and_cover(num_nodes, fractions):
    masks = random_split_masks(num_nodes, fractions, torch.Generator().manual_seed(0))
    stacked = torch.stack(masks).int()
    assert all(mask.dtype == torch.bool and mask.numel() == num_nodes for mask in masks)
    assert torch.equal(stacked.sum(0), torch.ones(num_nodes, dtype=torch.int))  # disjoint and covering
    for mask, fraction in zip(masks, fractions):
        assert abs(int(mask.sum()) - fraction * num_nodes) <= 1


def test_a_positive_train_fraction_gives_at_least_one_training_node():
    train, _, _ = random_split_masks(3, (0.1, 0.2, 0.7), torch.Generator().manual_seed(0))
    assert int(train.sum()) == 1


def test_client_seeding_is_per_client():
    def masks(seed, client):
        return random_split_masks(200, (0.6, 0.2, 0.2), client_generator(seed, client))

    assert all(torch.equal(a, b) for a, b in zip(masks(0, 3), masks(0, 3)))
    assert not torch.equal(masks(0, 3)[0], masks(0, 4)[0])
    assert not torch.equal(masks(0, 3)[0], masks(1, 3)[0])


def test_bad_fractions_are_rejected():
    with pytest.raises(ValueError, match="sum to 1"):
        random_split_masks(10, (0.6, 0.2, 0.3), torch.Generator())
