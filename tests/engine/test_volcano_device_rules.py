"""Volcano's device rules, rule by rule (issue 43 item 5): a registration's health as
``strconv.ParseBool`` reads it, a UUID registered twice costing that card and not the node, and
Volcano's exclusive-cores rules in the allocator's card fit and in the ledger's write check."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.builders import default_config, gpu_node, pod, view_of
from tests.engine.allocation_testkit import A10, config, place_all, vgpu_pod, view
from tests.engine.allocation_testkit import gpu_node as allocator_node
from vgpu_guard.engine.allocator import Allocator, Placement, Unplaceable
from vgpu_guard.engine.arbiter import Refused, Reserved, arbitrate
from vgpu_guard.engine.assignment_writes import WrittenAssignment, binding_assignment
from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.devices import go_parse_bool, parse_registration
from vgpu_guard.engine.ledger import Allocation, ContainerGrant, DeviceGrant, NodeLedger, check_write
from vgpu_guard.engine.pod_request import PodRequest, pod_request

NVIDIA = default_config().nvidia
NOW = 1_750_000_000


def record(uuid: str, health: str = "true") -> str:
    return f"{uuid},10,24576,{A10},{health},hami-core:"


# --- health: strconv.ParseBool ----------------------------------------------------------------------


@pytest.mark.parametrize("text", ["1", "t", "T", "TRUE", "true", "True"])
def test_every_spelling_parse_bool_reads_as_true_is_healthy(text: str) -> None:
    reg = parse_registration(record("GPU-1", text))
    assert reg.error is None and reg.devices[0].healthy and reg.notes == ()


@pytest.mark.parametrize("text", ["0", "f", "F", "FALSE", "false", "False"])
def test_every_spelling_parse_bool_reads_as_false_is_unhealthy(text: str) -> None:
    reg = parse_registration(record("GPU-1", text))
    assert reg.error is None and not reg.devices[0].healthy and reg.notes == ()


@pytest.mark.parametrize("text", ["yes", "tRUE", "", "2", "on"])
def test_health_parse_bool_cannot_read_is_unhealthy_and_noted_not_a_node_problem(text: str) -> None:
    reg = parse_registration(record("GPU-0") + record("GPU-1", text))
    assert reg.error is None
    assert [(d.uuid, d.healthy) for d in reg.devices] == [("GPU-0", True), ("GPU-1", False)]
    assert reg.notes == (
        f"record 2: GPU GPU-1 has health {text!r}, which strconv.ParseBool does not read, so it is "
        "unhealthy (Volcano reads it so too)",
    )
    assert go_parse_bool(text) is None


def test_health_true_capitalised_leaves_the_node_placeable() -> None:
    """The issue's node: every record says ``True``; it took 0 of 59 pods, Volcano all of them."""
    raw = "".join(record(f"GPU-a-{i}", "True") for i in range(2))
    node = allocator_node("a", 2)
    node["metadata"]["annotations"]["volcano.sh/node-vgpu-register"] = raw
    allocator = Allocator(view([node]), {}, config=config())
    results = place_all(allocator, [vgpu_pod(f"p{i}", memory=1000) for i in range(4)])
    assert all(isinstance(r, Placement) and r.node == "a" for r in results)


# --- a UUID registered twice ------------------------------------------------------------------------


def test_a_uuid_registered_twice_is_one_unusable_card_and_the_others_stay() -> None:
    raw = record("GPU-0") + record("GPU-1") + record("GPU-0") + record("GPU-2")
    reg = parse_registration(raw)
    assert reg.error is None
    assert [(d.uuid, d.index, d.unusable is None) for d in reg.devices] == [
        ("GPU-0", 0, False),
        ("GPU-1", 1, True),
        ("GPU-2", 3, True),
    ]
    why = (
        "is registered twice in volcano.sh/node-vgpu-register (records 1 and 3): Volcano 1.13+ counts a "
        "pod on one copy only, so it takes no new assignment until the device plugin registers it once"
    )
    assert reg.devices[0].unusable == why
    assert reg.notes == (f"GPU GPU-0 {why}",)
    assert reg.mode == "hami-core"


def test_the_node_of_a_duplicate_keeps_its_gpus_and_names_the_card() -> None:
    raw = record("GPU-a-0") + record("GPU-a-1") + record("GPU-a-0")
    node = gpu_node("a", registration=raw)
    info = view_of([node]).nodes["a"]
    assert info.gpu_problem is None and info.vgpu_capable
    assert [g.uuid for g in info.gpus] == ["GPU-a-0", "GPU-a-1"]
    assert any("GPU GPU-a-0 is registered twice" in p for p in info.problems)


def test_the_allocator_places_on_the_other_cards_and_names_the_duplicate() -> None:
    node = allocator_node("a", 2)
    node["metadata"]["annotations"]["volcano.sh/node-vgpu-register"] = (
        record("GPU-a-0") + record("GPU-a-1") + record("GPU-a-0")
    )
    allocator = Allocator(view([node]), {}, config=config())
    first, second = place_all(allocator, [vgpu_pod("p", memory=24576), vgpu_pod("q", memory=24576)])
    assert isinstance(first, Placement)
    assert [d.uuid for d in first.allocation.grants()] == ["GPU-a-1"]
    assert isinstance(second, Unplaceable)
    assert second.message == (
        "0/1 nodes are available: 1 GPU is registered twice in volcano.sh/node-vgpu-register: GPU-a-0, "
        "1 GPU has no free memory (24576 MiB requested)"
    )


# --- exclusive cores in the ledger's write check (the arbiter) --------------------------------------

NODE: NodeInfo = view_of([gpu_node("gpu-0", count=2)]).nodes["gpu-0"]


def entry(name: str, uuid: str, cores: int, memory: int = 1024) -> Allocation:
    grant = ContainerGrant(0, "cuda", (DeviceGrant(uuid, memory, cores),))
    return Allocation(f"uid-{name}", "default", name, "default", (grant,), committed=True)


def ledger(*entries: Allocation) -> NodeLedger:
    return NodeLedger("gpu-0", {a.pod_uid: a for a in entries}, resource_version="1")


def written(old: NodeLedger, *added: Allocation) -> list[tuple[str, str]]:
    new = old
    for a in added:
        new = new.with_allocation(a)
    return [(v.kind, v.message) for v in check_write(old, new, NODE)]


def test_a_100_core_grant_on_a_card_in_use_is_refused_naming_the_gpu_and_pod() -> None:
    old = ledger(entry("small", "GPU-gpu-0-0", 0))
    assert written(old, entry("whole", "GPU-gpu-0-0", 100)) == [
        (
            "exclusive",
            "GPU GPU-gpu-0-0 on node gpu-0 is in use, and default/whole asks 100% cores, which Volcano "
            "gives only a GPU no pod holds (its exclusive rule)",
        )
    ]
    assert written(old, entry("whole", "GPU-gpu-0-1", 100)) == []


def test_a_0_core_grant_on_a_card_at_100_percent_is_refused() -> None:
    old = ledger(entry("a", "GPU-gpu-0-0", 60), entry("b", "GPU-gpu-0-0", 40))
    assert written(old, entry("zero", "GPU-gpu-0-0", 0)) == [
        (
            "cores-full",
            "GPU GPU-gpu-0-0 on node gpu-0 has all its cores taken (100%), and default/zero asks 0% cores, "
            "which Volcano never gives a GPU whose cores are all taken",
        )
    ]
    assert written(ledger(entry("a", "GPU-gpu-0-0", 99)), entry("zero", "GPU-gpu-0-0", 0)) == []


def test_the_sum_over_100_is_one_reason_not_three() -> None:
    kinds = [
        k for k, _ in written(ledger(entry("whole", "GPU-gpu-0-0", 100)), entry("more", "GPU-gpu-0-0", 10))
    ]
    assert kinds == ["cores"]


def test_grants_a_write_adds_are_judged_in_order_as_volcano_fits_them() -> None:
    # Volcano could reach {0, 50, 50} (the 0-core pod first) but never {50, 50, 0}.
    assert written(ledger(), entry("zero", "GPU-gpu-0-0", 0), entry("a", "GPU-gpu-0-0", 50)) == []
    two = written(
        ledger(), entry("a", "GPU-gpu-0-0", 50), entry("b", "GPU-gpu-0-0", 50), entry("z", "GPU-gpu-0-0", 0)
    )
    assert [k for k, _ in two] == ["cores-full"]
    # Two containers of one pod on one card: the second 100-core one meets the first.
    both = ContainerGrant(1, "b", (DeviceGrant("GPU-gpu-0-0", 1, 100),))
    pair = Allocation("uid-p", "default", "p", "default", (*entry("p", "GPU-gpu-0-0", 0).containers, both))
    assert [k for k, _ in written(ledger(), pair)] == ["exclusive"]


def test_a_grant_the_ledger_holds_already_is_not_judged_again() -> None:
    """Marking a held entry committed (or a second Binding naming the same devices) adds nothing,
    so a pre-existing state Volcano would not reach does not block the write."""
    shared = entry("whole", "GPU-gpu-0-0", 100)
    old = ledger(entry("small", "GPU-gpu-0-0", 0), replace(shared, committed=False))
    new = old.without(shared.pod_uid).with_allocation(shared)
    assert check_write(old, new, NODE) == []
    grown = replace(shared, containers=(ContainerGrant(0, "cuda", (DeviceGrant("GPU-gpu-0-0", 2048, 100),)),))
    new = old.without(shared.pod_uid).with_allocation(grown)
    assert [v.kind for v in check_write(old, new, NODE)] == ["exclusive"]


def test_a_card_registered_twice_takes_no_grant_but_its_holders_are_released() -> None:
    raw = record("GPU-a-0") + record("GPU-a-1") + record("GPU-a-0")
    node = view_of([gpu_node("a", registration=raw)]).nodes["a"]
    holder = Allocation(
        "uid-h", "default", "h", "default", (ContainerGrant(0, "c", (DeviceGrant("GPU-a-0", 1, 0),)),)
    )
    old = NodeLedger("a", {"uid-h": holder})
    new = NodeLedger("a", {"uid-h": holder}).with_allocation(
        Allocation(
            "uid-n", "default", "n", "default", (ContainerGrant(0, "c", (DeviceGrant("GPU-a-0", 1, 0),)),)
        )
    )
    assert [(v.kind, v.gpu) for v in check_write(old, new, node)] == [("registered-twice", "GPU-a-0")]
    assert check_write(old, NodeLedger("a"), node) == []
    elsewhere = NodeLedger("a").with_allocation(
        Allocation(
            "uid-n", "default", "n", "default", (ContainerGrant(0, "c", (DeviceGrant("GPU-a-1", 1, 0),)),)
        )
    )
    assert check_write(NodeLedger("a"), elsewhere, node) == []


# --- the arbiter's refusals, as Volcano's users read them ----------------------------------------------


def wanting(name: str, cores: int) -> PodRequest:
    obj = pod(
        {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 1024, "volcano.sh/vgpu-cores": cores},
        name=name,
    )
    obj["metadata"]["uid"] = f"uid-{name}"
    found = pod_request(obj, NVIDIA)
    assert found is not None
    return found


def binding(raw: str, name: str) -> WrittenAssignment:
    notes = {
        "volcano.sh/vgpu-ids-new": raw,
        "volcano.sh/devices-to-allocate": raw,
        "volcano.sh/vgpu-node": "gpu-0",
    }
    found = binding_assignment(
        {"metadata": {"annotations": notes}, "target": {"kind": "Node", "name": "gpu-0"}},
        None,
        pod_key=f"default/{name}",
    )
    assert isinstance(found, WrittenAssignment)
    return found


def arbitrate_on(node: NodeInfo, held: NodeLedger, name: str, raw: str, cores: int) -> Reserved | Refused:
    return arbitrate(
        binding(raw, name),
        wanting(name, cores),
        ledger=held,
        node=node,
        queue="default",
        now=NOW,
        nvidia=NVIDIA,
    )


@pytest.mark.parametrize(
    ("cores", "held_cores", "message"),
    [
        (
            100,
            [0],
            "GPU GPU-gpu-0-0 on node gpu-0 is in use, and default/p asks 100% cores, which Volcano gives only a "
            "GPU no pod holds (its exclusive rule) (held by default/h0)",
        ),
        (
            0,
            [70, 30],
            "GPU GPU-gpu-0-0 on node gpu-0 has all its cores taken (100%), and default/p asks 0% cores, which "
            "Volcano never gives a GPU whose cores are all taken (held by default/h0, default/h1)",
        ),
    ],
)
def test_the_arbiter_refuses_what_volcano_would_naming_gpu_and_holders(
    cores: int, held_cores: list[int], message: str
) -> None:
    held = ledger(*(entry(f"h{i}", "GPU-gpu-0-0", c) for i, c in enumerate(held_cores)))
    outcome = arbitrate_on(NODE, held, "p", f"GPU-gpu-0-0,NVIDIA,1024,{cores}:;", cores)
    assert isinstance(outcome, Refused)
    assert [v.message for v in outcome.violations] == [
        f"{message}; the assignment of pod default/p is refused before it lands, and Volcano decides again "
        "on its next session"
    ]
    free = arbitrate_on(NODE, held, "p", f"GPU-gpu-0-1,NVIDIA,1024,{cores}:;", cores)
    assert isinstance(free, Reserved) and free.ledger is not None


def test_the_arbiter_reserves_on_a_node_with_health_true_and_a_duplicate() -> None:
    """The issue's measurement: such a node refused 59 of 59 assignments; now only its duplicated
    card refuses, its other cards take them."""
    raw = record("GPU-gpu-0-0", "True") + record("GPU-gpu-0-1", "True") + record("GPU-gpu-0-0", "True")
    node = view_of([gpu_node("gpu-0", registration=raw)]).nodes["gpu-0"]
    held = NodeLedger("gpu-0")
    for i in range(5):
        outcome = arbitrate_on(node, held, f"p{i}", "GPU-gpu-0-1,NVIDIA,1024,10:;", 10)
        assert isinstance(outcome, Reserved) and outcome.ledger is not None
        held = outcome.ledger
    refused = arbitrate_on(node, held, "q", "GPU-gpu-0-0,NVIDIA,1024,10:;", 10)
    assert isinstance(refused, Refused)
    assert refused.violations[0].message.startswith(
        "GPU GPU-gpu-0-0 on node gpu-0 is registered twice in volcano.sh/node-vgpu-register (records 1 and 3)"
    )


# --- mode and extra fields, as getSharingMode and decodeNodeDevices read them ---------------------


def test_an_unknown_mode_is_hami_core_and_extra_fields_are_ignored_with_notes() -> None:
    reg = parse_registration(f"GPU-0,10,24576,{A10},true,vgpu:GPU-1,10,24576,{A10},true,hami-core,x:")
    assert reg.error is None
    assert [(d.uuid, d.mode, d.split_count) for d in reg.devices] == [
        ("GPU-0", "hami-core", 10),
        ("GPU-1", "hami-core", 10),
    ]
    assert reg.notes == (
        "record 1: GPU GPU-0 has mode 'vgpu', which Volcano reads as hami-core, as we do",
        "record 2: GPU GPU-1 has 7 fields; the ones after the sixth are ignored",
    )
