"""Running a coroutine that never suspends to its result, without an event loop.

The admission sequence (``engine.admission.admission_sequence``) is one ``async def``: ``simulate``
awaits it over the webhook's route function, whose reads and recording go through the API, and
offline ``review`` runs the very same coroutine over a decision that awaits nothing. Such a
coroutine finishes on its first step, so it needs no loop (and the engine imports no asyncio): one
sequence, not a sync and an async copy that drift apart. A coroutine that does suspend is waiting
for something only a loop could deliver; that is a bug in its caller, raised at once rather than
hanging or silently dropping the await.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run_without_suspending"]

T = TypeVar("T")


def run_without_suspending(coroutine: Coroutine[Any, Any, T]) -> T:
    """``coroutine``'s result, computed in one step. Raises ``RuntimeError`` (after closing the
    coroutine, so its ``finally`` blocks run) if it suspends instead of finishing."""
    try:
        awaited = coroutine.send(None)
    except StopIteration as finished:
        result: T = finished.value
        return result
    coroutine.close()
    raise RuntimeError(
        f"{coroutine!r} suspended on {awaited!r}: it awaits something only an event loop can "
        "deliver, so it cannot be run without one (await it in a loop instead)"
    )
