"""Seeds derived from (base seed, round, client) so results do not depend on placement."""

from __future__ import annotations

import numpy as np


def derive_seed(*parts: int) -> int:
    """A 63-bit seed mixed from integer ``parts`` (numpy SeedSequence)."""
    return int(np.random.SeedSequence([int(p) & 0xFFFFFFFF for p in parts]).generate_state(2, np.uint64)[0] >> 1)
