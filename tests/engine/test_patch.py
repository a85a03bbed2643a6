"""The cheap differ against the RFC 6902 library: same result on every change our mutations make,
and the working copy never lets a mutation touch the caller's object."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
from hypothesis import given, settings
from hypothesis import strategies as st

from vgpu_guard.engine.patch import diff, working_copy

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    old=st.dictionaries(st.text(max_size=4), json_values, max_size=4),
    new=st.dictionaries(st.text(max_size=4), json_values, max_size=4),
)
def test_diff_turns_old_into_new(old: dict[str, Any], new: dict[str, Any]) -> None:
    assert jsonpatch.JsonPatch(diff(old, new)).apply(copy.deepcopy(old)) == new


def test_keys_with_slashes_and_tildes_are_escaped() -> None:
    old: dict[str, Any] = {"metadata": {"annotations": {}}}
    new = {"metadata": {"annotations": {"volcano.sh/vgpu-mode": "mig", "a~b": "1"}}}
    assert diff(old, new) == [
        {"op": "add", "path": "/metadata/annotations/volcano.sh~1vgpu-mode", "value": "mig"},
        {"op": "add", "path": "/metadata/annotations/a~0b", "value": "1"},
    ]


def test_working_copy_keeps_the_original_untouched() -> None:
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "annotations": {"a": "1"}, "labels": {"l": "1"}},
        "spec": {
            "containers": [
                {"name": "c", "image": "i", "resources": {"limits": {"x": "1"}}, "env": [{"n": 1}]}
            ],
            "affinity": {"nodeAffinity": {}},
            "volumes": [{"name": "v"}],
        },
    }
    before = copy.deepcopy(pod)
    work = working_copy(pod)
    work["metadata"]["annotations"]["b"] = "2"
    work["metadata"]["labels"]["m"] = "2"
    work["spec"]["schedulerName"] = "x"
    work["spec"]["containers"][0]["resources"]["limits"]["y"] = "2"
    work["spec"]["containers"][0]["resources"].setdefault("requests", {})["y"] = "2"
    work["spec"]["affinity"]["nodeAffinity"]["required"] = {}
    assert pod == before
    assert work["spec"]["volumes"] is pod["spec"]["volumes"]  # untouched parts are shared, not copied
    assert jsonpatch.JsonPatch(diff(pod, work)).apply(copy.deepcopy(pod)) == work
