"""Equal pieces of cached objects held once: hash-consing for watch caches.

Replicas of one workload carry the same containers (resources, ports), tolerations, affinity,
owner and labels; bound pods the same one-word status. A watch decodes every pod into its own
dicts, so 100,000 pods of a few workloads hold 100,000 copies of a few values: most of a
controller's memory once the volatile fields are projected away. ``SharedParts`` hands back the
first equal piece it saw instead, keyed by the piece's compact JSON (the C encoder: ~1-2 µs for a
container). Safe only because cached objects are never mutated (the informer's contract).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["SharedParts"]

_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


class SharedParts:
    """``share(piece)`` -> an equal piece seen before, or ``piece`` (then remembered).

    At most ``limit`` distinct pieces are remembered; past that the table starts over, so a
    stream of one-off values (every pod different) costs at most ``limit`` keys, never more.
    """

    def __init__(self, limit: int = 20_000) -> None:
        self.limit = limit
        self._pieces: dict[str, Any] = {}
        self.hits = 0  # for tests and logs

    def __call__(self, piece: Any) -> Any:
        if not isinstance(piece, dict | list):
            return piece  # empty ones too are shared: a fresh [] per pod would differ by identity
        try:
            key = _ENCODE(piece)
        except (TypeError, ValueError):  # not JSON (a test's object): keep it as it is
            return piece
        found = self._pieces.get(key)
        if found is not None:
            self.hits += 1
            return found
        if len(self._pieces) >= self.limit:
            self._pieces.clear()
        self._pieces[key] = piece
        return piece
