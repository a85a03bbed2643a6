"""The order scripts/check's pytest-xdist workers get the suite in (tests/conftest.py ``heavy_first``):
each minutes-long test heads a different worker's first share, and nothing is lost or repeated."""

from __future__ import annotations

from typing import Any, cast

import pytest

from tests.conftest import heavy_first


class Item:
    def __init__(self, name: str, heavy: bool) -> None:
        self.name = name
        self.keywords: dict[str, Any] = {"heavy": True} if heavy else {}


def suite(size: int, heavy: set[int]) -> list[pytest.Item]:
    return cast(list[pytest.Item], [Item(f"t{i}", i in heavy) for i in range(size)])


def first_shares(items: list[pytest.Item], workers: int) -> list[list[str]]:
    """What pytest-xdist's worksteal hands each idle worker first: the next remaining // (left) items."""
    out, start = [], 0
    for i in range(workers):
        size = (len(items) - start) // (workers - i)
        out.append([cast(Item, it).name for it in items[start : start + size]])
        start += size
    return out


def names(items: list[pytest.Item]) -> list[str]:
    return [cast(Item, it).name for it in items]


@pytest.mark.parametrize("workers", [2, 3])
def test_each_heavy_test_heads_a_different_worker_share(workers: int) -> None:
    items = suite(1739, {1500, 1700})  # in collection order both fall into the last share
    out = heavy_first(items, workers)
    assert sorted(names(out)) == sorted(names(items))
    heads = [share[0] for share in first_shares(out, workers)]
    assert heads[:2] == ["t1500", "t1700"]
    # The rest keeps its collection order (the suites' own fixtures are scoped to files and packages).
    assert [n for n in names(out) if n not in ("t1500", "t1700")] == [
        n for n in names(items) if n not in ("t1500", "t1700")
    ]


def test_more_heavy_tests_than_workers_take_turns() -> None:
    out = heavy_first(suite(100, {10, 20, 30}), 2)
    shares = first_shares(out, 2)
    assert shares[0][:2] == ["t10", "t30"] and shares[1][0] == "t20"


@pytest.mark.parametrize(("workers", "heavy"), [(0, {5}), (1, {5}), (2, set())])
def test_without_workers_or_heavy_tests_the_order_stands(workers: int, heavy: set[int]) -> None:
    items = suite(20, heavy)
    assert names(heavy_first(items, workers)) == names(items)
