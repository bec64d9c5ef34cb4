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


def test_stratified_split_cuts_every_class_at_the_fractions():
    from fgl_ray.data.splits import stratified_split_masks

    y = torch.tensor([0] * 50 + [1] * 30 + [2] * 7 + [3] * 1)
    fractions = (0.6, 0.2, 0.2)
    masks = stratified_split_masks(y, fractions, torch.Generator().manual_seed(0))
    assert torch.equal(torch.stack(masks).int().sum(0), torch.ones(y.numel(), dtype=torch.int))
    for label in range(4):
        members = y == label
        count = int(members.sum())
        train = int((masks[0] & members).sum())
        assert train >= 1
        for mask, fraction in zip(masks[:2], fractions[:2]):
            assert abs(int((mask & members).sum()) - fraction * count) <= 1


def test_stratified_split_is_seeded():
    from fgl_ray.data.splits import split_masks

    y = torch.arange(40) % 3
    a = split_masks(y, (0.6, 0.2, 0.2), "stratified", torch.Generator().manual_seed(1))
    b = split_masks(y, (0.6, 0.2, 0.2), "stratified", torch.Generator().manual_seed(1))
    c = split_masks(y, (0.6, 0.2, 0.2), "stratified", torch.Generator().manual_seed(2))
    assert all(torch.equal(p, q) for p, q in zip(a, b))
    assert not torch.equal(a[0], c[0])


def test_random_split_mode_is_unchanged_by_the_dispatcher():
    from fgl_ray.data.splits import split_masks

    y = torch.arange(40) % 3
    direct = random_split_masks(40, (0.6, 0.2, 0.2), torch.Generator().manual_seed(5))
    routed = split_masks(y, (0.6, 0.2, 0.2), "random", torch.Generator().manual_seed(5))
    assert all(torch.equal(p, q) for p, q in zip(direct, routed))
