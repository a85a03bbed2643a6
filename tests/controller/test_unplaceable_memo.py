"""An unplaceable pod is diagnosed again only when something that could make it fit changed."""

from __future__ import annotations

from typing import Any

from tests.controller.allocation_testkit import Cluster, vgpu_pod
from vgpu_guard.controller.unplaceable import UnplaceableMemo
from vgpu_guard.controller.world import World
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.ledger import Allocation, NodeLedger, decode_ledger, encode_ledger
from vgpu_guard.engine.pod_request import PodRequest
from vgpu_guard.engine.scheduling import pod_facts


def request(uid: str = "u1") -> PodRequest:
    return PodRequest(uid=uid, namespace="default", name=uid, containers=())


def ledger(*uids: str) -> NodeLedger:
    return NodeLedger(node="n", allocations={u: Allocation(u, "default", u, "q", ()) for u in uids})


def test_without_versions_nothing_is_remembered() -> None:
    memo = UnplaceableMemo()
    sig = memo.signature(None, placed_pods=3)
    memo.remember(request(), "1", sig, ("no room", "capacity"))
    assert memo.known(request(), "1", sig) is None


def test_the_same_inputs_give_the_remembered_reason() -> None:
    memo = UnplaceableMemo()
    sig = memo.signature((7,), placed_pods=3)
    memo.remember(request(), "1", sig, ("no room", "capacity"))
    assert memo.known(request(), "1", memo.signature((7,), placed_pods=4)) == ("no room", "capacity")


def test_a_changed_pod_node_or_freed_capacity_forgets_it() -> None:
    memo = UnplaceableMemo()
    sig = memo.signature((7,), placed_pods=3)
    memo.remember(request(), "1", sig, ("no room", "capacity"))
    assert memo.known(request(), "2", sig) is None  # the pod changed
    assert memo.known(request(), "1", memo.signature((8,), placed_pods=3)) is None  # a node changed
    memo.capacity_freed()  # an entry was released somewhere
    assert memo.known(request(), "1", memo.signature((7,), placed_pods=3)) is None


def _ledger_obj(*uids: str, rv: str) -> dict[str, Any]:
    return encode_ledger_with_rv(ledger(*uids), rv)


def test_the_world_reports_freed_capacity_only_when_something_went() -> None:
    """What the memo's counter follows: a ledger losing an entry, a placed pod ending."""
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


def test_forget_others_keeps_only_pending_pods() -> None:
    memo = UnplaceableMemo()
    sig = memo.signature((1,), placed_pods=0)
    memo.remember(request("a"), "1", sig, ("m", "capacity"))
    memo.remember(request("b"), "1", sig, ("m", "capacity"))
    memo.forget_others({"b": object()})
    assert memo.known(request("a"), "1", sig) is None
    assert memo.known(request("b"), "1", sig) == ("m", "capacity")


def encode_ledger_with_rv(value: NodeLedger, rv: str) -> dict[str, Any]:
    obj = encode_ledger(value)
    obj["metadata"]["resourceVersion"] = rv
    return obj
