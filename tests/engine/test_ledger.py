"""The ledger model: idempotent entries, invariants, the write check, the CRD encoding.

The wire format's own tests (one string an entry, issue 44) are in test_ledger_wire.py; the tests
here that build entries as JSON objects read them as the release before issue 44 wrote them.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.engine.allocation_testkit import A100_40, config, gpu_node, view
from vgpu_guard.engine.assignment import AssignmentError, decode_assignment
from vgpu_guard.engine.ledger import (
    Allocation,
    ContainerGrant,
    DeviceGrant,
    LedgerError,
    MigSlot,
    NodeLedger,
    _decode_allocation,
    _well_formed_allocation,
    cached_ledger,
    check_invariants,
    check_write,
    decode_ledger,
    encode_ledger,
)


def alloc(uid: str, *grants: DeviceGrant, queue: str = "default") -> Allocation:
    return Allocation(uid, "ns", uid, queue, (ContainerGrant(0, "c", tuple(grants)),))


def node(gpus: int = 2, **kw: Any) -> Any:
    return view([gpu_node("n", gpus, **kw)]).nodes["n"]


@functools.cache
def crd_validator() -> jsonschema.protocols.Validator:
    schema = crd_schema()
    return jsonschema.validators.validator_for(schema)(schema)


def crd_schema() -> dict[str, Any]:
    text = resources.files("vgpu_guard").joinpath("data/crds/gpuledgers.vgpu-guard.io.yaml").read_text()
    crd = yaml.safe_load(text)
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_add_and_remove_are_idempotent_by_uid() -> None:
    a = alloc("u1", DeviceGrant("GPU-n-0", 1000, 10))
    ledger = NodeLedger("n").with_allocation(a)
    assert ledger.with_allocation(a) is ledger
    assert ledger.without("nope") is ledger
    assert ledger.without("u1").without("u1").allocations == {}
    with pytest.raises(LedgerError, match="already holds an entry on node n; release it"):
        ledger.with_allocation(alloc("u1", DeviceGrant("GPU-n-1", 1000, 10)))


def test_adding_many_at_once_equals_adding_one_at_a_time() -> None:
    entries = [alloc(f"u{i}", DeviceGrant("GPU-n-0", 100 * i, i)) for i in range(5)]
    one_by_one = NodeLedger("n", resource_version="7")
    for entry in entries:
        one_by_one = one_by_one.with_allocation(entry)
    at_once = NodeLedger("n", resource_version="7").with_allocations(entries)
    assert at_once == one_by_one and at_once.resource_version == "7"
    assert at_once.with_allocations(entries) is at_once  # nothing new: unchanged
    assert at_once.with_allocations([]) is at_once
    with pytest.raises(LedgerError, match="uid u9"):
        NodeLedger("n").with_allocations(
            [alloc("u9", DeviceGrant("GPU-n-0", 1, 0)), alloc("u9", DeviceGrant("GPU-n-1", 1, 0))]
        )


def test_invariants_cover_memory_cores_split_and_unknown_gpus() -> None:
    info = node(2, split=2)
    ledger = NodeLedger("n")
    for i, (mem, cores) in enumerate([(20000, 60), (5000, 50), (1, 0)]):
        ledger = ledger.with_allocation(alloc(f"u{i}", DeviceGrant("GPU-n-0", mem, cores)))
    ledger = ledger.with_allocation(alloc("ghost", DeviceGrant("GPU-gone", 1, 0)))
    kinds = sorted((v.kind, v.gpu) for v in check_invariants(ledger, info))
    assert kinds == [
        ("cores", "GPU-n-0"),
        ("memory", "GPU-n-0"),
        ("pods", "GPU-n-0"),
        ("unknown-gpu", "GPU-gone"),
    ]
    messages = [v.message for v in check_invariants(ledger, info) if v.kind == "memory"]
    assert messages == [
        "GPU GPU-n-0 on node n: 25001 MiB reserved > 24576 MiB capacity (ns/u0, ns/u1, ns/u2)"
    ]


def test_memory_factor_scales_capacity() -> None:
    info = node(1, memory=100)
    ledger = NodeLedger("n").with_allocation(alloc("u", DeviceGrant("GPU-n-0", 1000, 0)))
    assert check_invariants(ledger, info, memory_factor=10) == []
    assert [v.kind for v in check_invariants(ledger, info, memory_factor=1)] == ["memory"]


def test_mig_overlap_group_and_position_are_violations() -> None:
    info = view([gpu_node("n", 1, memory=40960, card_type=A100_40, mode="mig", split=7)], config()).nodes["n"]
    a = alloc("a", DeviceGrant("GPU-n-0", 20480, 0, MigSlot("group3", "3g.20gb", 0, 0, 4)))
    b = alloc("b", DeviceGrant("GPU-n-0", 10240, 0, MigSlot("group2", "2g.10gb", 1, 2, 2)))
    c = alloc("c", DeviceGrant("GPU-n-0", 5120, 0, MigSlot("group3", "3g.20gb", 0, 7, 2)))
    ledger = NodeLedger("n").with_allocation(a).with_allocation(b).with_allocation(c)
    messages = [v.message for v in check_invariants(ledger, info)]
    assert (
        "GPU GPU-n-0 on node n: MIG instances of several geometry groups (group2, group3); a card holds one group"
        in messages
    )
    assert "GPU GPU-n-0 on node n: MIG position group3-0 given to ns/a and ns/c" in messages
    assert "GPU GPU-n-0 on node n: MIG 3g.20gb of ns/c at slices [7,9) is outside the 8 slices" in messages
    assert "GPU GPU-n-0 on node n: MIG 3g.20gb of ns/a [0,4) overlaps 2g.10gb of ns/b [2,4)" in messages


def test_write_check_judges_only_gpus_that_gain() -> None:
    info = node(2)
    over = alloc("old", DeviceGrant("GPU-n-0", 30000, 0))
    old = NodeLedger("n", {"old": over})
    assert [v.kind for v in check_invariants(old, info)] == ["memory"]
    # Adding on the other GPU, or releasing, is allowed despite the pre-existing overcommit.
    grows_elsewhere = old.with_allocation(alloc("new", DeviceGrant("GPU-n-1", 1000, 0)))
    assert check_write(old, grows_elsewhere, info) == []
    assert check_write(old, old.without("old"), info) == []
    grows_there = old.with_allocation(alloc("new", DeviceGrant("GPU-n-0", 1, 0)))
    assert [v.kind for v in check_write(old, grows_there, info)] == ["memory"]


def test_encoding_round_trips_and_matches_the_crd_schema() -> None:
    mig = MigSlot("group2", "2g.10gb", 1, 2, 2)
    ledger = NodeLedger(
        "n",
        {
            "u1": Allocation(
                "u1",
                "ns",
                "p1",
                "q",
                (
                    ContainerGrant(
                        0, "main", (DeviceGrant("GPU-n-0", 1000, 20), DeviceGrant("GPU-n-1", 1000, 20))
                    ),
                ),
                reserved_at=1700000000,
                group="pg",
            ),
            "u2": Allocation(
                "u2",
                "ns",
                "p2",
                "q",
                (ContainerGrant(1, "side", (DeviceGrant("GPU-n-1", 10240, 0, mig),)),),
                adopted=True,
            ),
        },
        resource_version="42",
    )
    obj = encode_ledger(ledger)
    assert obj["metadata"] == {"name": "n", "labels": {"vgpu-guard.io/node": "n"}, "resourceVersion": "42"}
    assert "summary" not in obj["spec"]  # derived (engine/ledger_summary.py), only when given
    crd_validator().validate(obj)
    assert decode_ledger(obj) == ledger


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"nodeName": "n", "allocations": "x"}, "spec.allocations must be a list"),
        (
            {
                "nodeName": "n",
                "allocations": [
                    {
                        "podUID": "u",
                        "namespace": "ns",
                        "name": "p",
                        "containers": [{"index": "0", "devices": []}],
                    }
                ],
            },
            r"spec.allocations\[0\].containers\[0\].index: expected an integer, got '0'",
        ),
        (
            {
                "nodeName": "n",
                "allocations": [
                    {"podUID": "u", "namespace": "ns", "name": "p", "containers": []},
                    {"podUID": "u", "namespace": "ns", "name": "p", "containers": []},
                ],
            },
            "pod uid u appears twice",
        ),
        ({"nodeName": "other", "allocations": []}, "spec.nodeName 'other' differs from the object's name"),
    ],
)
def test_decode_errors_name_the_field(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(LedgerError, match=message):
        decode_ledger({"metadata": {"name": "n"}, "spec": spec})


def test_assignment_decoding_accepts_mig_ids_and_rejects_garbage() -> None:
    decoded = decode_assignment("GPU-a[group2-3],NVIDIA,10240,0:;GPU-b,NVIDIA,1,2:GPU-c,NVIDIA,3,4:;")
    assert [[(d.uuid, d.mig_group, d.mig_position) for d in c] for c in decoded] == [
        [("GPU-a", "group2", 3)],
        [("GPU-b", None, None), ("GPU-c", None, None)],
    ]
    with pytest.raises(AssignmentError, match="is not UUID,TYPE,memory,cores"):
        decode_assignment("GPU-a,NVIDIA,lots,0:")
    with pytest.raises(AssignmentError, match="is not UUID"):
        decode_assignment("GPU-a[x],NVIDIA,1,0:")


@pytest.mark.parametrize(
    "raw",
    [
        "GPU-a,NVIDIA,\u00b2,0:",  # "²".isdigit() is True, int("²") raises
        "GPU-a,NVIDIA,1,\u0663:",  # Arabic-Indic 3: not the plugin's format
        "GPU-a,NVIDIA," + "9" * 5000 + ",0:",  # beyond int()'s digit limit
        "GPU-a[g-" + "9" * 5000 + "],NVIDIA,1,0:",
        "GPU-a[g-\u0663],NVIDIA,1,0:",
    ],
)
def test_assignment_decoding_never_raises_anything_but_assignment_error(raw: str) -> None:
    # A bound pod's annotation reaches every controller pass: any other exception stops them all.
    with pytest.raises(AssignmentError):
        decode_assignment(raw)


grants = st.builds(
    DeviceGrant,
    uuid=st.sampled_from(["GPU-n-0", "GPU-n-1", "GPU-x"]),
    memory=st.integers(0, 30000),
    cores=st.integers(0, 100),
)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.text("abc", min_size=1, max_size=3), st.lists(grants, min_size=1, max_size=3)),
        max_size=8,
    )
)
def test_encode_decode_is_lossless(entries: list[tuple[str, list[DeviceGrant]]]) -> None:
    ledger = NodeLedger("n")
    for uid, gs in entries:
        if uid not in ledger.allocations:
            ledger = ledger.with_allocation(alloc(uid, *gs))
    obj = encode_ledger(ledger)
    crd_validator().validate(obj)
    assert decode_ledger(obj) == ledger


def test_a_cached_ledger_keeps_the_decoded_entries_not_the_raw_list() -> None:
    ledger = NodeLedger(
        node="n",
        allocations={"u": alloc("u", DeviceGrant("GPU-0", 4096, 10))},
        resource_version="42",
    )
    raw = encode_ledger(ledger)
    raw["metadata"]["resourceVersion"] = "42"
    cached = cached_ledger(raw)
    assert "allocations" not in cached["spec"] and cached["metadata"]["resourceVersion"] == "42"
    assert decode_ledger(cached) is decode_ledger(cached) == decode_ledger(raw) == ledger


def test_a_cached_ledger_that_does_not_decode_keeps_why() -> None:
    bad = {
        "metadata": {"name": "n", "resourceVersion": "7"},
        "spec": {"nodeName": "n", "allocations": [{"podUID": "u", "namespace": "ns", "containers": []}]},
    }
    with pytest.raises(LedgerError) as raw_error:
        decode_ledger(bad)
    cached = cached_ledger(bad)
    for _ in range(2):  # the same message every time it is read
        with pytest.raises(LedgerError) as cached_error:
            decode_ledger(cached)
        assert str(cached_error.value) == str(raw_error.value)


# Any JSON value a hand-edited or foreign entry may hold where the writer puts a string or number.
_json_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 2**40), st.floats(allow_nan=False), st.text("0a1", max_size=3)
)


def _mostly(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Usually what the writer writes, sometimes anything: the fast path must be reached often."""
    return st.tuples(st.integers(0, 7), valid, _json_scalar).map(lambda t: t[2] if t[0] == 7 else t[1])


_device = st.fixed_dictionaries(
    {"uuid": _mostly(st.just("GPU-a")), "memoryMiB": _mostly(st.integers(0, 9)), "cores": _mostly(st.integers(0, 100))},
    optional={"mig": st.one_of(st.none(), st.fixed_dictionaries({"group": st.just("g"), "profile": st.just("1g"),
                                                                  "position": st.integers(0, 3)}))},
)  # fmt: skip
_container = st.fixed_dictionaries(
    {"index": _mostly(st.integers(0, 3)), "devices": _mostly(st.lists(_device, max_size=2))},
    optional={"name": _json_scalar},  # read leniently: any value, never an error
)  # fmt: skip
_entry = st.fixed_dictionaries(
    {"podUID": _mostly(st.just("u")), "namespace": _mostly(st.just("ns")), "name": _mostly(st.just("p")),
     "containers": _mostly(st.lists(_container, max_size=2))},
    optional={"queue": _json_scalar, "reservedAt": _mostly(st.integers(0, 2**40)), "podGroup": _json_scalar,
              "adopted": _json_scalar, "committed": _json_scalar},  # all but reservedAt read leniently
)  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(_entry)
def test_the_well_formed_fast_path_reads_what_the_checked_path_reads(raw: dict[str, Any]) -> None:
    """Start-up decodes take the fast path; it may only decline (None), never read differently."""
    fast = _well_formed_allocation(raw)
    try:
        checked: Allocation | LedgerError = _decode_allocation(raw, "entry")
    except LedgerError as e:
        checked = e
    if fast is not None:
        assert fast == checked
    if (
        isinstance(checked, Allocation)
        and not any(d.mig for d in checked.grants())
        and not isinstance(raw.get("reservedAt"), float | str | bool)
    ):
        assert fast == checked  # what our writer writes is never sent down the slow path


@pytest.mark.parametrize("value", ["soon", [1], {"s": 1}, True, float("inf")])
def test_an_unreadable_reserved_at_is_an_error_naming_the_field(value: object) -> None:
    entry = {"podUID": "u", "namespace": "ns", "name": "p", "containers": [], "reservedAt": value}
    with pytest.raises(LedgerError) as refused:
        decode_ledger({"metadata": {"name": "n"}, "spec": {"nodeName": "n", "allocations": [entry]}})
    assert (
        str(refused.value)
        == f"GPULedger n: spec.allocations[0].reservedAt: expected an integer, got {value!r}"
    )


def test_empty_optional_strings_are_left_out_of_the_written_ledger() -> None:
    """An entry decoded without a queue or a container name (a hand edit of an object entry)
    writes neither: no empty ``queue=`` and no empty name before the container's GPUs."""
    raw = {
        "apiVersion": "vgpu-guard.io/v1alpha1",
        "kind": "GPULedger",
        "metadata": {"name": "n"},
        "spec": {
            "nodeName": "n",
            "allocations": [
                {
                    "podUID": "u",
                    "namespace": "default",
                    "name": "p",
                    "containers": [{"index": 0, "devices": [{"uuid": "GPU-0", "memoryMiB": 1, "cores": 0}]}],
                }
            ],
        },
    }
    [entry] = encode_ledger(decode_ledger(raw))["spec"]["allocations"]
    assert entry == "default/p podUID=u reservedAt=0 | #0 GPU-0=1MiB,0%"
