"""Releases of entries the arbiter reserved at admission (issue 35): held while the write may still
land, released once the pod is still unbound after ``arbiter.unboundReleaseSeconds``, kept once bound."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.builders import config_with
from tests.controller.allocation_testkit import Cluster, gpu_node, vgpu_pod
from vgpu_guard.controller.ledger_reconciler import HOLD_NOTICE_SECONDS
from vgpu_guard.engine.arbiter import RELEASE_HOLDS
from vgpu_guard.engine.ledger import Allocation, ContainerGrant, DeviceGrant, NodeLedger, encode_ledger
from vgpu_guard.kube.resources import LEDGERS

HOLD = 90  # the default of arbiter.unboundReleaseSeconds


def admitted_entry(cluster: Cluster, name: str, *, uid: str, at: float) -> None:
    grant = ContainerGrant(0, "cuda", (DeviceGrant("GPU-gpu-0-0", 12288, 0),))
    entry = Allocation(uid, "default", name, "default", (grant,), reserved_at=int(at), admitted=True)
    cluster.store.create(LEDGERS, encode_ledger(NodeLedger("gpu-0", {uid: entry})))


def volcano_pod(cluster: Cluster, name: str) -> str:
    pod = vgpu_pod(name, memory=12288)
    pod["spec"]["schedulerName"] = "volcano"
    return str(cluster.create_pod(pod)["metadata"]["uid"])


async def test_an_unbound_pods_admitted_entry_is_held_then_released_after_the_hold() -> None:
    """Released RELEASE_HOLDS holds after it began: from one hold on it counts for nothing in the
    arbiter's decisions and only keeps its own pod's Bindings refused, so waiters go first."""
    cluster = Cluster([gpu_node("gpu-0", 2)])
    uid = volcano_pod(cluster, "web")
    admitted_entry(cluster, "web", uid=uid, at=cluster.clock())
    controller = cluster.replica()
    await controller.settle()
    cluster.clock.advance(RELEASE_HOLDS * HOLD - 1)
    await controller.settle()
    assert uid in cluster.ledgers()["gpu-0"].allocations, "released while the admitted write could still land"
    cluster.clock.advance(1)
    results = await controller.settle()
    assert cluster.ledgers()["gpu-0"].allocations == {}
    assert any("default/web" in r.released for r in results)


async def test_a_bound_pods_admitted_entry_is_kept() -> None:
    cluster = Cluster([gpu_node("gpu-0", 2)])
    pod = cluster.bound_with_assignment("web", node="gpu-0", ids="GPU-gpu-0-0,NVIDIA,12288,0:", memory=12288)
    uid = str(cluster.pod("web")["metadata"]["uid"])
    assert pod["metadata"]["name"] == "web"
    admitted_entry(cluster, "web", uid=uid, at=cluster.clock())
    controller = cluster.replica()
    cluster.clock.advance(HOLD * 3)
    await controller.settle()
    assert uid in cluster.ledgers()["gpu-0"].allocations


async def test_a_reservation_dated_far_in_the_future_cannot_hold_a_card_for_ever() -> None:
    cluster = Cluster([gpu_node("gpu-0", 2)])
    uid = volcano_pod(cluster, "web")
    admitted_entry(cluster, "web", uid=uid, at=cluster.clock() + 10 * 365 * 86400)
    await cluster.replica().settle()
    assert cluster.ledgers()["gpu-0"].allocations == {}


async def test_the_hold_is_arbiter_unbound_release_seconds() -> None:
    cluster = Cluster([gpu_node("gpu-0", 2)], cfg=config_with(arbiter={"unboundReleaseSeconds": 300}))
    uid = volcano_pod(cluster, "web")
    admitted_entry(cluster, "web", uid=uid, at=cluster.clock())
    controller = cluster.replica()
    cluster.clock.advance(RELEASE_HOLDS * HOLD)
    await controller.settle()
    assert uid in cluster.ledgers()["gpu-0"].allocations
    cluster.clock.advance(RELEASE_HOLDS * (300 - HOLD))
    await controller.settle()
    assert cluster.ledgers()["gpu-0"].allocations == {}


async def test_a_hold_whose_binding_did_not_land_is_announced_once_on_the_pod_and_the_ledger() -> None:
    """Issue 43: a card held for a Binding another webhook refused is visible, naming the holder and
    when the hold ends, once per hold."""
    cluster = Cluster([gpu_node("gpu-0", 2)])
    uid = volcano_pod(cluster, "web")
    at = int(cluster.clock())
    admitted_entry(cluster, "web", uid=uid, at=at)
    controller = cluster.replica()
    await controller.settle()
    assert not cluster.events("GPUHeldForUnlandedBinding"), "announced while the Binding may still land"
    cluster.clock.advance(HOLD_NOTICE_SECONDS)
    await controller.settle()
    cluster.clock.advance(5)
    await controller.settle()
    events = cluster.events("GPUHeldForUnlandedBinding")
    assert sorted(e["involvedObject"]["kind"] for e in events) == ["GPULedger", "Pod"]
    on_pod = next(e for e in events if e["involvedObject"]["kind"] == "Pod")
    ends = datetime.fromtimestamp(at + HOLD, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert on_pod["type"] == "Warning"
    assert "GPUs GPU-gpu-0-0 on node gpu-0 are held for this pod since" in on_pod["message"]
    assert f"the hold ends by {ends} (arbiter.unboundReleaseSeconds)" in on_pod["message"]
    on_ledger = next(e for e in events if e["involvedObject"]["kind"] == "GPULedger")
    assert on_ledger["message"].startswith("entry of pod default/web holds GPU-gpu-0-0 since ")
