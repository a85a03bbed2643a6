"""The GPULedger wire format of issue 44: one line of text per entry, read back exactly, every
field and number checked by our decoder (the CRD no longer types the entries), and ledgers written
by the release before (one JSON object per entry) read the same and rewritten as text."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.engine.test_ledger import crd_validator
from tests.ledger_before_issue_44 import decode_ledger as old_decode_ledger
from tests.ledger_before_issue_44 import old_crd, old_encoded_ledger
from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.devices import GpuDevice
from vgpu_guard.engine.ledger import (
    MAX_CONTAINER_INDEX,
    MAX_MIG_NUMBER,
    Allocation,
    ContainerGrant,
    DeviceGrant,
    LedgerError,
    MigSlot,
    NodeLedger,
    _decode_entry,
    _well_formed_entry,
    cached_ledger,
    decode_entry,
    decode_ledger,
    encode_entry,
    encode_ledger,
)
from vgpu_guard.engine.ledger_summary import ledger_summary
from vgpu_guard.engine.untrusted import MAX_GPU_MEMORY_MIB, MAX_UNIX_SECONDS

UID = "6c1f0e6a-1b9c-4a4e-9d8c-2f0a3b5c7d9e"
WEB = Allocation(
    UID,
    "team-a",
    "web-0",
    "default",
    (ContainerGrant(0, "web", (DeviceGrant("GPU-8f1c", 12288, 0), DeviceGrant("GPU-77ab", 10240, 30))),),
    reserved_at=1750000000,
    committed=True,
)
MIG = Allocation(
    "u-mig",
    "team-b",
    "train-1",
    "research",
    (
        ContainerGrant(
            1, "side", (DeviceGrant("GPU-a100", 10240, 0, MigSlot("group2", "2g.10gb", 1, 2, 2)),)
        ),
        ContainerGrant(2, "", (DeviceGrant("GPU-a100", 5120, 0, MigSlot("group2", "", 3)),)),
    ),
    reserved_at=1750000100,
    group="job-7",
    adopted=True,
    committed=True,
    admitted=True,
)
NODE = NodeInfo(
    "n", gpus=(GpuDevice("GPU-8f1c", 0, 10, 24576, "NVIDIA-A10", True, "hami-core"),), mode="hami-core"
)


def test_an_entry_reads_as_one_line() -> None:
    assert encode_entry(WEB) == (
        f"team-a/web-0 podUID={UID} queue=default reservedAt=1750000000 committed"
        " | #0 web GPU-8f1c=12288MiB,0% GPU-77ab=10240MiB,30%"
    )
    assert encode_entry(MIG) == (
        "team-b/train-1 podUID=u-mig queue=research podGroup=job-7 reservedAt=1750000100 committed admitted"
        " adopted | #1 side GPU-a100=10240MiB,0%,mig=group2/2g.10gb/1,slices=2+2"
        " | #2 GPU-a100=5120MiB,0%,mig=group2//3"
    )
    for entry in (WEB, MIG):
        assert decode_entry(encode_entry(entry)) == entry


def test_names_holding_a_separator_are_percent_encoded() -> None:
    odd = Allocation(
        "u i|d",
        "ns/x",
        "n=a,m",
        "q#1",
        (ContainerGrant(3, "#c", (DeviceGrant("GPU a=1", 1, 2, MigSlot("g/1", "p,q", 0, 0, 1)),)),),
        group="g%",
    )
    text = encode_entry(odd)
    assert text == (
        "ns%2Fx/n%3Da%2Cm podUID=u%20i%7Cd queue=q%231 podGroup=g%25 reservedAt=0"
        " | #3 %23c GPU%20a%3D1=1MiB,2%,mig=g%2F1/p%2Cq/0,slices=0+1"
    )
    assert decode_entry(text) == odd
    assert _well_formed_entry(text) is None  # escapes take the checked path


def test_the_ledger_writes_entries_sorted_and_a_summary_with_typed_totals() -> None:
    ledger = NodeLedger("n", {MIG.pod_uid: MIG, WEB.pod_uid: WEB}, resource_version="9")
    obj = encode_ledger(ledger, ledger_summary(ledger, NODE))
    assert obj["spec"]["allocations"] == [encode_entry(WEB), encode_entry(MIG)]
    assert obj["spec"]["summary"]["pods"] == 2 and isinstance(obj["spec"]["summary"]["perGPU"][0], str)
    crd_validator().validate(obj)
    decoded = decode_ledger(obj)
    assert decoded == ledger and decoded.resource_version == "9" and not decoded.legacy


# -- anything the model can hold is written and read back equal --------------------------------------

_names = st.text(max_size=6)  # any Unicode: separators, escapes, spaces, "%", "#", "|", "="
_plain = st.text("abz09.-_~", max_size=6)
_name = st.one_of(_plain, _names)
_mig = st.builds(
    MigSlot,
    _name,
    _name,
    st.integers(0, MAX_MIG_NUMBER),
    st.one_of(st.none(), st.integers(0, MAX_MIG_NUMBER)),
    st.one_of(st.none(), st.integers(1, MAX_MIG_NUMBER)),
).map(lambda m: m if (m.start is None) == (m.size is None) else MigSlot(m.group, m.profile, m.position))
_device = st.builds(
    DeviceGrant,
    _name,
    st.one_of(st.integers(0, 99999), st.integers(0, MAX_GPU_MEMORY_MIB)),
    st.integers(0, 100),
    st.one_of(st.none(), st.none(), _mig),
)
_container = st.builds(
    ContainerGrant, st.integers(0, MAX_CONTAINER_INDEX), _name, st.lists(_device, max_size=3).map(tuple)
)
_allocation = st.builds(
    Allocation,
    _name.filter(bool),  # the pod's UID, the entry's key: never empty (refused when read)
    _name,
    _name,
    _name,
    st.lists(_container, max_size=3).map(tuple),
    st.integers(0, MAX_UNIX_SECONDS),
    _name,
    st.booleans(),
    st.booleans(),
    st.booleans(),
)


@settings(max_examples=400, deadline=None)
@given(_allocation)
def test_every_entry_round_trips_and_the_fast_path_agrees(entry: Allocation) -> None:
    text = encode_entry(entry)
    assert text.isascii() and text.isprintable()  # one line: whatever a name holds is escaped
    assert _decode_entry(text, "entry") == entry == decode_entry(text)
    fast = _well_formed_entry(text)
    assert fast is None or fast == entry


# Pieces of entries, well and badly formed, so that generated texts reach the fast path's shape
# (podUID= and reservedAt= present) as often as arbitrary characters do not.
_PIECES = st.sampled_from(
    [
        "ns/p",
        " podUID=u",
        " podUID=",
        " reservedAt=1",
        " reservedAt=99999999999",
        " committed",
        " admitted",
        " queue=q",
        " | #0",
        " | #1048577",
        " c",
        " GPU-a=1MiB,0%",
        " GPU-a=16777217MiB,0%",
        " GPU-a=1MiB,101%",
        ",mig=g/p/1",
        "/",
        "=",
        " ",
        "%2F",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list("ab/=,|#% 09MiB%-")), max_size=40)
    | st.lists(_PIECES, max_size=12).map("".join)
)
def test_any_text_is_an_entry_or_an_error_naming_the_field(text: str) -> None:
    """Never another exception (a bad ledger must not stop a pass), and the fast path never reads
    what the checked path refuses."""
    try:
        checked: Allocation | LedgerError = _decode_entry(text, "entry")
    except LedgerError as e:
        checked = e
    fast = _well_formed_entry(text)
    if fast is not None:
        assert fast == checked


# -- malformed entries: refused, naming the field -----------------------------------------------------

GOOD = "ns/p podUID=u reservedAt=1 | #0 c GPU-a=1MiB,0%"
PATH = "GPULedger n: spec.allocations[0]"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "'' is not NAMESPACE/NAME"),
        ("nsp podUID=u", "'nsp' is not NAMESPACE/NAME"),
        ("ns/p/q podUID=u", "'ns/p/q' is not NAMESPACE/NAME"),
        ("ns/p reservedAt=1", "(ns/p): podUID is missing"),
        ("ns/p podUID= reservedAt=1", "(ns/p): podUID is empty (it is the entry's key)"),
        ("/ podUID= reservedAt=1", "(/): podUID is empty (it is the entry's key)"),
        # The shape the fast path matches whole (reservedAt given): its own bound checks send these
        # to the checked path, which names the field.
        (
            "ns/p podUID=u reservedAt=1 | #1048577 c GPU-a=1MiB,0%",
            "(ns/p) container #1048577: index 1048577 is outside 0..1048576",
        ),
        (
            "ns/p podUID=u reservedAt=1 | #0 c GPU-a=16777217MiB,0%",
            "(ns/p) container #0 GPU GPU-a: memoryMiB 16777217 is outside 0..16777216",
        ),
        (
            "ns/p podUID=u reservedAt=1 | #0 c GPU-a=1MiB,101%",
            "(ns/p) container #0 GPU GPU-a: cores 101 is outside 0..100",
        ),
        ("ns/p podUID=u podUID=v", "podUID is given twice"),
        ("ns/p podUID=u committed committed", "committed is given twice"),
        ("ns/p podUID=u  queue=q", "unknown field ''"),
        (
            "ns/p podUID=u held",
            "unknown field 'held' (known: podUID, queue, podGroup, reservedAt, committed, admitted, adopted)",
        ),
        ("ns/p podUID=u priority=9", "unknown field 'priority=9'"),
        ("ns/p podUID=u reservedAt=soon", "(ns/p): reservedAt 'soon' is not a number"),
        ("ns/p podUID=u reservedAt=-1", "(ns/p): reservedAt '-1' is not a number"),
        ("ns/p podUID=u reservedAt=10000000000", "(ns/p): reservedAt 10000000000 is outside 0..9999999999"),
        ("ns/p podUID=u reservedAt=" + "9" * 40, "(ns/p): reservedAt '" + "9" * 40 + "' is not a number"),
        ("ns/p podUID=%ff", "(ns/p): podUID '%ff' is not UTF-8 once percent-decoded"),
        ("ns/p podUID=u | 0 c", "(ns/p) container 0: '0' is not #INDEX"),
        ("ns/p podUID=u | #x", "(ns/p) container #x: index 'x' is not a number"),
        ("ns/p podUID=u | #1048577", "(ns/p) container #1048577: index 1048577 is outside 0..1048576"),
        ("ns/p podUID=u | #0 c GPU-a", "(ns/p) container #0: device 'GPU-a' is not UUID=MEMORYMiB,CORES%"),
        ("ns/p podUID=u | #0 c GPU-a=1,0%", "device 'GPU-a=1,0%' is not UUID=MEMORYMiB,CORES%"),
        ("ns/p podUID=u | #0 c GPU-a=1MiB,0", "device 'GPU-a=1MiB,0' is not UUID=MEMORYMiB,CORES%"),
        (
            "ns/p podUID=u | #0 c GPU-a=xMiB,0%",
            "(ns/p) container #0 GPU GPU-a: memoryMiB 'x' is not a number",
        ),
        ("ns/p podUID=u | #0 c GPU-a=16777217MiB,0%", "GPU GPU-a: memoryMiB 16777217 is outside 0..16777216"),
        ("ns/p podUID=u | #0 c GPU-a=999999999999999999MiB,0%", "memoryMiB 999999999999999999 is outside"),
        (
            "ns/p podUID=u | #0 c GPU-a=1MiB,101%",
            "(ns/p) container #0 GPU GPU-a: cores 101 is outside 0..100",
        ),
        ("ns/p podUID=u | #0 c GPU-a=1MiB,٣%", "cores '٣' is not a number"),
        (
            "ns/p podUID=u | #0 c GPU-a=1MiB,0%,mem=2",
            "unknown or repeated attribute 'mem=2' (known: mig, slices)",
        ),
        (
            "ns/p podUID=u | #0 c GPU-a=1MiB,0%,mig=g/p/1,mig=g/p/2",
            "unknown or repeated attribute 'mig=g/p/2'",
        ),
        ("ns/p podUID=u | #0 c GPU-a=1MiB,0%,slices=0+1", "GPU GPU-a: slices without mig"),
        ("ns/p podUID=u | #0 c GPU-a=1MiB,0%,mig=g/p", "mig 'g/p' is not GROUP/PROFILE/POSITION"),
        ("ns/p podUID=u | #0 c GPU-a=1MiB,0%,mig=g/p/1025", "mig position 1025 is outside 0..1024"),
        ("ns/p podUID=u | #0 c GPU-a=1MiB,0%,mig=g/p/1,slices=2", "slices '2' is not START+SIZE"),
        ("ns/p podUID=u | #0 c GPU-a=1MiB,0%,mig=g/p/1,slices=2+0", "slices size 0 is outside 1..1024"),
        (
            "ns/p podUID=u | #0 c GPU-a=1MiB,0%,mig=g/p/1,slices=2000+1",
            "slices start 2000 is outside 0..1024",
        ),
    ],
)
def test_a_malformed_entry_is_refused_naming_the_field(text: str, message: str) -> None:
    with pytest.raises(LedgerError) as refused:
        decode_ledger({"metadata": {"name": "n"}, "spec": {"nodeName": "n", "allocations": [text]}})
    assert str(refused.value).startswith(PATH)
    assert message in str(refused.value)


def test_the_bounds_themselves_are_readable() -> None:
    edge = (
        f"ns/p podUID=u reservedAt={MAX_UNIX_SECONDS} | #{MAX_CONTAINER_INDEX} "
        f"GPU-a={MAX_GPU_MEMORY_MIB}MiB,100%,mig=g/p/{MAX_MIG_NUMBER},slices={MAX_MIG_NUMBER}+{MAX_MIG_NUMBER}"
    )
    entry = decode_entry(edge)
    assert entry.reserved_at == MAX_UNIX_SECONDS and entry.containers[0].index == MAX_CONTAINER_INDEX
    [grant] = entry.grants()
    assert (grant.memory, grant.cores, grant.mig) == (
        MAX_GPU_MEMORY_MIB,
        100,
        MigSlot("g", "p", MAX_MIG_NUMBER, MAX_MIG_NUMBER, MAX_MIG_NUMBER),
    )


def test_one_bad_entry_fails_its_node_only_and_is_remembered_in_the_cache() -> None:
    good = {"metadata": {"name": "a"}, "spec": {"nodeName": "a", "allocations": [GOOD]}}
    bad = {
        "metadata": {"name": "b"},
        "spec": {"nodeName": "b", "allocations": [GOOD.replace("u ", "v "), "x/y"]},
    }
    assert decode_ledger(good).allocations["u"].grants().__next__().uuid == "GPU-a"
    with pytest.raises(LedgerError, match=r"^GPULedger b: spec.allocations\[1\] \(x/y\): podUID is missing$"):
        decode_ledger(bad)
    with pytest.raises(LedgerError, match="podUID is missing"):
        decode_ledger(cached_ledger(bad))
    assert decode_ledger(cached_ledger(good)) == decode_ledger(good)


@pytest.mark.parametrize("item", [None, 7, True, ["ns/p podUID=u"], 1.5])
def test_an_entry_that_is_neither_text_nor_an_object_is_refused(item: object) -> None:
    with pytest.raises(LedgerError, match=r"spec.allocations\[0\]: expected a string \(or an object"):
        decode_ledger({"metadata": {"name": "n"}, "spec": {"nodeName": "n", "allocations": [item]}})


def test_a_uid_twice_is_refused_whatever_the_encoding_of_each() -> None:
    ledger = NodeLedger("n", {WEB.pod_uid: WEB})
    [old] = old_encoded_ledger(ledger)["spec"]["allocations"]
    with pytest.raises(LedgerError, match=f"pod uid {UID} appears twice"):
        decode_ledger(
            {"metadata": {"name": "n"}, "spec": {"nodeName": "n", "allocations": [old, encode_entry(WEB)]}}
        )


# -- ledgers written by the release before issue 44 ---------------------------------------------------


def test_an_old_encoded_ledger_reads_the_same_and_is_rewritten_as_text() -> None:
    ledger = NodeLedger("n", {WEB.pod_uid: WEB, MIG.pod_uid: MIG}, resource_version="3")
    old = old_encoded_ledger(ledger, NODE)
    assert isinstance(old["spec"]["allocations"][0], dict) and isinstance(
        old["spec"]["summary"]["perGPU"][0], dict
    )
    read = decode_ledger(old)
    assert read == ledger and read.legacy and read.resource_version == "3"
    assert decode_ledger(cached_ledger(old)).legacy
    new = encode_ledger(read, ledger_summary(read, NODE))
    assert all(isinstance(e, str) for e in new["spec"]["allocations"])
    assert all(isinstance(g, str) for g in new["spec"]["summary"]["perGPU"])
    again = decode_ledger(new)
    assert again == ledger and not again.legacy


def test_a_ledger_mixing_both_encodings_reads_whole_and_a_summary_alone_marks_it_old() -> None:
    """Mid-upgrade an old replica's entries may sit beside a new one's (each writes the whole list:
    in practice one or the other, but a reader must not care)."""
    [old] = old_encoded_ledger(NodeLedger("n", {WEB.pod_uid: WEB}))["spec"]["allocations"]
    mixed = {"metadata": {"name": "n"}, "spec": {"nodeName": "n", "allocations": [old, encode_entry(MIG)]}}
    read = decode_ledger(mixed)
    assert read.allocations == {WEB.pod_uid: WEB, MIG.pod_uid: MIG} and read.legacy
    old_summary = old_encoded_ledger(NodeLedger("n", {MIG.pod_uid: MIG}), NODE)["spec"]["summary"]
    text_entries: dict[str, Any] = {"nodeName": "n", "allocations": [encode_entry(MIG)]}
    assert not decode_ledger({"metadata": {"name": "n"}, "spec": text_entries}).legacy
    assert decode_ledger({"metadata": {"name": "n"}, "spec": {**text_entries, "summary": old_summary}}).legacy


def _schema(crd: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_the_crd_takes_both_encodings_and_the_old_crd_only_its_own() -> None:
    """During an upgrade the old release writes objects under the new CRD (taken as sent); the new
    release never runs against the old CRD for long (the chart applies the CRD before the pods),
    and if it did, its writes would be refused (422), never stored half-read."""
    import jsonschema

    ledger = NodeLedger("n", {WEB.pod_uid: WEB, MIG.pod_uid: MIG})
    new, old = encode_ledger(ledger, ledger_summary(ledger, NODE)), old_encoded_ledger(ledger, NODE)
    crd_validator().validate(new)
    crd_validator().validate(old)
    old_validator = jsonschema.validators.validator_for(_schema(old_crd()))(_schema(old_crd()))
    old_validator.validate(old)
    assert not old_validator.is_valid(new)


def test_the_old_release_refuses_a_ledger_this_release_wrote_naming_the_entry() -> None:
    """What an old replica does mid-upgrade with a ledger a new one rewrote: its decoder refuses
    the whole ledger (never reads it as empty), so its controller leaves that node alone and its
    arbiter answers the node's Bindings with a retriable 503; it writes nothing there, and no entry
    is lost. (Its reading of its own old-encoded ledgers is unchanged.)"""
    ledger = NodeLedger("n", {WEB.pod_uid: WEB})
    new = encode_ledger(ledger, ledger_summary(ledger, NODE))
    with pytest.raises(LedgerError, match=r"^GPULedger n: spec.allocations\[0\]: expected an object$"):
        old_decode_ledger(new)
    assert old_decode_ledger(old_encoded_ledger(ledger, NODE)) == ledger
    assert old_decode_ledger({**new, "spec": {**new["spec"], "allocations": []}}) == NodeLedger("n")
