"""``World`` taking in pod versions: what the workloads count is the newest version of each pod."""

from __future__ import annotations

from typing import Any

from tests.controller.allocation_testkit import Cluster, vgpu_pod
from vgpu_guard.controller.world import World
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.ledger import decode_ledger
from vgpu_guard.engine.scheduling import pod_facts


def _bound(rv: str, labels: dict[str, str]) -> dict[str, Any]:
    pod = vgpu_pod("x", memory=1000)
    pod["metadata"].update(uid="x", resourceVersion=rv, labels=labels)
    pod["spec"]["nodeName"] = "n"
    return pod


def test_a_placed_pod_not_yet_counted_is_counted_as_its_newest_version() -> None:
    """A start defers every placed pod's facts until its node is read; a newer version arriving
    meanwhile (here only its labels changed, which no record field holds) must be the one counted,
    or pod affinity and spread would judge the node by labels the pod no longer has."""
    world = World(Cluster().config)

    def update(pod: dict[str, Any]) -> None:
        world.update({("default", "x"): pod}, {}, ClusterView(), decode=decode_ledger, facts=pod_facts)

    update(_bound("1", {"app": "old"}))
    update(_bound("2", {"app": "new"}))
    assert world.workloads.usage("n").pods["x"].labels == {"app": "new"}


def test_a_pod_seen_for_the_first_time_is_counted_on_its_node() -> None:
    world = World(Cluster().config)
    pods = {("default", "x"): _bound("1", {"app": "a"})}
    world.update(pods, {}, ClusterView(), decode=decode_ledger, facts=pod_facts)
    assert set(world.workloads.usage("n").pods) == {"x"} and world.bound_on == {"n": {"x"}}
