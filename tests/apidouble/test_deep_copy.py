"""The copy the double hands out: nothing a caller changes may reach the stored object."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from vgpu_guard.apidouble.store import deep_copy

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4),
    max_leaves=30,
)


def _containers(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [value, *(c for v in value.values() for c in _containers(v))]
    if isinstance(value, list):
        return [value, *(c for v in value for c in _containers(v))]
    return []


@given(json_values)
def test_a_copy_is_equal_and_shares_no_container(value: Any) -> None:
    copied = deep_copy(value)
    assert copied == value
    originals = {id(c) for c in _containers(value)}
    assert not originals & {id(c) for c in _containers(copied)}


def test_subclasses_of_dict_and_list_are_copied_too() -> None:
    class Items(list[Any]):
        pass

    value = {"ordered": OrderedDict(a=[1]), "items": Items([{"b": 2}])}
    copied = deep_copy(value)
    assert copied == value
    assert copied["ordered"] is not value["ordered"] and copied["ordered"]["a"] is not value["ordered"]["a"]
    assert copied["items"] is not value["items"] and copied["items"][0] is not value["items"][0]
