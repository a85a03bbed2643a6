"""How a user's value appears inside a message: as written, quoted only when it would be unclear."""

from __future__ import annotations

__all__ = ["show"]


def show(raw: object) -> str:
    """A value as the user wrote it, quoted only when it would otherwise be invisible or ambiguous."""
    if isinstance(raw, str):
        # A ";" would read as the end of the message's clause ("...100:; was set by"), so such a
        # value (a HAMi device list) is quoted too.
        plain = raw.strip() and raw == raw.strip() and len(raw) <= 40 and ";" not in raw
        return raw if plain else repr(raw[:40])
    if isinstance(raw, bool):
        return str(raw).lower()
    return str(raw)
