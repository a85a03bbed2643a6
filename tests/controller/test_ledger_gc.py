"""The GPULedger of a gone node is deleted once it holds nothing, and never before, never over a
write made since, never for a node the cache has not seen yet (controller/ledger_gc.py)."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from tests.apidouble_support.faults import FaultPlan, unavailable_error
from tests.controller.allocation_testkit import Cluster, gpu_node, vgpu_pod
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.controller.allocation import AllocationController
from vgpu_guard.controller.ledger_gc import LedgerCollector
from vgpu_guard.engine.ledger import NodeLedger, decode_ledger
from vgpu_guard.engine.objects import Obj
from vgpu_guard.kube.resources import LEDGERS, NODES


async def _one_pod_on(node: str) -> tuple[Cluster, AllocationController, CollectorRegistry]:
    """A ledger on ``node`` (one pod's entry) beside another node's; the controller settled."""
    cluster = Cluster([gpu_node(node, 1), gpu_node("other", 1)])
    registry = CollectorRegistry()
    controller = cluster.replica(registry=registry)
    cluster.create_pod(
        vgpu_pod("one", memory=1000, annotations={"volcano.sh/vgpu-use-gpuuuid": f"GPU-{node}-0"})
    )
    await cluster.converge(controller)
    assert cluster.bound() == {"one": node}
    return cluster, controller, registry


async def test_a_gone_nodes_ledger_stays_while_it_holds_an_entry_and_goes_once_empty(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster, controller, registry = await _one_pod_on("a")
    cluster.store.delete(NODES, "a")
    await cluster.converge(controller)
    assert "a" in cluster.ledgers()  # the bound pod's entry still counts

    cluster.delete_pod("one")
    with caplog.at_level(logging.INFO, logger="vgpu_guard.audit"):
        await cluster.converge(controller)
    assert "a" not in cluster.ledgers()
    audits = [r.__dict__["audit"] for r in caplog.records if hasattr(r, "audit")]
    assert [a for a in audits if a["event"] == "ledger-deleted"] == [
        {"event": "ledger-deleted", "node": "a", "reason": "node gone, no entry left"}
    ]
    assert registry.get_sample_value("vgpu_guard_ledgers_deleted_total") == 1
    assert all(not ledger.allocations for ledger in cluster.ledgers().values())


async def test_a_present_nodes_empty_ledger_stays() -> None:
    cluster, controller, registry = await _one_pod_on("a")
    cluster.delete_pod("one")
    await cluster.converge(controller)
    assert cluster.ledgers()["a"].allocations == {}
    assert not registry.get_sample_value("vgpu_guard_ledgers_deleted_total")


def _cached(cluster: Cluster, name: str) -> tuple[dict[str, NodeLedger], dict[str, Obj]]:
    raw = cluster.store.get(LEDGERS, name)
    return {name: decode_ledger(raw)}, {name: raw}


async def _emptied(node: str) -> Cluster:
    cluster, controller, _ = await _one_pod_on(node)
    cluster.delete_pod("one")
    await cluster.converge(controller)
    return cluster


async def test_a_node_the_cache_has_not_seen_keeps_its_ledger() -> None:
    """Missing from the node cache but there on the server (a node created moments ago)."""
    cluster = await _emptied("a")
    collector = LedgerCollector(MemoryClusterClient(cluster.store))
    collector.consider(["a"])
    ledgers, raw = _cached(cluster, "a")
    assert await collector.collect(ledgers, raw, nodes={}) == []
    assert "a" in cluster.ledgers()


async def test_a_write_since_the_read_wins() -> None:
    """The DELETE carries the read's resourceVersion: a reservation written since keeps the ledger."""
    cluster = await _emptied("a")
    cluster.store.delete(NODES, "a")
    ledgers, raw = _cached(cluster, "a")
    cluster.store.patch(LEDGERS, "a", {"metadata": {"labels": {"touched": "yes"}}})  # a write since
    collector = LedgerCollector(MemoryClusterClient(cluster.store))
    collector.consider(["a"])
    assert await collector.collect(ledgers, raw, nodes={}) == []
    assert "a" in cluster.ledgers()
    collector.consider(["a"])  # its next change: the fresh read goes
    ledgers, raw = _cached(cluster, "a")
    assert await collector.collect(ledgers, raw, nodes={}) == ["a"]
    assert "a" not in cluster.ledgers()


async def test_a_ledger_with_an_entry_or_unreadable_is_kept() -> None:
    cluster, _, _ = await _one_pod_on("a")
    cluster.store.delete(NODES, "a")
    ledgers, raw = _cached(cluster, "a")
    collector = LedgerCollector(MemoryClusterClient(cluster.store))
    collector.consider(["a"])
    assert await collector.collect(ledgers, raw, nodes={}) == []
    collector.consider(["a"])
    assert await collector.collect({}, raw, nodes={}) == []  # unreadable: not in the decoded ledgers
    assert "a" in cluster.ledgers()


async def test_an_api_failure_is_retried_next_pass_and_said_once(caplog: pytest.LogCaptureFixture) -> None:
    cluster = await _emptied("a")
    cluster.store.delete(NODES, "a")
    failing = FaultPlan()
    failing.add(verb="delete", resource=LEDGERS, error=unavailable_error(), times=2)
    collector = LedgerCollector(MemoryClusterClient(cluster.store, faults=failing))
    collector.consider(["a"])
    ledgers, raw = _cached(cluster, "a")
    with caplog.at_level(logging.WARNING, logger="vgpu_guard.controller.ledgers"):
        assert await collector.collect(ledgers, raw, nodes={}) == []
        assert await collector.collect(ledgers, raw, nodes={}) == []
        assert await collector.collect(ledgers, raw, nodes={}) == ["a"]
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and warned[0].startswith("cannot delete the GPULedger of gone node a: ")
    assert warned[0].endswith("(retried every pass; said once)")


async def test_the_run_loops_writer_forgets_a_deleted_ledger() -> None:
    """As serve wires it: the controller's writer hears the ledger informer's DELETE, so a node's
    deleted ledger leaves no copy in it (a fleet whose node names churn would grow it for good)."""
    from tests.controller.allocation_testkit import running, until
    from vgpu_guard.controller.inputs import CachedInputs
    from vgpu_guard.controller.metrics import AllocationMetrics
    from vgpu_guard.controller.run import _informed_controller

    cluster, _, _ = await _one_pod_on("a")
    client = MemoryClusterClient(cluster.store)
    inputs = CachedInputs(client)
    controller = _informed_controller(
        client, cluster.config, inputs, AllocationMetrics(CollectorRegistry()),
        identity="r2", clock=cluster.clock, retry_seconds=2, write_concurrency=4,
    )  # fmt: skip
    async with running(inputs):
        cluster.delete_pod("one")
        await until(lambda: not any(p["metadata"]["name"] == "one" for p in inputs.pods.items.values()))
        await controller.settle()  # releases the entry: the writer keeps its own write of "a"
        assert "a" in controller.writer._latest
        cluster.store.delete(LEDGERS, "a")
        await until(lambda: "a" not in controller.writer._latest)
