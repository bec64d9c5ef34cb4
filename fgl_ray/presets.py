"""Named experiment presets (``--preset twitch-S3``): the papers' settings, overridable.

A preset supplies defaults; any field given explicitly (flag, YAML or dict) wins.
"""

from __future__ import annotations

from typing import Any

#: FedIA paper, Appendix A: PMLP-GCN (2 layers, hidden 128), SGD lr 0.05, momentum 0.9,
#: weight decay 1e-5, five local iterations, 200 rounds, full participation, last-20 summary.
FEDIA_TRAINING: dict[str, Any] = {
    "model": "pmlp_gcn", "hidden": 128, "num_layers": 2, "optimizer": "sgd", "lr": 0.05, "momentum": 0.9,
    "weight_decay": 1e-5, "local_epochs": 5, "rounds": 200, "fraction_fit": 1.0, "last_k": 20,
}

EXPERIMENT_PRESETS: dict[str, dict[str, Any]] = {
    "twitch-S1": FEDIA_TRAINING | {"dataset": "twitch", "partition": "twitch-S1", "split": (0.6, 0.1, 0.3)},
    "twitch-S2": FEDIA_TRAINING | {"dataset": "twitch", "partition": "twitch-S2", "split": (0.6, 0.1, 0.3)},
    "twitch-S3": FEDIA_TRAINING | {"dataset": "twitch", "partition": "twitch-S3", "split": (0.6, 0.1, 0.3)},
    "wikinet": FEDIA_TRAINING | {"dataset": "wikinet", "partition": "wikinet", "split": (0.6, 0.2, 0.2)},
}


def apply_preset(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` over the defaults of the preset it names (if any).

    Raises:
        ValueError: the preset is unknown; the message lists the valid ones.
    """
    name = values.get("preset")
    if name is None:
        return values
    if name not in EXPERIMENT_PRESETS:
        raise ValueError(f"unknown preset {name!r}; valid presets: {', '.join(sorted(EXPERIMENT_PRESETS))}")
    return EXPERIMENT_PRESETS[name] | values
