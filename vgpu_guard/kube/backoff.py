"""Bounded exponential backoff with jitter, for loops that must retry forever without hammering.

Why jitter: after an API server restart every replica's watches break at the same moment; without
jitter they all relist in lock step. Why bounded: a cache that waits ten minutes to retry is a cache
that is wrong for ten minutes. The random source is injected so tests are deterministic.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["Backoff"]


@dataclass
class Backoff:
    """``next()`` gives the delay before the next attempt; ``reset()`` after a success.

    Delays grow ``initial * factor**n`` up to ``maximum``, each scaled by a random factor in
    ``[1 - jitter, 1]`` (never above ``maximum``).
    """

    initial: float = 0.2
    maximum: float = 30.0
    factor: float = 2.0
    jitter: float = 0.2
    rng: random.Random = field(default_factory=random.Random)
    attempts: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.initial <= self.maximum:
            raise ValueError(f"need 0 < initial <= maximum, got {self.initial} and {self.maximum}")
        if self.factor < 1 or not 0 <= self.jitter < 1:
            raise ValueError("factor must be >= 1 and jitter in [0, 1)")

    def next(self) -> float:
        # min() before the power would overflow on long outages.
        base = min(self.maximum, self.initial * self.factor ** min(self.attempts, 64))
        self.attempts += 1
        return base * (1 - self.jitter * self.rng.random())

    def reset(self) -> None:
        self.attempts = 0
