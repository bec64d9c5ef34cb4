"""Named partition settings from the papers (``--partition twitch-S1``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Preset:
    """A dataset with a fixed partitioner, domain ratios and clients per domain."""

    dataset: str
    partitioner: str
    domain_ratios: tuple[int, ...]
    clients_per_domain: int


PRESETS: dict[str, Preset] = {
    "twitch-S1": Preset("twitch", "domain", (1, 1, 1, 1, 1, 1), 2),
    "twitch-S2": Preset("twitch", "domain", (5, 1, 1, 1, 1, 1), 2),
    "twitch-S3": Preset("twitch", "domain", (10, 1, 1, 1, 1, 1), 2),
    "wikinet": Preset("wikinet", "domain", (1, 1, 1), 2),
}
