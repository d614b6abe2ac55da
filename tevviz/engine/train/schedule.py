"""The learning-rate schedule every trainer in tevviz uses: a linear warm-up, then a cosine down to a floor."""

from __future__ import annotations

import math


def lr_scale(step: int, steps: int, warmup: int, floor: float = 0.0) -> float:
    """The multiplier of the peak learning rate at `step` (counted from 1) of `steps`: step / warmup for the first
    `warmup` steps, then a cosine from 1 down to `floor` at the last step."""
    if step <= warmup:
        return step / max(warmup, 1)
    t = min((step - warmup) / max(steps - warmup, 1), 1.0)
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t))
