"""Send a batch of API calls with a bound on how many are in flight.

One helper for every batch the process sends (ledger writes, bindings, reports) and the test and
benchmark drivers send (fleets, heartbeats): a batch cut short by cancellation must close the calls
it never started, since a coroutine dropped without being awaited is a RuntimeWarning, an error
under pytest, raised wherever the garbage collector next runs (the oracle's cancelled node
heartbeats left ~500 of them, and failed a test that had nothing to do with them).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Iterable

__all__ = ["gather_bounded"]


async def gather_bounded(calls: Iterable[Awaitable[object]], limit: int) -> None:
    """Await ``calls`` with at most ``limit`` in flight; after all have ended, raise the first error.

    Every call runs to its end even when another failed (a batch of writes is never left half
    sent for an unrelated error). Cancelled before some calls started, those are closed.
    """
    pending = list(calls)
    gate = asyncio.Semaphore(limit)

    async def gated(call: Awaitable[object]) -> None:
        async with gate:
            await call

    try:
        outcomes = await asyncio.gather(*(gated(c) for c in pending), return_exceptions=True)
    finally:
        for call in pending:
            if inspect.iscoroutine(call) and inspect.getcoroutinestate(call) == inspect.CORO_CREATED:
                call.close()
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
