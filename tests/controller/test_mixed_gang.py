"""Routing mode binds a mixed gang whole: a launcher that asks no vGPU goes with its workers.

Issue 35: with routing on, a gang with a non-vGPU launcher and vGPU workers waited forever, since
Volcano never saw the routed workers and our controller never placed the launcher.
"""

from __future__ import annotations

from typing import Any

from tests.controller.allocation_testkit import Cluster, gpu_node, vgpu_pod
from tests.engine.allocation_testkit import cpu_node
from vgpu_guard.controller.allocation import AllocationController
from vgpu_guard.kube.resources import NODES, PODGROUPS

GROUP = {"scheduling.k8s.io/group-name": "mpi"}


def _podgroup(min_member: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "mpi", "namespace": "default"},
        "spec": {"minMember": min_member},
    }


def _launcher(cpu: str = "2", *, group: bool = True) -> dict[str, Any]:
    pod = vgpu_pod("launcher", annotations=GROUP if group else {})
    pod["spec"]["containers"] = [{"name": "c", "image": "mpi", "resources": {"requests": {"cpu": cpu}}}]
    return pod


async def _mpi_job(gpus: int) -> tuple[Cluster, AllocationController]:
    """A launcher without vGPU and two whole-card workers in PodGroup mpi (minMember 3), on one
    GPU node with ``gpus`` cards and a CPU node; the controller has settled."""
    cluster = Cluster([gpu_node("a", gpus), cpu_node("cpu-a")])
    cluster.store.create(PODGROUPS, _podgroup(3), namespace="default")
    controller = cluster.replica()
    cluster.create_pod(_launcher())
    for i in range(2):
        cluster.create_pod(vgpu_pod(f"w{i}", memory=24576, annotations=GROUP))
    await cluster.converge(controller)
    return cluster, controller


async def test_the_launcher_is_bound_with_its_workers_and_holds_no_ledger_entry() -> None:
    cluster, _ = await _mpi_job(2)
    assert sorted(cluster.bound()) == ["launcher", "w0", "w1"]
    ledger = cluster.ledgers()["a"]
    assert {e.name for e in ledger.allocations.values()} == {"w0", "w1"}
    launcher = cluster.pod("launcher")
    assert "volcano.sh/vgpu-ids-new" not in (launcher["metadata"].get("annotations") or {})
    [event] = [e for e in cluster.events("Scheduled") if e["involvedObject"]["name"] == "launcher"]
    node = cluster.bound()["launcher"]
    assert event["message"] == (
        f"Successfully assigned default/launcher to {node} (a member of gang default/mpi; it asks no vGPU)"
    )
    assert cluster.violations() == []
    # Placed at once, never waiting: its PodGroup still comes to say Running.
    assert cluster.store.get(PODGROUPS, "mpi", namespace="default")["status"]["phase"] == "Running"


async def test_the_launcher_waits_while_the_workers_cannot_all_fit() -> None:
    cluster, _ = await _mpi_job(1)
    assert cluster.bound() == {}
    condition = cluster.condition("launcher")
    assert condition is not None
    assert condition["message"].startswith("gang default/mpi: only 2 of 3 members can run (minMember 3)")


async def test_a_pod_without_vgpu_and_without_a_gang_is_still_refused() -> None:
    cluster = Cluster([gpu_node("a", 1), cpu_node("cpu-a")])
    controller = cluster.replica()
    cluster.create_pod(_launcher(group=False))
    await cluster.converge(controller)
    assert cluster.bound() == {}
    condition = cluster.condition("launcher")
    assert condition is not None and "places only pods that request vGPU" in condition["message"]


async def test_the_podgroup_says_why_the_gang_waits_then_running() -> None:
    cluster, controller = await _mpi_job(1)
    status = cluster.store.get(PODGROUPS, "mpi", namespace="default")["status"]
    assert status["phase"] == "Pending"
    [condition] = status["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "Unschedulable",
        "True",
        "NotEnoughResources",
    )
    assert condition["message"].startswith(
        "3/3 tasks in gang unschedulable: gang default/mpi: only 2 of 3 members can run (minMember 3)"
    )
    # A second GPU appears: the whole gang goes, and its PodGroup says so.
    cluster.store.delete(NODES, "a", grace_period_seconds=0)
    cluster.store.create(NODES, gpu_node("a", 2))
    await cluster.converge(controller)
    assert sorted(cluster.bound()) == ["launcher", "w0", "w1"]
    status = cluster.store.get(PODGROUPS, "mpi", namespace="default")["status"]
    assert status["phase"] == "Running"
    assert [(c["type"], c["reason"]) for c in status["conditions"]] == [
        ("Scheduled", "tasks in gang are ready to be scheduled")
    ]
