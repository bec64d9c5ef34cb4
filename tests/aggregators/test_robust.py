"""Robust aggregators against hand computations and a corrupted client."""

import pytest
import torch

from fgl_ray.aggregators import build_aggregator
from fgl_ray.params import ParamLayout

LAYOUT = ParamLayout(names=("w",), shapes=((3,),))
W = torch.zeros(3, dtype=torch.float64)
COUNTS = torch.ones(5)
IDS = [0, 1, 2, 3, 4]
HONEST = torch.tensor([[1.0, 2.0, 3.0], [1.2, 1.8, 3.1], [0.9, 2.1, 2.9], [1.1, 2.0, 3.0]], dtype=torch.float64)
ATTACKED = torch.cat([HONEST, 100 * HONEST[:1]])                           # client 4 sends 100x an update


def _step(name, updates, options=None):
    return -build_aggregator(name, options or {}, LAYOUT, IDS).aggregate(W, updates, COUNTS, IDS, lr=1.0)


def test_median_and_trimmed_mean_by_hand():
    torch.testing.assert_close(_step("median", ATTACKED), ATTACKED.median(dim=0).values)
    even = ATTACKED[:4]
    torch.testing.assert_close(_step("median", even), even.sort(dim=0).values[1:3].mean(dim=0))
    trimmed = _step("trimmed_mean", ATTACKED, {"trim": 0.2})               # drops one value at each end
    torch.testing.assert_close(trimmed, ATTACKED.sort(dim=0).values[1:4].mean(dim=0))


def test_krum_picks_an_honest_update_and_multi_krum_averages_the_best():
    chosen = _step("krum", ATTACKED, {"byzantine": 1})
    assert any(torch.allclose(chosen, row) for row in HONEST)
    two = _step("krum", ATTACKED, {"byzantine": 1, "multi": 2})
    assert two.norm() < 2 * HONEST.norm(dim=1).max()


@pytest.mark.parametrize("name", ["median", "trimmed_mean", "krum"])
def test_a_scaled_update_barely_moves_the_robust_rules_but_drags_the_mean(name):
    options = {"trim": 0.2} if name == "trimmed_mean" else {}
    clean = HONEST.mean(dim=0)
    assert (_step("mean", ATTACKED) - clean).norm() > 10
    assert (_step(name, ATTACKED, options) - clean).norm() < 0.5
