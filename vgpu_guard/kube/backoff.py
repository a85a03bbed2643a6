"""Bounded exponential backoff with jitter, per key: the one retry policy of every loop we run.

Why one: retries used to live in four places with four formulas (the informers' backoff, one
global Binder backoff, the run loop's own doubling, the held nodes' own doubling), so a node that
failed slowed every other node's bindings and the same outage was paced four ways (issue 44). Now
each of them asks a ``Backoff`` for the delay of its key, as client-go's
``ItemExponentialFailureRateLimiter`` does for a workqueue item: an informer has one key, the
Binder and the controller's node queue key by node, the run loop by what failed (the pass, the
Lease). ``reset(key)`` is client-go's ``Forget``: a success starts that key over and no other.

Why jitter: after an API server restart every replica's watches break at the same moment; without
jitter they all relist in lock step. Why bounded: a cache that waits ten minutes to retry is a cache
that is wrong for ten minutes. The random source is injected so tests are deterministic.
"""

from __future__ import annotations

import random
from collections.abc import Hashable
from dataclasses import dataclass, field

__all__ = ["ONE", "Backoff"]

# The key of a loop that retries one thing (an informer's list-and-watch).
ONE = "-"


@dataclass
class Backoff:
    """``next(key)`` gives the delay before ``key``'s next attempt; ``reset(key)`` after a success.

    Delays grow ``initial * factor**n`` up to ``maximum`` with the n-th failure of the key in a row,
    each scaled by a random factor in ``[1 - jitter, 1]`` (never above ``maximum``). Keys never
    failed, or reset, hold no memory: the table is as large as what is failing now.
    """

    initial: float = 0.2
    maximum: float = 30.0
    factor: float = 2.0
    jitter: float = 0.2
    rng: random.Random = field(default_factory=random.Random)
    _failures: dict[Hashable, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not 0 < self.initial <= self.maximum:
            raise ValueError(f"need 0 < initial <= maximum, got {self.initial} and {self.maximum}")
        if self.factor < 1 or not 0 <= self.jitter < 1:
            raise ValueError("factor must be >= 1 and jitter in [0, 1)")

    def next(self, key: Hashable = ONE) -> float:
        """Count one more failure of ``key`` and return how long to wait before trying it again."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        # min() before the power would overflow on long outages.
        base = min(self.maximum, self.initial * self.factor ** min(failures, 64))
        return base * (1 - self.jitter * self.rng.random())

    def reset(self, key: Hashable = ONE) -> None:
        """``key`` succeeded: its next failure waits ``initial`` again (client-go's ``Forget``)."""
        self._failures.pop(key, None)

    def attempts(self, key: Hashable = ONE) -> int:
        """Failures of ``key`` in a row (client-go's ``NumRequeues``)."""
        return self._failures.get(key, 0)

    def failing(self) -> int:
        """How many keys are failing now."""
        return len(self._failures)
