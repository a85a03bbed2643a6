"""``spec.summary`` of a GPULedger: exact per-GPU and node figures, schema-valid, and never read back."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from tests.controller.allocation_testkit import seed_000, vgpu_pod
from tests.engine.test_ledger import crd_validator
from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.devices import GpuDevice
from vgpu_guard.engine.ledger import (
    Allocation,
    ContainerGrant,
    DeviceGrant,
    MigSlot,
    NodeLedger,
    check_invariants,
    decode_ledger,
    encode_ledger,
)
from vgpu_guard.engine.ledger_summary import gpu_summaries, ledger_summary, summary_fields
from vgpu_guard.kube.resources import LEDGERS


def card(i: int, memory: int = 24576, split: int = 10) -> GpuDevice:
    return GpuDevice(f"GPU-n-{i}", i, split, memory, "NVIDIA-A30", True, "hami-core")


NODE = NodeInfo("n", gpus=(card(1), card(0), card(2, split=2)), mode="hami-core")


def entry(uid: str, *devices: DeviceGrant, name: str = "") -> Allocation:
    return Allocation(uid, "ns", name or f"p-{uid}", "q", (ContainerGrant(0, "main", devices),))


LEDGER = NodeLedger(
    "n",
    {
        "u1": entry("u1", DeviceGrant("GPU-n-0", 12288, 30), DeviceGrant("GPU-n-1", 24576, 0)),
        "u2": entry("u2", DeviceGrant("GPU-n-0", 6144, 70)),
        "u3": entry("u3", DeviceGrant("GPU-n-2", 100, 0)),
        "u4": entry("u4", DeviceGrant("GPU-n-2", 100, 0)),
        "u5": entry("u5", DeviceGrant("GPU-gone", 5000, 10, MigSlot("0", "1g.6gb", 2, 0, 1))),
    },
    resource_version="7",
)


def test_summary_per_gpu_and_node_totals() -> None:
    assert summary_fields(LEDGER, NODE, 1) == {
        "pods": 5,
        "devices": 6,
        "memoryMiB": 48208,
        "migInstances": 1,
        "gpus": 3,
        "registeredMemoryMiB": 73728,
        "freeMemoryMiB": 6144 + 0 + 24376,
        "fullGPUs": 3,
        "fullestGPU": "GPU-n-1",
        "fullestGPUMemoryPercent": 100,
        "perGPU": [
            {"uuid": "GPU-n-0", "index": 0, "memoryMiB": 18432, "registeredMemoryMiB": 24576,
             "memoryPercent": 75, "coresPercent": 100, "pods": 2, "vGPUs": 2, "migInstances": 0,
             "full": True},
            {"uuid": "GPU-n-1", "index": 1, "memoryMiB": 24576, "registeredMemoryMiB": 24576,
             "memoryPercent": 100, "coresPercent": 0, "pods": 1, "vGPUs": 1, "migInstances": 0,
             "full": True},
            {"uuid": "GPU-n-2", "index": 2, "memoryMiB": 200, "registeredMemoryMiB": 24576,
             "memoryPercent": 0, "coresPercent": 0, "pods": 2, "vGPUs": 2, "migInstances": 0,
             "full": True},
            {"uuid": "GPU-gone", "memoryMiB": 5000, "coresPercent": 10, "pods": 1, "vGPUs": 1,
             "migInstances": 1, "registered": False},
        ],
    }  # fmt: skip


def test_the_stored_summary_is_the_same_with_each_gpu_one_line() -> None:
    """The object carries each GPU as one line of text (issue 44), with the JSON's names."""
    stored, fields = ledger_summary(LEDGER, NODE, 1), summary_fields(LEDGER, NODE, 1)
    assert {k: v for k, v in stored.items() if k != "perGPU"} == {
        k: v for k, v in fields.items() if k != "perGPU"
    }
    assert stored["perGPU"] == [
        "GPU-n-0 index=0 memoryMiB=18432/24576 memoryPercent=75 coresPercent=100 pods=2 vGPUs=2 full",
        "GPU-n-1 index=1 memoryMiB=24576/24576 memoryPercent=100 coresPercent=0 pods=1 vGPUs=1 full",
        "GPU-n-2 index=2 memoryMiB=200/24576 memoryPercent=0 coresPercent=0 pods=2 vGPUs=2 full",
        "GPU-gone memoryMiB=5000 coresPercent=10 pods=1 vGPUs=1 migInstances=1 unregistered",
    ]
    assert ledger_summary(NodeLedger("n"), NODE)["perGPU"][0] == (
        "GPU-n-0 index=0 memoryMiB=0/24576 memoryPercent=0 coresPercent=0 pods=0 vGPUs=0"
    )


def test_memory_factor_scales_registered_capacity_and_idle_gpus_are_listed() -> None:
    node = NodeInfo("n", gpus=(card(0, memory=24), card(1, memory=24)), mode="hami-core")
    ledger = NodeLedger("n", {"u1": entry("u1", DeviceGrant("GPU-n-1", 6144, 25))})
    summary = summary_fields(ledger, node, 1024)
    assert {k: v for k, v in summary.items() if k != "perGPU"} == {
        "pods": 1,
        "devices": 1,
        "memoryMiB": 6144,
        "migInstances": 0,
        "gpus": 2,
        "registeredMemoryMiB": 49152,
        "freeMemoryMiB": 43008,
        "fullGPUs": 0,
        "fullestGPU": "GPU-n-1",
        "fullestGPUMemoryPercent": 25,
    }
    assert [(g["uuid"], g["memoryMiB"], g["full"]) for g in summary["perGPU"]] == [
        ("GPU-n-0", 0, False),
        ("GPU-n-1", 6144, False),
    ]


def test_ties_go_to_cores_then_the_lowest_index() -> None:
    node = NodeInfo("n", gpus=(card(0), card(1), card(2)), mode="hami-core")
    ledger = NodeLedger(
        "n",
        {
            "a": entry("a", DeviceGrant("GPU-n-0", 12288, 10)),
            "b": entry("b", DeviceGrant("GPU-n-1", 12288, 40)),
            "c": entry("c", DeviceGrant("GPU-n-2", 12288, 40)),
        },
    )
    assert ledger_summary(ledger, node)["fullestGPU"] == "GPU-n-1"


def test_without_the_node_only_what_the_entries_say() -> None:
    summary = summary_fields(LEDGER, None)
    assert set(summary) == {"pods", "devices", "memoryMiB", "migInstances", "perGPU"}
    assert [g["uuid"] for g in summary["perGPU"]] == ["GPU-gone", "GPU-n-0", "GPU-n-1", "GPU-n-2"]
    assert all(g["registered"] is False for g in summary["perGPU"])
    assert all(g.endswith(" unregistered") for g in ledger_summary(LEDGER, None)["perGPU"])
    assert ledger_summary(NodeLedger("empty"), None) == {
        "pods": 0,
        "devices": 0,
        "memoryMiB": 0,
        "migInstances": 0,
        "perGPU": [],
    }


def test_summary_is_schema_valid_and_optional() -> None:
    validator = crd_validator()
    with_summary = encode_ledger(LEDGER, ledger_summary(LEDGER, NODE, 1))
    validator.validate(with_summary)
    validator.validate(encode_ledger(LEDGER, ledger_summary(LEDGER, None)))
    assert "summary" not in encode_ledger(LEDGER)["spec"]


def _forged(obj: dict[str, Any]) -> dict[str, Any]:
    forged = {"pods": 0, "devices": 0, "memoryMiB": 0, "freeMemoryMiB": 10**9, "fullGPUs": 0,
              "perGPU": ["GPU-n-1 memoryMiB=0/1000000000", {"uuid": "GPU-n-1", "full": False}]}  # fmt: skip
    return {**obj, "spec": {**obj["spec"], "summary": forged}}


def test_a_forged_summary_changes_nothing() -> None:
    honest = encode_ledger(LEDGER, ledger_summary(LEDGER, NODE, 1))
    forged = _forged(honest)
    crd_validator().validate(forged)  # the API server would store it
    decoded = decode_ledger(forged)
    assert decoded == decode_ledger(honest) == LEDGER
    assert check_invariants(decoded, NODE) == check_invariants(LEDGER, NODE)
    assert [g.memory_mib for g in gpu_summaries(decoded, NODE)] == [18432, 24576, 200, 5000]


async def test_the_controller_writes_the_summary_and_a_forged_one_does_not_free_memory() -> None:
    cluster = seed_000()  # 8 x 24 GiB, seven held by adopted pods
    controller = cluster.replica(registry=CollectorRegistry())
    cluster.create_pod(vgpu_pod("web-0", memory=24576))
    await cluster.converge(controller)
    stored = cluster.store.get(LEDGERS, "gpu-0")
    summary = stored["spec"]["summary"]
    assert {k: v for k, v in summary.items() if k != "perGPU"} == {
        "pods": 8,
        "devices": 8,
        "memoryMiB": 8 * 24576,
        "migInstances": 0,
        "gpus": 8,
        "registeredMemoryMiB": 8 * 24576,
        "freeMemoryMiB": 0,
        "fullGPUs": 8,
        "fullestGPU": "GPU-gpu-0-0",
        "fullestGPUMemoryPercent": 100,
    }
    # An operator "frees" the node by editing the summary: the next pod still stays Pending.
    cluster.store.replace(LEDGERS, _forged(stored))
    cluster.create_pod(vgpu_pod("web-1", memory=1024))
    await cluster.converge(controller)
    assert "web-1" not in cluster.bound()
    condition = cluster.condition("web-1")
    assert condition is not None and condition["reason"] == "Unschedulable"
    assert cluster.violations() == []
