"""The scheduling queue: units in order, and a unit that fits nowhere parked until something that
could make it fit changed (issue 37 item 1)."""

from __future__ import annotations

from typing import Any

from tests.controller.allocation_testkit import Cluster, gpu_node, vgpu_pod
from vgpu_guard.controller.scheduling_queue import SchedulingQueue, Unit
from vgpu_guard.controller.world import World
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.ledger import Allocation, NodeLedger, decode_ledger, encode_ledger
from vgpu_guard.engine.pod_request import PodRequest
from vgpu_guard.engine.scheduling import pod_facts
from vgpu_guard.kube.resources import PODGROUPS

NO_ROOM = ({"u1": ("no room", "capacity")}, None)


def request(uid: str = "u1", *, group: str = "", priority: int = 0, created: str = "") -> PodRequest:
    return PodRequest(
        uid=uid, namespace="default", name=uid, containers=(), group=group, priority=priority, created=created
    )


def objects(*versions: tuple[str, str]) -> dict[str, Any]:
    return {uid: {"metadata": {"uid": uid, "resourceVersion": rv}} for uid, rv in versions}


def single(uid: str = "u1") -> Unit:
    return Unit(("pod", uid), [request(uid)])


def test_without_versions_nothing_is_parked() -> None:
    queue = SchedulingQueue()
    sig = queue.signature(None, placed_pods=3)
    queue.park(single(), objects(("u1", "1")), sig, NO_ROOM)
    assert queue.parked(single(), objects(("u1", "1")), sig) is None


def test_the_same_inputs_give_the_parked_answer() -> None:
    queue = SchedulingQueue()
    queue.park(single(), objects(("u1", "1")), queue.signature((7,), placed_pods=3), NO_ROOM)
    assert queue.parked(single(), objects(("u1", "1")), queue.signature((7,), placed_pods=4)) == NO_ROOM


def test_a_changed_pod_node_or_freed_capacity_moves_it_back() -> None:
    queue = SchedulingQueue()
    sig = queue.signature((7,), placed_pods=3)
    queue.park(single(), objects(("u1", "1")), sig, NO_ROOM)
    assert queue.parked(single(), objects(("u1", "2")), sig) is None  # the pod changed
    assert (
        queue.parked(single(), objects(("u1", "1")), queue.signature((8,), placed_pods=3)) is None
    )  # a node
    queue.capacity_freed()  # an entry was released somewhere
    assert queue.parked(single(), objects(("u1", "1")), queue.signature((7,), placed_pods=3)) is None


def test_a_gang_is_parked_whole_and_moves_back_when_a_member_or_its_running_count_changes() -> None:
    queue = SchedulingQueue()
    sig = queue.signature((1,), placed_pods=0)
    gang = Unit(("gang", "default", "g"), [request("a", group="g"), request("b", group="g")], 3, 0)
    both = objects(("a", "1"), ("b", "1"))
    answer = ({"a": ("gang default/g: ...", "gang"), "b": ("gang default/g: ...", "gang")}, "why")
    queue.park(gang, both, sig, answer)
    assert queue.parked(gang, both, sig) == answer
    assert queue.parked(gang, objects(("a", "1"), ("b", "2")), sig) is None
    one_running = Unit(gang.key, gang.members, 3, 1)
    assert queue.parked(one_running, both, sig) is None
    fewer = Unit(gang.key, gang.members[:1], 3, 0)
    assert queue.parked(fewer, objects(("a", "1")), sig) is None


def test_units_come_in_scheduling_order_a_gang_as_one_and_forget_what_left() -> None:
    cluster = Cluster([gpu_node("a", 1)])
    cluster.store.create(
        PODGROUPS,
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "default"},
            "spec": {"minMember": 2},
        },
        namespace="default",
    )
    view = ClusterView.from_objects(cluster.store.list(PODGROUPS).items, cluster.config)
    low = request("low", created="2025-01-02")
    old = request("old", created="2025-01-01")
    members = [request("m1", group="g", created="2025-01-03"), request("m2", group="g", priority=5)]
    queue = SchedulingQueue()
    sig = queue.signature((1,), placed_pods=0)
    queue.park(single("gone"), objects(("gone", "1")), sig, NO_ROOM)
    units = queue.units([(p, {}) for p in (low, *members, old)], view, {("default", "g"): 1})
    assert [u.key for u in units] == [("gang", "default", "g"), ("pod", "old"), ("pod", "low")]
    assert (units[0].min_member, units[0].running, [m.uid for m in units[0].members]) == (2, 1, ["m1", "m2"])
    assert queue.parked(single("gone"), objects(("gone", "1")), sig) is None  # no longer pending


def request_ledger(*uids: str) -> NodeLedger:
    return NodeLedger(node="n", allocations={u: Allocation(u, "default", u, "q", ()) for u in uids})


def _ledger_obj(*uids: str, rv: str) -> dict[str, Any]:
    obj = encode_ledger(request_ledger(*uids))
    obj["metadata"]["resourceVersion"] = rv
    return obj


def test_the_world_reports_freed_capacity_only_when_something_went() -> None:
    """What the queue's counter follows: a ledger losing an entry, a placed pod ending."""
    cfg = Cluster().config
    world = World(cfg)
    v = ClusterView()

    def update(pods: dict[Any, Any], ledgers: dict[str, Any]) -> bool:
        return world.update(pods, ledgers, v, decode=decode_ledger, facts=pod_facts).freed

    bound = vgpu_pod("x", memory=1000)
    bound["metadata"]["uid"] = "x"
    bound["spec"]["nodeName"] = "n"
    assert not update({("default", "x"): bound}, {"n": _ledger_obj("a", rv="1")})
    assert not update({("default", "x"): bound}, {"n": _ledger_obj("a", "b", rv="2")})  # taken
    assert update({("default", "x"): bound}, {"n": _ledger_obj("a", rv="3")})  # b released
    ended = {**bound, "status": {"phase": "Succeeded"}}
    assert update({("default", "x"): ended}, {"n": _ledger_obj("a", rv="3")})  # x ended
