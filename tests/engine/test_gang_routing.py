"""Routing mode sends a gang whole: a member that asks no vGPU follows a gang that asks vGPU.

The gang is known by its PodGroup's minResources (the other members may not exist yet when the
launcher is admitted); both of Volcano's spellings count: plain names and ``requests.<name>``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import config_with, gpu_node, mutate, pod, view_of
from vgpu_guard.engine.cluster import ClusterView

ROUTING = config_with(scheduling={"routing": True, "schedulerName": "vgpu-guard"})
GROUP = {"scheduling.k8s.io/group-name": "mpi"}


def _podgroup(min_resources: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "mpi", "namespace": "default"},
        "spec": {"minMember": 3, "minResources": min_resources},
    }


def _view(min_resources: dict[str, str]) -> ClusterView:
    return view_of([gpu_node("a"), _podgroup(min_resources)], ROUTING)


def _launcher(**spec: Any) -> dict[str, Any]:
    return pod(limits={"cpu": "1"}, annotations=GROUP, name="launcher", **spec)


@pytest.mark.parametrize("name", ["volcano.sh/vgpu-number", "requests.volcano.sh/vgpu-memory"])
def test_a_launcher_of_a_vgpu_gang_is_routed_with_a_warning_that_says_why(name: str) -> None:
    result = mutate(_launcher(schedulerName="volcano"), _view({"cpu": "3", name: "2"}), ROUTING)
    assert result.object["spec"]["schedulerName"] == "vgpu-guard"
    assert result.warnings == (
        "vgpu-guard: set spec.schedulerName=vgpu-guard (was volcano; routing sends vGPU gang default/mpi whole)",
    )


def test_a_gang_that_asks_no_vgpu_and_routing_off_are_left_alone() -> None:
    cpu_gang = mutate(_launcher(schedulerName="volcano"), _view({"cpu": "3"}), ROUTING)
    assert cpu_gang.object["spec"]["schedulerName"] == "volcano" and cpu_gang.patch == ()
    off = config_with(scheduling={"routing": False})
    routing_off = mutate(_launcher(), view_of([_podgroup({"volcano.sh/vgpu-number": "2"})], off), off)
    assert "schedulerName" not in routing_off.object["spec"] and routing_off.patch == ()


def test_a_pod_without_a_gang_or_with_an_unknown_one_is_left_alone() -> None:
    lone = pod(limits={"cpu": "1"}, name="lone")
    assert mutate(lone, _view({"volcano.sh/vgpu-number": "2"}), ROUTING).patch == ()
    stranger = pod(limits={"cpu": "1"}, annotations={"scheduling.k8s.io/group-name": "other"})
    assert mutate(stranger, _view({"volcano.sh/vgpu-number": "2"}), ROUTING).patch == ()
