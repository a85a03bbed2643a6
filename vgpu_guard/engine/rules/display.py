"""How a user's value appears inside a message: as written, quoted only when it would be unclear."""

from __future__ import annotations

__all__ = ["show"]


def show(raw: object) -> str:
    """A value as the user wrote it, quoted only when it would otherwise be invisible or ambiguous."""
    if isinstance(raw, str):
        return raw if raw.strip() and raw == raw.strip() and len(raw) <= 40 else repr(raw[:40])
    if isinstance(raw, bool):
        return str(raw).lower()
    return str(raw)
