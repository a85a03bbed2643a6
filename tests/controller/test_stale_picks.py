"""The device plugin's stale picks, reported by the controller (controller/stale_picks.py, issue 43 item 8).

A discarded 1.10-1.15 assignment on a Pending pod is older than the unconsumed one of a pod bound to
the same node: the plugin would hand it to the bound pod's container. The pass says so on both pods
and the Node, once while it stands, and counts it in ``vgpu_guard_device_plugin_stale_picks``.
"""

from __future__ import annotations

import copy
from typing import Any

from prometheus_client import CollectorRegistry

from tests.controller.allocation_testkit import Cluster, gpu_node, vgpu_pod
from vgpu_guard.controller.allocation import AllocationController
from vgpu_guard.controller.pod_projection import project_pod
from vgpu_guard.controller.stale_picks import MALFORMED, STALE_PICK
from vgpu_guard.engine.annotations import DEVICES_TO_ALLOCATE, VGPU_TIME
from vgpu_guard.engine.assignment import assignment_annotations
from vgpu_guard.kube.resources import PODS

NODE = "n1"
IDS = f"GPU-{NODE}-0,NVIDIA,12288,0:"
THEN = 1_749_999_000  # the discarded session, before the bound pod's
GAUGE = "vgpu_guard_device_plugin_stale_picks"


def volcano_pod(name: str) -> dict[str, Any]:
    pod = vgpu_pod(name, memory=12288, number=1)
    pod["spec"]["schedulerName"] = "volcano"  # Volcano's pods: our controller places none of them
    return pod


def discarded(cluster: Cluster, name: str, *, at: int = THEN, ids: str = IDS) -> None:
    """A Pending pod carrying the assignment a discarded 1.15 session PATCHed onto it."""
    pod = volcano_pod(name)
    pod["metadata"]["annotations"] = assignment_annotations(NODE, ids, at)
    cluster.create_pod(pod)


def bound(cluster: Cluster, name: str, *, at: int) -> None:
    """A pod Volcano bound to the node, its assignment not handed out yet (the kubelet has not started it)."""
    cluster.create_pod(volcano_pod(name))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "annotations": assignment_annotations(NODE, IDS, at)},
        "target": {"kind": "Node", "name": NODE},
    }
    cluster.store.bind("default", name, binding)


def setup() -> tuple[Cluster, AllocationController, CollectorRegistry]:
    cluster = Cluster([gpu_node(NODE, 1)])
    registry = CollectorRegistry()
    return cluster, cluster.replica(registry=registry), registry


def involved(cluster: Cluster, reason: str) -> list[tuple[str, str]]:
    return sorted((e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in cluster.events(reason))


async def test_a_discarded_assignment_older_than_a_bound_pods_is_reported_on_both_pods_and_the_node() -> None:
    cluster, replica, registry = setup()
    discarded(cluster, "left")
    bound(cluster, "web", at=THEN + 60)
    await replica.run_once()
    assert involved(cluster, STALE_PICK) == [("Node", NODE), ("Pod", "left"), ("Pod", "web")]
    assert registry.get_sample_value(GAUGE) == 1
    messages = {e["involvedObject"]["name"]: e["message"] for e in cluster.events(STALE_PICK)}
    assert messages["web"].startswith(
        f"the volcano-vgpu-device-plugin of node {NODE} serves a container asking for 1 vGPU(s) with the "
        "oldest volcano.sh/vgpu-time among the pods whose volcano.sh/vgpu-node is the node and whose "
        "volcano.sh/devices-to-allocate holds that many devices: when this pod starts, its container gets "
        f"the assignment of pod default/left (volcano.sh/vgpu-time {THEN} is older than {THEN + 60}) "
        "instead of its own, though it is not bound to any node"
    )
    assert (
        "remove the assignment from pod default/left (kubectl annotate pod -n default left "
        in messages["web"]
    )
    assert "before pod default/web starts, as a cluster admin; Volcano >= 1.16" in messages["left"]
    assert all(e["type"] == "Warning" for e in cluster.events(STALE_PICK))

    # Once while it stands: more passes (and a change elsewhere on the node) send nothing again.
    cluster.create_pod(volcano_pod("other"))
    for _ in range(2):
        await replica.run_once()
    assert len(cluster.events(STALE_PICK)) == 3

    # The runbook's remedy: the Pending pod's assignment removed; the finding and the gauge go.
    removed = dict.fromkeys(assignment_annotations(NODE, IDS, THEN))
    cluster.store.patch(PODS, "left", {"metadata": {"annotations": removed}}, namespace="default")
    await replica.run_once()
    assert registry.get_sample_value(GAUGE) == 0
    assert len(cluster.events(STALE_PICK)) == 3


async def test_nothing_is_reported_when_the_pending_assignment_is_newer_or_the_bound_one_served() -> None:
    cluster, replica, registry = setup()
    discarded(cluster, "left", at=THEN + 120)
    bound(cluster, "web", at=THEN + 60)
    await replica.run_once()
    assert cluster.events(STALE_PICK) == [] and registry.get_sample_value(GAUGE) == 0

    cluster2, replica2, registry2 = setup()
    discarded(cluster2, "left")
    bound(cluster2, "web", at=THEN + 60)
    # The plugin served web (its own assignment, by luck or order): erased and confirmed.
    served = {"volcano.sh/bind-phase": "success", DEVICES_TO_ALLOCATE: ";", VGPU_TIME: str((1 << 64) - 1)}
    cluster2.store.patch(PODS, "web", {"metadata": {"annotations": served}}, namespace="default")
    await replica2.run_once()
    assert cluster2.events(STALE_PICK) == [] and registry2.get_sample_value(GAUGE) == 0


async def test_a_finding_that_goes_and_comes_back_is_reported_again_and_a_gone_pod_clears_it() -> None:
    cluster, replica, registry = setup()
    discarded(cluster, "left")
    bound(cluster, "web", at=THEN + 60)
    await replica.run_once()
    # A newer time on the Pending pod (Volcano assigned it again): no longer picked.
    cluster.store.patch(
        PODS, "left", {"metadata": {"annotations": {VGPU_TIME: str(THEN + 120)}}}, namespace="default"
    )
    await replica.run_once()
    assert registry.get_sample_value(GAUGE) == 0
    cluster.store.patch(
        PODS, "left", {"metadata": {"annotations": {VGPU_TIME: str(THEN)}}}, namespace="default"
    )
    await replica.run_once()
    assert registry.get_sample_value(GAUGE) == 1
    assert len(cluster.events(STALE_PICK)) == 6
    cluster.delete_pod("left")
    await replica.run_once()
    assert registry.get_sample_value(GAUGE) == 0
    # A standby exports nothing; the leader's next pass counts again from its own picture.
    replica.metrics.clear_leader_gauges()
    assert registry.get_sample_value(GAUGE) == 0


async def test_a_malformed_time_is_reported_on_that_pod_once() -> None:
    cluster, replica, registry = setup()
    discarded(cluster, "left")
    cluster.store.patch(PODS, "left", {"metadata": {"annotations": {VGPU_TIME: "soon"}}}, namespace="default")
    bound(cluster, "web", at=THEN + 60)
    for _ in range(2):
        await replica.run_once()
    assert involved(cluster, MALFORMED) == [("Pod", "left")]
    (event,) = cluster.events(MALFORMED)
    assert event["message"] == (
        f"volcano.sh/vgpu-time of this pod, whose volcano.sh/vgpu-node is {NODE}: 'soon' is not an unsigned "
        f"64-bit decimal number: the plugin reads it as the newest assignment of node {NODE}"
    )
    # Read as MaxUint64, the newest: the bound pod's own assignment is the oldest, nothing is stale.
    assert cluster.events(STALE_PICK) == [] and registry.get_sample_value(GAUGE) == 0


def test_the_projection_keeps_a_bound_pods_assignment_until_the_plugin_served_it() -> None:
    pod = volcano_pod("web")
    pod["spec"]["nodeName"] = NODE
    pod["metadata"]["annotations"] = assignment_annotations(NODE, IDS, THEN)
    kept = project_pod(copy.deepcopy(pod))["metadata"]["annotations"]
    assert kept[DEVICES_TO_ALLOCATE] == IDS and kept[VGPU_TIME] == str(THEN)
    for served in (
        {"volcano.sh/bind-phase": "success"},
        {"volcano.sh/bind-phase": "failed"},
        {DEVICES_TO_ALLOCATE: ";"},
    ):
        done = copy.deepcopy(pod)
        done["metadata"]["annotations"].update(served)
        notes = project_pod(done)["metadata"]["annotations"]
        assert DEVICES_TO_ALLOCATE not in notes and VGPU_TIME not in notes, served
