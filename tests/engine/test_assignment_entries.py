"""Assignment annotations decoded entry by entry, as the device plugin does (issue 21), and the
ledger entry raised to the larger of ledger and annotation (issue 22)."""

from __future__ import annotations

from tests.engine.allocation_testkit import config, request, vgpu_pod
from vgpu_guard.engine.assignment import (
    DecodedDevice,
    adopted_allocation,
    decode_assignment_entries,
    held_exactly,
    held_less,
    hold_larger,
)
from vgpu_guard.engine.ledger import Allocation, ContainerGrant, DeviceGrant, MigSlot


def test_valid_devices_are_kept_and_each_invalid_one_is_named_with_its_container() -> None:
    decoded = decode_assignment_entries(
        "GPU-a,NVIDIA,1024,10:GPU-b,NVIDIA,lots,0:;GPU-c[x],NVIDIA,1,0:GPU-d,NVIDIA,2048,0:;,NVIDIA,1,0:;"
    )
    assert decoded.containers == [
        [DecodedDevice("GPU-a", "NVIDIA", 1024, 10)],
        [DecodedDevice("GPU-d", "NVIDIA", 2048, 0)],
        [],
    ]
    assert decoded.invalid == [
        "container 1: device 'GPU-b,NVIDIA,lots,0' is not UUID,TYPE,memory,cores with integer memory and cores",
        "container 2: MIG device id 'GPU-c[x]' is not UUID[<group>-<position>]",
        "container 3: device ',NVIDIA,1,0' has an empty UUID",
    ]


def test_a_well_formed_assignment_has_no_findings() -> None:
    decoded = decode_assignment_entries("GPU-a[group2-3],NVIDIA,10240,0:;GPU-b,NVIDIA,1,2:")
    assert decoded.invalid == []
    assert [len(c) for c in decoded.containers] == [1, 1]


def test_adoption_keeps_the_valid_devices_and_reports_containers_the_pod_does_not_have() -> None:
    cfg = config()
    pod = request(vgpu_pod("p", memory=1024, uid="u1"), cfg)
    adoption = adopted_allocation(
        pod,
        "GPU-a-0,NVIDIA,1024,0:GPU-a-1,NVIDIA,?,0:;GPU-a-1,NVIDIA,2048,0:",
        queue="default",
        node=None,
        nvidia=cfg.nvidia,
    )
    assert [g.uuid for g in adoption.allocation.grants()] == ["GPU-a-0"]
    assert adoption.invalid == [
        "container 1: device 'GPU-a-1,NVIDIA,?,0' is not UUID,TYPE,memory,cores with integer memory and cores",
        "the assignment lists 2 containers, the pod has 1 vGPU containers; the device plugin never hands "
        "out the entries after container 1",
    ]


def _entry(*devices: DeviceGrant) -> Allocation:
    return Allocation(
        pod_uid="u1",
        namespace="default",
        name="p",
        queue="default",
        containers=(ContainerGrant(index=0, name="main", devices=devices),),
        committed=True,
    )


def test_hold_larger_raises_memory_and_cores_and_adds_missing_devices_never_lowers() -> None:
    entry = _entry(DeviceGrant("GPU-a", 0, 50), DeviceGrant("GPU-b", 8192, 0))
    decoded = [
        [
            DecodedDevice("GPU-a", "NVIDIA", 4096, 10),
            DecodedDevice("GPU-b", "NVIDIA", 1024, 0),
            DecodedDevice("GPU-c", "NVIDIA", 512, 5, mig_group="group1", mig_position=2),
        ]
    ]
    fixed, findings = hold_larger(entry, decoded, memory_factor=2)
    assert [(g.uuid, g.memory, g.cores) for g in fixed.grants()] == [
        ("GPU-a", 8192, 50),
        ("GPU-b", 8192, 0),
        ("GPU-c", 1024, 5),
    ]
    assert list(fixed.grants())[2].mig == MigSlot(group="group1", profile="", position=2)
    assert fixed.committed and fixed.pod_uid == "u1"
    assert findings == [
        "GPU-a: ledger 0 MiB/50% < assignment 8192 MiB/10%",
        "GPU-c: ledger none < assignment 1024 MiB/5%",
    ]


def test_hold_larger_leaves_an_entry_that_covers_the_annotation_alone() -> None:
    entry = _entry(DeviceGrant("GPU-a", 4096, 10))
    fixed, findings = hold_larger(entry, [[DecodedDevice("GPU-a", "NVIDIA", 4096, 10)]])
    assert fixed is entry and findings == []


def test_hold_larger_takes_a_known_mig_instance_as_held_whatever_memory_the_annotation_says() -> None:
    slot = MigSlot(group="group1", profile="1g.10gb", position=0, start=0, size=1)
    entry = _entry(DeviceGrant("GPU-a", 9856, 0, mig=slot))
    fixed, findings = hold_larger(
        entry, [[DecodedDevice("GPU-a", "NVIDIA", 10240, 0, mig_group="group1", mig_position=0)]]
    )
    assert fixed is entry and findings == []


def test_held_exactly_raises_lowers_adds_and_drops_to_the_annotation() -> None:
    """A bound pod not handed its devices yet is handed its annotation: the entry becomes it (issue
    43: a second Binding admitted beside the one that landed held GPU-b for nothing)."""
    entry = _entry(DeviceGrant("GPU-a", 0, 50), DeviceGrant("GPU-b", 8192, 0), DeviceGrant("GPU-d", 4096, 30))
    decoded = [
        [
            DecodedDevice("GPU-a", "NVIDIA", 4096, 10),
            DecodedDevice("GPU-d", "NVIDIA", 1024, 30),
            DecodedDevice("GPU-c", "NVIDIA", 512, 5),
        ]
    ]
    fixed, findings = held_exactly(entry, decoded, memory_factor=2)
    assert [(g.uuid, g.memory, g.cores) for g in fixed.grants()] == [
        ("GPU-a", 8192, 10),
        ("GPU-d", 2048, 30),
        ("GPU-c", 1024, 5),
    ]
    assert fixed.committed and fixed.pod_uid == "u1"
    assert findings == [
        "GPU-a: ledger 0 MiB/50% < assignment 8192 MiB/10%",
        "GPU-d: ledger 4096 MiB/30% > assignment 2048 MiB/30%",
        "GPU-c: ledger none < assignment 1024 MiB/5%",
        "GPU-b: ledger 8192 MiB/0% > assignment none",
    ]
    assert [held_less(f) for f in findings] == [True, False, True, False]


def test_held_exactly_leaves_an_equal_entry_and_a_known_mig_instance_alone() -> None:
    entry = _entry(DeviceGrant("GPU-a", 4096, 10))
    fixed, findings = held_exactly(entry, [[DecodedDevice("GPU-a", "NVIDIA", 4096, 10)]])
    assert fixed is entry and findings == []
    slot = MigSlot(group="group1", profile="1g.10gb", position=0, start=0, size=1)
    mig = _entry(DeviceGrant("GPU-a", 9856, 0, mig=slot))
    fixed, findings = held_exactly(
        mig, [[DecodedDevice("GPU-a", "NVIDIA", 10240, 0, mig_group="group1", mig_position=0)]]
    )
    assert fixed is mig and findings == []


def test_held_exactly_only_raises_past_what_any_gpu_has() -> None:
    """A device the decoder flags as larger than any GPU is not held; the rest is not given up."""
    entry = _entry(DeviceGrant("GPU-a", 4096, 10), DeviceGrant("GPU-b", 1024, 0))
    fixed, findings = held_exactly(entry, [[DecodedDevice("GPU-a", "NVIDIA", 10**9, 10)]])
    assert fixed is entry and findings == []
