"""gather_bounded: the bound holds, every call ends before an error is raised, and a cancelled
batch leaves no coroutine unawaited."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import warnings

import pytest

from vgpu_guard.kube.bounded import gather_bounded


async def test_no_more_than_the_limit_are_in_flight() -> None:
    running, most = 0, 0

    async def call() -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.01)
        running -= 1

    await gather_bounded((call() for _ in range(10)), 3)
    assert most == 3


async def test_every_call_ends_before_the_first_error_is_raised() -> None:
    ended: list[int] = []

    async def call(i: int) -> None:
        await asyncio.sleep(0.01 * i)
        if i in (1, 2):
            raise ValueError(f"call {i}")
        ended.append(i)

    with pytest.raises(ValueError, match="call 1"):
        await gather_bounded((call(i) for i in range(4)), 2)
    assert ended == [0, 3]


async def test_calls_not_started_when_the_batch_is_cancelled_are_closed_not_left_unawaited() -> None:
    started: list[int] = []

    async def call(i: int) -> None:
        started.append(i)
        await asyncio.sleep(10)

    task = asyncio.ensure_future(gather_bounded((call(i) for i in range(3)), 1))
    await asyncio.sleep(0.05)
    task.cancel()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with contextlib.suppress(asyncio.CancelledError):
            await task
        gc.collect()
    assert started == [0]
    assert not [w for w in caught if "never awaited" in str(w.message)]
