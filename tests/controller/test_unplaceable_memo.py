"""An unplaceable pod is diagnosed again only when something that could make it fit changed."""

from __future__ import annotations

from vgpu_guard.controller.unplaceable import CapacityEpoch, UnplaceableMemo
from vgpu_guard.engine.ledger import Allocation, NodeLedger
from vgpu_guard.engine.pod_request import PodRequest


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
    memo.epoch.ledger_changed(ledger("a", "b"), ledger("a"))  # an entry was released
    assert memo.known(request(), "1", memo.signature((7,), placed_pods=3)) is None


def test_capacity_taken_keeps_the_answer() -> None:
    epoch = CapacityEpoch()
    epoch.ledger_changed(ledger("a"), ledger("a", "b"))
    epoch.placed_pods(["x"])
    epoch.placed_pods(["x", "y"])
    assert epoch.value == 0
    epoch.placed_pods(["y"])  # x ended
    assert epoch.value == 1


def test_forget_others_keeps_only_pending_pods() -> None:
    memo = UnplaceableMemo()
    sig = memo.signature((1,), placed_pods=0)
    memo.remember(request("a"), "1", sig, ("m", "capacity"))
    memo.remember(request("b"), "1", sig, ("m", "capacity"))
    memo.forget_others({"b": object()})
    assert memo.known(request("a"), "1", sig) is None
    assert memo.known(request("b"), "1", sig) == ("m", "capacity")
