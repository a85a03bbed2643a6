"""The metrics the operator's dashboard adds: MIG instances per GPU, pending pods by a fixed reason set."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from tests.controller.allocation_testkit import Cluster, gpu_node, vgpu_pod
from vgpu_guard.controller.metrics import PENDING_REASONS, AllocationMetrics, LedgerSnapshot
from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.devices import GpuDevice
from vgpu_guard.engine.ledger import Allocation, ContainerGrant, DeviceGrant, MigSlot, gpu_usage
from vgpu_guard.kube.resources import NODES, PODS


def test_mig_instances_per_gpu_including_idle_cards() -> None:
    registry = CollectorRegistry()
    metrics = AllocationMetrics(registry)
    cards = tuple(GpuDevice(f"GPU-{i}", i, 7, 40, "NVIDIA-A100-PCIE-40GB", True, "mig") for i in range(2))
    slots = [DeviceGrant("GPU-0", 10240, 0, MigSlot("0", "2g.10gb", p)) for p in (0, 1)]
    held = Allocation(
        "u", "ns", "p", "q", (ContainerGrant(0, "a", (slots[0],)), ContainerGrant(1, "b", (slots[1],)))
    )
    usage = {"n": gpu_usage([held])}
    metrics.ledgers.snapshot = LedgerSnapshot.of(
        {"n": NodeInfo("n", gpus=cards, mode="mig")}, usage, {}, 1024
    )
    assert registry.get_sample_value("vgpu_guard_gpu_mig_instances", {"node": "n", "gpu": "GPU-0"}) == 2
    assert registry.get_sample_value("vgpu_guard_gpu_mig_instances", {"node": "n", "gpu": "GPU-1"}) == 0
    metrics.ledgers.snapshot = LedgerSnapshot()
    assert registry.get_sample_value("vgpu_guard_gpu_mig_instances", {"node": "n", "gpu": "GPU-0"}) is None


def test_pending_reasons_are_counted_per_pass_from_a_fixed_set() -> None:
    registry = CollectorRegistry()
    metrics = AllocationMetrics(registry)

    def counts() -> dict[str, float | None]:
        return {
            r: registry.get_sample_value("vgpu_guard_pending_pods_by_reason", {"reason": r})
            for r in PENDING_REASONS
        }

    assert counts() == dict.fromkeys(PENDING_REASONS, 0.0)
    metrics.set_pending_reasons(["capacity", "capacity", "gang"])
    assert counts() == {**dict.fromkeys(PENDING_REASONS, 0.0), "capacity": 2.0, "gang": 1.0}
    metrics.set_pending_reasons(["queue"])
    assert counts() == {**dict.fromkeys(PENDING_REASONS, 0.0), "queue": 1.0}
    with pytest.raises(ValueError) as e:
        metrics.set_pending_reasons(["no-room"])
    assert str(e.value) == (
        "pending reason 'no-room' is not one of capacity, queue, gang, unsupported, invalid-request, "
        "ledger-unwritable"
    )


async def test_the_per_gpu_snapshot_kept_by_the_change_equals_one_built_from_scratch() -> None:
    """Issue 44: the pass rebuilds the GPU rows of the nodes that changed only; after pods come and
    go on some nodes (one of them deleted), the snapshot is what a walk of every node gives."""
    cluster = Cluster([gpu_node(f"gpu-{i}", 2) for i in range(4)])
    registry = CollectorRegistry()
    controller = cluster.replica(registry=registry)
    for i in range(6):
        cluster.create_pod(vgpu_pod(f"p{i}", memory=4096 * (1 + i % 3)))
    await cluster.converge(controller)
    cluster.store.delete(PODS, "p0", namespace="default")
    cluster.store.delete(NODES, "gpu-3")
    await cluster.converge(controller)
    view = cluster.view()
    ledgers = cluster.ledgers()
    usage = {name: gpu_usage(ledger.allocations.values()) for name, ledger in ledgers.items()}
    kept = controller.metrics.ledgers.snapshot
    scratch = LedgerSnapshot.of(view.nodes, usage, kept.violations, cluster.config.nvidia.gpu_memory_factor)
    assert list(kept.gpus) == list(scratch.gpus)
    assert kept.bad_registrations == scratch.bad_registrations
    assert {row.node for row in kept.gpus} == {"gpu-0", "gpu-1", "gpu-2"}
