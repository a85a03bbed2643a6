"""Unix seconds as users read times: RFC 3339 in UTC, as kubectl shows them.

Messages name when a hold ends; the seconds come from a ledger a hand may have edited, so a stamp
no calendar holds is shown as the number rather than failing the message.
"""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["rfc3339"]


def rfc3339(seconds: int) -> str:
    """``2026-12-06T15:30:17Z``; a stamp outside the calendar as ``N (Unix seconds)``."""
    try:
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return f"{seconds} (Unix seconds)"
