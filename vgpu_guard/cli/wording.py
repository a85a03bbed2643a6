"""Counts in the words users read: "1 pod", "2 pods", never "1 pods"."""

from __future__ import annotations

__all__ = ["plural"]


def plural(n: int, word: str) -> str:
    """``n`` and ``word``, with an ``s`` unless ``n`` is one (every word we count takes an s)."""
    return f"{n} {word}{'' if n == 1 else 's'}"
