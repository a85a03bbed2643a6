"""A gang with members that ask no vGPU (routing mode routes a gang whole, docs/install.md "Modes").

Such members are placed by kube-scheduler's node constraints alone (no GPU is judged, a node
without GPUs is fine), never enter a ledger, and count for the gang's later members' cpu.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tests.engine.allocation_testkit import config, cpu_node, gpu_node, vgpu_pod, view
from vgpu_guard.engine.allocator import Allocator, Placement, Unplaceable
from vgpu_guard.engine.pod_request import PodRequest, pod_request
from vgpu_guard.engine.scheduling import Workloads, pod_facts

GROUP = {"scheduling.k8s.io/group-name": "mpi"}


def _launcher(name: str, cpu: str) -> dict[str, Any]:
    pod = vgpu_pod(name, annotations=GROUP)
    pod["spec"]["containers"] = [{"name": "c", "image": "mpi", "resources": {"requests": {"cpu": cpu}}}]
    return pod


def _request(pod: dict[str, Any]) -> PodRequest:
    request = pod_request(pod, config().nvidia, with_no_gpu=True)
    assert request is not None
    return replace(request, facts=pod_facts(pod))


def _allocator(*nodes: dict[str, Any]) -> Allocator:
    return Allocator(view(list(nodes)), {}, config=config(), workloads=Workloads())


def test_a_member_without_vgpu_goes_where_cpu_is_left_and_holds_no_ledger_entry() -> None:
    allocator = _allocator(gpu_node("gpu-a", 1), cpu_node("cpu-a"))
    launcher = _request(_launcher("launcher", "40"))  # gpu-a has 64 cpu, cpu-a 32: only gpu-a fits
    worker = _request(vgpu_pod("worker", memory=8192, annotations=GROUP))
    outcome = allocator.place_gang([launcher, worker], min_member=2)
    assert outcome.ok, outcome.failures
    where = {p.pod.name: p.node for p in outcome.placements}
    assert where == {"launcher": "gpu-a", "worker": "gpu-a"}
    assert allocator.plain_node(launcher.uid) == "gpu-a"
    assert allocator.allocation_of(launcher.uid) is None
    assert set(allocator.ledger("gpu-a").allocations) == {worker.uid}


def test_members_without_vgpu_see_each_other_cpu() -> None:
    allocator = _allocator(cpu_node("cpu-a"), cpu_node("cpu-b"), gpu_node("gpu-a", 1))
    first, second = _request(_launcher("l-0", "30")), _request(_launcher("l-1", "30"))
    outcome = allocator.place_gang([first, second], min_member=2)
    assert outcome.ok
    nodes = sorted(p.node for p in outcome.placements)
    assert len(set(nodes)) == 2  # 30 + 30 cpu never share a 32-cpu node


def test_a_gang_whose_member_without_vgpu_fits_nowhere_places_none_and_says_why() -> None:
    allocator = _allocator(gpu_node("gpu-a", 1), cpu_node("cpu-a"))
    launcher = _request(_launcher("launcher", "100"))
    worker = _request(vgpu_pod("worker", memory=8192, annotations=GROUP))
    outcome = allocator.place_gang([launcher, worker], min_member=2)
    assert not outcome.ok
    assert allocator.ledger("gpu-a").allocations == {}
    assert allocator.plain_node(launcher.uid) is None
    message = outcome.failures[0].message
    assert message.startswith(
        "gang default/mpi: only 1 of 2 members can run (minMember 2); launcher: 0/2 nodes"
    )
    assert "Insufficient cpu" in message


def test_a_released_member_without_vgpu_frees_its_cpu_for_the_next_decision() -> None:
    allocator = _allocator(cpu_node("cpu-a"))
    big = _request(_launcher("big", "30"))
    placed = allocator.place(big)
    assert isinstance(placed, Placement)
    allocator.commit(placed)
    assert isinstance(allocator.place(_request(_launcher("next", "30"))), Unplaceable)
    allocator.release(big.uid)
    assert isinstance(allocator.place(_request(_launcher("next", "30"))), Placement)
