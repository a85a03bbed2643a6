"""The one reader of resourceVersions (engine/objects.py): the controller's overlay, the ledger
writer and the oracle all decide "whose write is newer" with it."""

from __future__ import annotations

import pytest

from vgpu_guard.engine.objects import version_number, version_of


@pytest.mark.parametrize(
    ("text", "number"),
    [("812", 812), (812, 812), ("0", 0), (None, -1), ("", -1), ("abc", -1), ("12a", -1)],
)
def test_a_resource_version_reads_as_its_number_or_minus_one(text: object, number: int) -> None:
    assert version_number(text) == number


def test_an_objects_version_comes_from_its_metadata() -> None:
    assert version_of({"metadata": {"resourceVersion": "41"}}) == 41
    assert version_of({"metadata": {}}) == -1
    assert version_of({"metadata": "not a mapping"}) == -1
    assert version_of({}) == -1
