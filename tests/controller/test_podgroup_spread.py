"""Volcano's PodGroup spread policy through the allocation controller, on the API double.

Members annotated ``volcano.sh/vgpu-podgroup-policy: spread`` are bound to different GPUs; without
the annotation binpack puts them on one; a member with no GPU left to itself stays Pending with the
reason (PodScheduled=False, Unschedulable) naming the policy and the GPUs.
"""

from __future__ import annotations

from typing import Any

from tests.controller.allocation_testkit import Cluster, gpu_node, vgpu_pod
from vgpu_guard.kube.resources import PODGROUPS

SPREAD = {"volcano.sh/vgpu-podgroup-policy": "spread"}


def cluster_with_group(gpus: int, min_member: int) -> Cluster:
    cluster = Cluster([gpu_node("a", gpus)])
    cluster.store.create(
        PODGROUPS,
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "job", "namespace": "default"},
            "spec": {"minMember": min_member},
        },
        namespace="default",
    )
    return cluster


def member(name: str, policy: dict[str, str]) -> dict[str, Any]:
    return vgpu_pod(name, memory=4096, annotations={"scheduling.k8s.io/group-name": "job", **policy})


def assignments(cluster: Cluster) -> dict[str, str]:
    return {
        p["metadata"]["name"]: p["metadata"]["annotations"]["volcano.sh/vgpu-ids-new"]
        for p in cluster.pods()
        if p["spec"].get("nodeName")
    }


async def test_members_with_the_policy_are_bound_to_different_gpus() -> None:
    cluster = cluster_with_group(gpus=2, min_member=2)
    controller = cluster.replica()
    for i in range(2):
        cluster.create_pod(member(f"w{i}", SPREAD))
    await cluster.converge(controller)
    assert assignments(cluster) == {
        "w0": "GPU-a-0,NVIDIA,4096,0:",
        "w1": "GPU-a-1,NVIDIA,4096,0:",
    }
    assert cluster.violations() == []


async def test_members_without_the_policy_share_a_gpu() -> None:
    cluster = cluster_with_group(gpus=2, min_member=2)
    controller = cluster.replica()
    for i in range(2):
        cluster.create_pod(member(f"w{i}", {}))
    await cluster.converge(controller)
    assert assignments(cluster) == {
        "w0": "GPU-a-0,NVIDIA,4096,0:",
        "w1": "GPU-a-0,NVIDIA,4096,0:",
    }


async def test_a_member_without_a_gpu_of_its_own_stays_pending_with_the_reason() -> None:
    cluster = cluster_with_group(gpus=1, min_member=1)
    controller = cluster.replica()
    for i in range(2):
        cluster.create_pod(member(f"w{i}", SPREAD))
    await cluster.converge(controller)
    assert assignments(cluster) == {"w0": "GPU-a-0,NVIDIA,4096,0:"}
    condition = cluster.condition("w1")
    assert condition is not None
    message = (
        "0/1 nodes are available: 1 GPU holds another member of PodGroup default/job "
        "(volcano.sh/vgpu-podgroup-policy=spread): GPU-a-0"
    )
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False",
        "Unschedulable",
        message,
    )
    assert [e["message"] for e in cluster.events("FailedScheduling")] == [message]
    # The member finishes: its GPU is free for the next one.
    cluster.finish_pod("w0")
    await cluster.converge(controller)
    assert "w1" in cluster.bound()
