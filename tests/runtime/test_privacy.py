"""Update clipping and Gaussian noise on the aggregate (DP-FedAvg style)."""

import pytest
import torch

from fgl_ray.aggregators.privacy import clip_update
from fgl_ray.config import ConfigError
from fgl_ray.runtime import open_backend


def test_clipping_bounds_the_norm_and_keeps_the_direction():
    small, large = torch.tensor([0.3, 0.4]), torch.tensor([30.0, 40.0])
    assert clip_update(small, 1.0) == (small, False)
    clipped, scaled = clip_update(large, 1.0)
    assert scaled and torch.isclose(torch.linalg.vector_norm(clipped), torch.tensor(1.0))
    assert torch.allclose(clipped / clipped.norm(), large / large.norm())


def _one_round_change(config, data):
    handle = open_backend(config, data)
    try:
        before = handle.global_weights().clone()
        result = handle.run_round(0)
        return handle.global_weights() - before, result
    finally:
        handle.close()


def test_a_clipped_round_moves_the_model_at_most_lr_times_the_clip(tiny_config, tiny_data):
    attack = [{"kind": "scale", "clients": [0], "factor": 1000.0}]
    change, result = _one_round_change(tiny_config(backend="local", clip_norm=0.01, faults=attack), tiny_data)
    config = tiny_config(backend="local")
    assert float(change.norm()) <= config.lr * 0.01 * (1 + 1e-6)
    assert result.updates[0]["clipped"] == 1.0
    unclipped, _ = _one_round_change(tiny_config(backend="local", faults=attack), tiny_data)
    assert float(unclipped.norm()) > 100 * float(change.norm())


def test_noise_has_the_stated_scale_and_is_reproducible(tiny_config, tiny_data):
    clip, sigma = 0.01, 5.0
    wide = {"backend": "local", "clip_norm": clip, "hidden": 256}                  # enough weights to estimate a std
    quiet, _ = _one_round_change(tiny_config(**wide), tiny_data)
    noisy, result = _one_round_change(tiny_config(**wide, noise_multiplier=sigma), tiny_data)
    again, _ = _one_round_change(tiny_config(**wide, noise_multiplier=sigma), tiny_data)
    assert noisy.numel() > 2000
    assert torch.equal(noisy, again)
    largest = max(result.aggregation_weights.values())
    expected = tiny_config().lr * sigma * clip * largest
    assert float((noisy - quiet).std()) == pytest.approx(expected, rel=0.1)


def test_noise_without_a_clip_is_refused(tiny_config):
    with pytest.raises(ConfigError, match="give --clip-norm too"):
        tiny_config(noise_multiplier=1.0)
