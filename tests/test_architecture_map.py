"""docs/architecture.md's map is the code's (tests/architecture_map.py generates it)."""

from __future__ import annotations

from tests.architecture_map import block, current


def test_the_architecture_map_is_generated_from_the_code() -> None:
    assert current() == block(), "docs/architecture.md's map is stale: run `python -m tests.architecture_map`"
