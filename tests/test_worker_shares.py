"""The order scripts/check's pytest-xdist workers get the suite in (tests/conftest.py ``heavy_first``):
the minutes-long tests head the first worker's share, one after another, and nothing is lost,
repeated or reordered otherwise."""

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
        out.append(names(items[start : start + size]))
        start += size
    return out


def names(items: list[pytest.Item]) -> list[str]:
    return [cast(Item, it).name for it in items]


@pytest.mark.parametrize("workers", [2, 3])
def test_heavy_tests_head_the_first_share_and_the_rest_keeps_its_order(workers: int) -> None:
    items = suite(1739, {1500, 1700})  # in collection order both fall late in the last share
    out = heavy_first(items, workers)
    shares = first_shares(out, workers)
    assert shares[0][:2] == ["t1500", "t1700"]
    assert all("t1500" not in s and "t1700" not in s for s in shares[1:])
    light = [n for n in names(items) if n not in ("t1500", "t1700")]
    assert names(out)[2:] == light


@pytest.mark.parametrize(("workers", "heavy"), [(0, {5}), (1, {5}), (2, set())])
def test_without_workers_or_heavy_tests_the_order_stands(workers: int, heavy: set[int]) -> None:
    items = suite(20, heavy)
    assert names(heavy_first(items, workers)) == names(items)
