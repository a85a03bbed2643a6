"""The copy the double hands out: nothing a caller changes may reach the stored object, and a
copy made from kept bytes is the object as it is now, exact types and order included."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from vgpu_guard.apidouble._copies import StoredCopies
from vgpu_guard.apidouble.store import Store, deep_copy
from vgpu_guard.kube.resources import LEASES

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

    value: dict[str, Any] = {"ordered": OrderedDict(a=[1]), "items": Items([{"b": 2}])}
    copied = deep_copy(value)
    assert copied == value
    assert copied["ordered"] is not value["ordered"] and copied["ordered"]["a"] is not value["ordered"]["a"]
    assert copied["items"] is not value["items"] and copied["items"][0] is not value["items"][0]


# -- StoredCopies: the copies of current objects (reads and live watch events) ----------------


def _exact_types(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_exact_types(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_exact_types(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@given(json_values)
def test_a_kept_copy_is_equal_in_value_type_and_order_and_shares_no_container(value: Any) -> None:
    copies = StoredCopies(deep_copy)
    stored = {"metadata": {"resourceVersion": "7"}, "spec": value}
    for _ in range(2):  # the first copy makes the bytes, the second reads them
        copied = copies.copy(stored, "k")
        assert copied == stored and _exact_types(copied, stored)  # True stays a bool, 1.0 a float
        assert not {id(c) for c in _containers(stored)} & {id(c) for c in _containers(copied)}


def test_a_list_held_twice_comes_back_as_two_lists() -> None:
    shared = [1, 2]
    stored = {"metadata": {"resourceVersion": "1"}, "a": shared, "b": shared}
    copied = StoredCopies(deep_copy).copy(stored, "k")
    copied["a"].append(3)
    assert copied["b"] == [1, 2]  # as a JSON decoder gives them, not one list seen twice


def test_a_changed_copy_does_not_reach_the_store_or_the_next_copy() -> None:
    copies = StoredCopies(deep_copy)
    stored = {"metadata": {"resourceVersion": "1", "labels": {"app": "a"}}}
    copies.copy(stored, "k")["metadata"]["labels"]["app"] = "changed"
    assert stored["metadata"]["labels"] == {"app": "a"}
    assert copies.copy(stored, "k")["metadata"]["labels"] == {"app": "a"}


def test_a_new_version_of_an_object_is_never_answered_from_the_old_ones_bytes() -> None:
    copies = StoredCopies(deep_copy)
    stored: dict[str, Any] = {"metadata": {"resourceVersion": "1"}, "spec": {"n": 1}}
    assert copies.copy(stored, "k")["spec"] == {"n": 1}
    # A write stores a new object; even one changed in place is seen by its new resourceVersion.
    stored["spec"], stored["metadata"]["resourceVersion"] = {"n": 2}, "2"
    assert copies.copy(stored, "k")["spec"] == {"n": 2}
    replaced = {"metadata": {"resourceVersion": "3"}, "spec": {"n": 3}}
    assert copies.copy(replaced, "k")["spec"] == {"n": 3}


def test_what_marshal_cannot_write_is_copied_the_general_way() -> None:
    stored = {"metadata": {"resourceVersion": "1"}, "ordered": OrderedDict(a=[1])}
    copied = StoredCopies(deep_copy).copy(stored, "k")
    assert copied == stored and copied["ordered"] is not stored["ordered"]


def test_the_kept_bytes_are_bounded() -> None:
    copies = StoredCopies(deep_copy, limit=3)
    objects = [{"metadata": {"resourceVersion": str(i)}} for i in range(10)]
    for i, obj in enumerate(objects):
        assert copies.copy(obj, i) == obj
    assert len(copies._bytes) <= 3


def test_a_key_keeps_the_bytes_of_its_newest_object_only() -> None:
    copies = StoredCopies(deep_copy)
    old = {"metadata": {"resourceVersion": "1"}}
    new = {"metadata": {"resourceVersion": "2"}}
    copies.copy(old, "pod")
    copies.copy(new, "pod")
    assert [entry[0] for entry in copies._bytes.values()] == [new]  # the old version is let go


def test_what_each_write_returns_is_the_callers_own() -> None:
    """What a create, a replace (a no-op one included) or a patch answers is a copy: changing it
    must not reach the stored object or the next answer."""
    store = Store()
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "l", "namespace": "default"},
    }

    def holder() -> str:
        held: str = store.get(LEASES, "l", namespace="default")["spec"]["holderIdentity"]
        return held

    made = store.create(LEASES, {**lease, "spec": {"holderIdentity": "a"}})
    made["spec"]["holderIdentity"] = "changed"
    assert holder() == "a"
    replaced = store.replace(
        LEASES, {**store.get(LEASES, "l", namespace="default"), "spec": {"holderIdentity": "b"}}
    )
    replaced["spec"]["holderIdentity"] = "changed"
    assert holder() == "b"
    same = store.replace(LEASES, store.get(LEASES, "l", namespace="default"))  # a no-op write
    same["spec"]["holderIdentity"] = "changed"
    assert holder() == "b"
    patched = store.patch(LEASES, "l", {"spec": {"holderIdentity": "c"}}, namespace="default")
    patched["spec"]["holderIdentity"] = "changed"
    assert holder() == "c"
