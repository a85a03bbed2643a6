"""``run_without_suspending``: the one admission sequence, run by offline ``review`` without a loop."""

from __future__ import annotations

import inspect
from collections.abc import Generator
from typing import Any

import pytest

from vgpu_guard.engine.synchronous import run_without_suspending


async def _twice(n: int) -> int:
    return 2 * n


async def _sum_of_doubles(*numbers: int) -> int:
    return sum([await _twice(n) for n in numbers])


class _Suspends:
    """An awaitable that suspends once, as a future of an event loop does."""

    def __await__(self) -> Generator[str, None, int]:
        yield "a loop's future"
        return 1


def test_a_coroutine_that_awaits_only_coroutines_runs_to_its_result() -> None:
    assert run_without_suspending(_sum_of_doubles(1, 2, 3)) == 12


def test_its_exception_is_raised_as_it_is() -> None:
    async def fails() -> None:
        await _twice(1)
        raise ValueError("from inside")

    with pytest.raises(ValueError, match="from inside"):
        run_without_suspending(fails())


def test_a_coroutine_that_suspends_is_refused_and_closed() -> None:
    cleaned: list[str] = []

    async def waits_for_a_loop() -> int:
        try:
            return await _Suspends()
        finally:
            cleaned.append("finally ran")

    coroutine = waits_for_a_loop()
    with pytest.raises(RuntimeError) as refused:
        run_without_suspending(coroutine)
    message = str(refused.value)
    assert 'suspended on "a loop\'s future": it awaits something only an event loop can' in message
    assert inspect.getcoroutinestate(coroutine) == inspect.CORO_CLOSED
    assert cleaned == ["finally ran"]


def test_the_result_may_be_anything_a_coroutine_returns() -> None:
    async def nothing() -> Any:
        return None

    assert run_without_suspending(nothing()) is None
