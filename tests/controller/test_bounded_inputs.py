"""One bad object never stops placement elsewhere (issue 36): bounded numbers, on the controller."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from tests.controller.allocation_testkit import Cluster, gpu_node, running, vgpu_pod
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.controller.allocation import AllocationController
from vgpu_guard.controller.inputs import CachedInputs
from vgpu_guard.engine.ledger import Allocation, ContainerGrant, DeviceGrant, NodeLedger, encode_ledger
from vgpu_guard.kube.resources import LEDGERS, Resource

Obj = dict[str, Any]


async def test_a_forged_pod_of_eleven_huge_devices_stops_no_placement_elsewhere() -> None:
    """Issue 36: its adoption summed past int64, every write of gpu-b's ledger was refused and every
    pass failed. Now its devices are unreadable (named in an Event) and a pod for gpu-a binds."""
    cluster = Cluster([gpu_node("gpu-a", 1), gpu_node("gpu-b", 1)])
    forged = "".join("GPU-gpu-b-0,NVIDIA,999999999999999999,0:" for _ in range(11))
    cluster.bound_with_assignment("forged", node="gpu-b", ids=forged, memory=1024)
    canary = vgpu_pod("canary", memory=1024)
    canary["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "gpu-a"}
    cluster.create_pod(canary)
    controller = cluster.replica()
    results = await controller.settle()
    assert not any(r.errors for r in results), [r.errors for r in results]
    assert cluster.bound()["canary"] == "gpu-a"
    [event] = cluster.events("InvalidAssignmentEntry")
    assert "claims 999999999999999999 MiB, more than any GPU has (at most 16777216)" in event["message"]


class _Counting(MemoryClusterClient):
    """The double's client, counting pod GETs and LISTs by namespace."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gets = 0
        self.lists: list[str | None] = []

    async def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Obj:
        if resource.plural == "pods":
            self.gets += 1
        return await super().get(resource, name, namespace=namespace)

    async def list(self, resource: Resource, **kwargs: Any) -> Any:
        if resource.plural == "pods" and kwargs.get("namespace"):
            self.lists.append(kwargs["namespace"])
        return await super().list(resource, **kwargs)


def _ghosts(count: int) -> dict[str, Allocation]:
    grant = ContainerGrant(0, "cuda", (DeviceGrant("GPU-gpu-b-0", 1, 0),))
    return {
        f"ghost-{i}": Allocation(f"ghost-{i}", "gone", f"p{i}", "", (grant,), committed=True)
        for i in range(count)
    }


async def test_3000_ghost_entries_are_confirmed_gone_in_bulk_not_one_get_each() -> None:
    """Issue 36: a namespace deleted while the controller was down left 3,000 entries whose pods are
    gone; confirming them one GET at a time delayed a placement on another node by ~50 s. One LIST
    of the namespace confirms them; the canary on gpu-a binds in the same settle."""
    cluster = Cluster([gpu_node("gpu-a", 1), gpu_node("gpu-b", 1)])
    cluster.store.create(LEDGERS, encode_ledger(NodeLedger("gpu-b", _ghosts(3000))))
    canary = vgpu_pod("canary", memory=1024)
    canary["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "gpu-a"}
    cluster.create_pod(canary)
    client = _Counting(cluster.store)
    inputs = CachedInputs(client)
    registry = CollectorRegistry()  # not the process-wide one: other tests build controllers too
    controller = AllocationController(
        client, cluster.config, identity="r1", clock=cluster.clock, inputs=inputs, registry=registry
    )
    async with running(inputs):
        await controller.settle()
    assert cluster.bound()["canary"] == "gpu-a"
    assert cluster.ledgers()["gpu-b"].allocations == {}
    assert client.gets == 0 and client.lists == ["gone"]
