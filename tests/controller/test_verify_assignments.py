"""The controller verifies before it trusts (issues 21 and 22): assignment annotations with bad
entries, ledgers edited by hand, pods bound outside our path with annotations patched in."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tests.controller.allocation_testkit import Cluster, gpu_node, vgpu_pod
from vgpu_guard.engine.ledger import gpu_usage
from vgpu_guard.kube.resources import LEDGERS, PODS

INVALID_ENTRY_MESSAGE = (
    "volcano.sh/vgpu-ids-new has invalid entries: container 1: device "
    "'GPU-gpu-0-9,NVIDIA,lots,0' is not UUID,TYPE,memory,cores with integer memory and cores; "
    "the device plugin skips malformed devices; every valid device is held in the GPU ledger until "
    "the pod ends"
)
LEDGER_MISMATCH_MESSAGE = (
    "the GPU ledger of node a held less than this pod's volcano.sh/vgpu-ids-new says "
    "(GPU-a-0: ledger 0 MiB/0% < assignment 20480 MiB/0%); the ledger now holds the larger amount "
    "until the pod ends and no new pod is placed on that capacity; check who edited GPULedger a or this "
    "pod's annotations"
)
OVER_CAPACITY_MESSAGE = (
    "this pod's volcano.sh/vgpu-ids-new on node a was not made by vgpu-guard and takes more than "
    "the GPU has (GPU-a-0: 28672 MiB reserved > 24576 MiB registered); vgpu-guard holds the full "
    "claim until the pod ends and places no new pod on that GPU; check who set the annotation"
)


def _mismatches(registry: CollectorRegistry, kind: str) -> float:
    return registry.get_sample_value("vgpu_guard_assignment_mismatches_total", {"kind": kind}) or 0.0


def _used(cluster: Cluster, node: str, gpu: str) -> int:
    usage = gpu_usage(cluster.ledgers()[node].allocations.values())
    return usage[gpu].memory if gpu in usage else 0


def _gpus_of(cluster: Cluster, name: str) -> set[str]:
    raw = cluster.pod(name)["metadata"]["annotations"]["volcano.sh/vgpu-ids-new"]
    return {record.split(",")[0] for record in raw.split(":") if record}


async def test_one_malformed_entry_keeps_the_valid_entrys_memory_held_and_the_probe_pending(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A pod whose assignment has one malformed and one valid entry: the valid entry's memory is held in
    # the ledger, and a probe pod asking for that GPU's remaining memory plus one MiB stays Pending.
    cluster = Cluster([gpu_node("gpu-0", 1)])
    registry = CollectorRegistry()
    controller = cluster.replica(registry=registry)
    cluster.bound_with_assignment(
        "held",
        node="gpu-0",
        ids="GPU-gpu-0-0,NVIDIA,10240,0:GPU-gpu-0-9,NVIDIA,lots,0:",
        memory=10240,
    )
    remaining = 24576 - 10240
    cluster.create_pod(vgpu_pod("probe", memory=remaining + 1))
    with caplog.at_level(logging.WARNING, logger="vgpu_guard.controller.allocation"):
        await cluster.converge(controller)
    assert _used(cluster, "gpu-0", "GPU-gpu-0-0") == 10240
    assert "probe" not in cluster.bound()
    condition = cluster.condition("probe")
    assert condition is not None and condition["reason"] == "Unschedulable"
    [event] = cluster.events("InvalidAssignmentEntry")
    assert event["type"] == "Warning"
    assert event["involvedObject"]["name"] == "held"
    assert event["message"] == INVALID_ENTRY_MESSAGE
    assert f"pod default/held: {INVALID_ENTRY_MESSAGE}" in caplog.messages
    assert _mismatches(registry, "invalid-entry") == 1
    # What is left is still usable, and the report is not repeated on later passes.
    cluster.create_pod(vgpu_pod("fits", memory=remaining))
    await cluster.converge(controller)
    assert "fits" in cluster.bound() and "probe" not in cluster.bound()
    assert cluster.violations() == []
    assert len(cluster.events("InvalidAssignmentEntry")) == 1
    assert _mismatches(registry, "invalid-entry") == 1


async def test_ledger_entry_edited_to_zero_is_raised_back_and_the_busy_card_gets_no_new_pod(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = Cluster([gpu_node("a", 2)])
    registry = CollectorRegistry()
    controller = cluster.replica(registry=registry)
    pin = {"volcano.sh/vgpu-use-gpuuuid": "GPU-a-0"}
    cluster.create_pod(vgpu_pod("busy", memory=20480, annotations=pin))
    await cluster.converge(controller)
    assert _gpus_of(cluster, "busy") == {"GPU-a-0"}

    obj: dict[str, Any] = cluster.store.get(LEDGERS, "a")
    [entry] = obj["spec"]["allocations"]
    assert "=20480MiB," in entry
    obj["spec"]["allocations"] = [entry.replace("=20480MiB,", "=0MiB,")]  # a careless operator's kubectl edit
    cluster.store.replace(LEDGERS, obj)
    assert _used(cluster, "a", "GPU-a-0") == 0

    cluster.create_pod(vgpu_pod("on-busy", memory=10240, annotations=pin))
    cluster.create_pod(vgpu_pod("anywhere", memory=10240))
    with caplog.at_level(logging.INFO):
        await cluster.converge(controller)
    assert _used(cluster, "a", "GPU-a-0") == 20480
    assert "on-busy" not in cluster.bound()
    assert _gpus_of(cluster, "anywhere") == {"GPU-a-1"}
    assert cluster.violations() == []
    [event] = _on(cluster.events("LedgerMismatch"), "Pod")
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == "busy"
    assert event["message"] == LEDGER_MISMATCH_MESSAGE
    # The edited GPULedger gets its own Event, and its node counts the entry as a ledger violation
    # until the pod ends (the gauge stayed 0 before, issue 22).
    [on_ledger] = _on(cluster.events("LedgerMismatch"), "GPULedger")
    assert on_ledger["involvedObject"]["name"] == "a" and on_ledger["type"] == "Warning"
    assert on_ledger["message"] == (
        "entry of pod default/busy held less than the pod's volcano.sh/vgpu-ids-new "
        "(GPU-a-0: ledger 0 MiB/0% < assignment 20480 MiB/0%); raised to the larger amount until the pod "
        "ends; check who edited this GPULedger"
    )
    assert registry.get_sample_value("vgpu_guard_ledger_violations", {"node": "a"}) == 1
    assert f"pod default/busy: {LEDGER_MISMATCH_MESSAGE}" in caplog.messages
    audits = [json.loads(json.dumps(r.__dict__["audit"])) for r in caplog.records if hasattr(r, "audit")]
    [repair] = [a for a in audits if a["event"] == "ledger-repair"]
    assert repair["pod"] == "default/busy" and repair["node"] == "a"
    assert _mismatches(registry, "ledger-below-assignment") == 1


async def test_pre_bound_pod_with_patched_annotations_holds_its_claim_and_is_reported() -> None:
    cluster = Cluster([gpu_node("a", 2)])
    registry = CollectorRegistry()
    controller = cluster.replica(registry=registry)
    pod = vgpu_pod("forged", memory=1024)
    pod["spec"]["nodeName"] = "a"  # bound outside our path: created with spec.nodeName
    cluster.create_pod(pod)
    await cluster.converge(controller)
    assert "a" not in cluster.ledgers() or not cluster.ledgers()["a"].allocations
    cluster.store.patch(
        PODS,
        "forged",
        {
            "metadata": {
                "annotations": {
                    "volcano.sh/vgpu-ids-new": "GPU-a-0,NVIDIA,28672,0:",
                    "volcano.sh/devices-to-allocate": "GPU-a-0,NVIDIA,28672,0:",
                    "volcano.sh/vgpu-node": "a",
                    "volcano.sh/bind-phase": "success",
                }
            }
        },
        namespace="default",
    )
    cluster.create_pod(vgpu_pod("next", memory=1024, annotations={"volcano.sh/vgpu-use-gpuuuid": "GPU-a-0"}))
    cluster.create_pod(vgpu_pod("other", memory=1024))
    await cluster.converge(controller)
    # The claim is held in full and nothing is added on top of it.
    assert _used(cluster, "a", "GPU-a-0") == 28672
    assert "next" not in cluster.bound()
    assert _gpus_of(cluster, "other") == {"GPU-a-1"}
    [event] = cluster.events("AssignmentOverCapacity")
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == "forged"
    assert event["message"] == OVER_CAPACITY_MESSAGE
    [node_event] = cluster.events("GPUOvercommitted")
    assert node_event["involvedObject"]["kind"] == "Node"
    assert registry.get_sample_value("vgpu_guard_ledger_violations", {"node": "a"}) == 1
    assert _mismatches(registry, "adopted-over-capacity") == 1


async def test_annotation_patched_larger_after_our_binding_raises_the_entry() -> None:
    cluster = Cluster([gpu_node("a", 1)])
    registry = CollectorRegistry()
    controller = cluster.replica(registry=registry)
    cluster.create_pod(vgpu_pod("small", memory=4096))
    await cluster.converge(controller)
    cluster.store.patch(
        PODS,
        "small",
        {"metadata": {"annotations": {"volcano.sh/vgpu-ids-new": "GPU-a-0,NVIDIA,20480,30:"}}},
        namespace="default",
    )
    cluster.create_pod(vgpu_pod("probe", memory=24576 - 20480 + 1))
    await cluster.converge(controller)
    assert _used(cluster, "a", "GPU-a-0") == 20480
    [grant] = cluster.ledgers()["a"].allocations[cluster.pod("small")["metadata"]["uid"]].grants()
    assert (grant.memory, grant.cores) == (20480, 30)
    assert "probe" not in cluster.bound()
    [event] = _on(cluster.events("LedgerMismatch"), "Pod")
    assert "(GPU-a-0: ledger 4096 MiB/0% < assignment 20480 MiB/30%)" in event["message"]
    assert _mismatches(registry, "ledger-below-assignment") == 1
    # Patched back down: the plugin handed the pod its devices (bind-phase success) and the
    # running container keeps them, so the entry is never lowered while the pod runs.
    cluster.store.patch(
        PODS,
        "small",
        {"metadata": {"annotations": {"volcano.sh/vgpu-ids-new": "GPU-a-0,NVIDIA,4096,0:"}}},
        namespace="default",
    )
    await cluster.converge(controller)
    assert _used(cluster, "a", "GPU-a-0") == 20480
    assert len(_on(cluster.events("LedgerMismatch"), "Pod")) == 1
    assert not cluster.events("LedgerEntryShrunk")


async def test_a_pod_whose_annotation_matches_its_entry_is_never_reported() -> None:
    cluster = Cluster([gpu_node("a", 2)])
    registry = CollectorRegistry()
    controller = cluster.replica(registry=registry)
    for i in range(3):
        cluster.create_pod(vgpu_pod(f"p{i}", memory=8192))
    await cluster.converge(controller)
    await cluster.converge(controller)
    assert len(cluster.bound()) == 3
    for reason in ("LedgerMismatch", "InvalidAssignmentEntry", "AssignmentOverCapacity"):
        assert cluster.events(reason) == []
    for kind in (
        "invalid-entry",
        "ledger-below-assignment",
        "ledger-above-assignment",
        "adopted-over-capacity",
    ):
        assert _mismatches(registry, kind) == 0


@pytest.mark.parametrize(
    ("ids", "detail"),
    [
        ("GPU-elsewhere,NVIDIA,1024,0:", "GPU-elsewhere: not registered on the node"),
    ],
)
async def test_adopted_over_capacity_messages_for_cores_and_unknown_gpus(ids: str, detail: str) -> None:
    cluster = Cluster([gpu_node("a", 1)])
    controller = cluster.replica()
    cluster.bound_with_assignment("old", node="a", ids=ids, memory=1024)
    await cluster.converge(controller)
    [event] = cluster.events("AssignmentOverCapacity")
    assert event["message"] == (
        "this pod's volcano.sh/vgpu-ids-new on node a was not made by vgpu-guard and takes more than "
        f"the GPU has ({detail}); vgpu-guard holds the full claim until the pod ends and places no new "
        "pod on that GPU; check who set the annotation"
    )


async def test_cores_over_100_are_held_as_the_whole_card_and_reported() -> None:
    # The ledger cannot record more than 100 %; one such annotation must never stop every pass.
    cluster = Cluster([gpu_node("a", 1)])
    controller = cluster.replica()
    cluster.bound_with_assignment("old", node="a", ids="GPU-a-0,NVIDIA,1024,150:", memory=1024)
    cluster.create_pod(vgpu_pod("probe", memory=1024, cores=1))
    await cluster.converge(controller)
    [grant] = next(iter(cluster.ledgers()["a"].allocations.values())).grants()
    assert (grant.memory, grant.cores) == (1024, 100)
    assert "probe" not in cluster.bound()
    [event] = cluster.events("InvalidAssignmentEntry")
    assert event["message"] == (
        "volcano.sh/vgpu-ids-new has invalid entries: container 1: device 'GPU-a-0' has 150% cores, "
        "held as 100%; the device plugin skips malformed devices; every valid device is held in the GPU "
        "ledger until the pod ends"
    )


async def test_an_assignment_with_no_valid_device_is_reported_and_never_stops_a_pass() -> None:
    cluster = Cluster([gpu_node("a", 1)])
    controller = cluster.replica()
    cluster.bound_with_assignment("old", node="a", ids="GPU-a-0,NVIDIA,lots,0:", memory=1024)
    cluster.create_pod(vgpu_pod("next", memory=1024))
    await cluster.converge(controller)
    assert "next" in cluster.bound()
    [event] = cluster.events("InvalidAssignmentEntry")
    assert "device 'GPU-a-0,NVIDIA,lots,0' is not UUID,TYPE,memory,cores" in event["message"]


async def test_a_flood_of_bad_entries_names_five_and_counts_the_rest() -> None:
    cluster = Cluster([gpu_node("a", 1)])
    registry = CollectorRegistry()
    controller = cluster.replica(registry=registry)
    ids = "GPU-a-0,NVIDIA,1024,0:" + "".join(f"GPU-x{i},NVIDIA,?,0:" for i in range(1000))
    cluster.bound_with_assignment("old", node="a", ids=ids, memory=1024)
    await cluster.converge(controller)
    [event] = cluster.events("InvalidAssignmentEntry")
    assert event["message"].count("is not UUID,TYPE,memory,cores") == 5
    assert "; and 995 more; the device plugin skips malformed devices" in event["message"]
    assert _mismatches(registry, "invalid-entry") == 1000
    assert _used(cluster, "a", "GPU-a-0") == 1024


def _on(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["involvedObject"]["kind"] == kind]
