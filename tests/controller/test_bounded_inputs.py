"""One bad object never stops placement elsewhere (issue 36): bounded numbers, on the controller."""

from __future__ import annotations

from tests.controller.allocation_testkit import Cluster, gpu_node, vgpu_pod


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
