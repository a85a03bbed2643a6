"""One node's GPULedger that cannot be written never stops placement on the others (issue 36).

The API double refuses every write of one node's ledger (a 422, as kube-apiserver answers a value
its schema refuses; a 403, as a webhook's denial): the other node's pods are still decided, written
and bound in the same pass; the refused node is named in Events on the Node and its GPULedger and
in ``vgpu_guard_ledger_write_failures_total``; the pod decided for it gets ``PodScheduled=False``
with the reason and goes elsewhere when it fits; the node is retried once its backoff has passed.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tests.apidouble_support.faults import conflict_error
from tests.controller.allocation_testkit import Cluster, gpu_node, running, until, vgpu_pod
from tests.controller.listed_inputs import ListedInputs
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.apidouble.store import Store
from vgpu_guard.controller.allocation import AllocationController
from vgpu_guard.controller.inputs import CachedInputs
from vgpu_guard.controller.node_queue import NodeQueue
from vgpu_guard.kube.client import WatchEvent
from vgpu_guard.kube.errors import Forbidden, Invalid, KubeError, NotFound
from vgpu_guard.kube.resources import LEDGERS, NODES, Resource

Obj = dict[str, Any]
HOST = "kubernetes.io/hostname"
SCHEMA = Invalid(
    'GPULedger.vgpu-guard.io "gpu-b" is invalid: spec.summary.memoryMiB: Invalid value: "number": '
    "spec.summary.memoryMiB in body must be of type integer",
    code=422,
    reason="Invalid",
)


class RefusesOneLedger(MemoryClusterClient):
    """The double, except that writes of the GPULedgers in ``refused`` fail with ``error``."""

    def __init__(self, store: Store, refused: set[str], error: KubeError) -> None:
        super().__init__(store)
        self.refused = refused
        self.error = error
        self.refusals = 0

    def _check(self, resource: Resource, obj: Mapping[str, Any]) -> None:
        if resource is LEDGERS and (obj.get("metadata") or {}).get("name") in self.refused:
            self.refusals += 1
            raise self.error

    async def create(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        *,
        namespace: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        self._check(resource, obj)
        return await super().create(resource, obj, namespace=namespace, dry_run=dry_run)

    async def replace(self, resource: Resource, obj: Mapping[str, Any]) -> Obj:
        self._check(resource, obj)
        return await super().replace(resource, obj)


def two_nodes() -> Cluster:
    return Cluster([gpu_node("gpu-a", 1), gpu_node("gpu-b", 1)])


def replica(
    cluster: Cluster, error: KubeError = SCHEMA, refused: str = "gpu-b"
) -> tuple[AllocationController, RefusesOneLedger, CollectorRegistry]:
    client = RefusesOneLedger(cluster.store, {refused}, error)
    registry = CollectorRegistry()
    controller = AllocationController(
        client,
        cluster.config,
        identity="r1",
        clock=cluster.clock,
        registry=registry,
        inputs=ListedInputs(client),
        node_retry_seconds=2.0,
        node_retry_cap_seconds=16.0,
    )
    return controller, client, registry


def pinned(name: str, node: str, memory: int = 4096) -> Obj:
    return vgpu_pod(name, memory=memory, node_selector={HOST: node})


def failures(registry: CollectorRegistry, node: str, reason: str) -> float | None:
    return registry.get_sample_value(
        "vgpu_guard_ledger_write_failures_total", {"node": node, "reason": reason}
    )


async def test_a_ledger_the_server_refuses_stops_only_its_own_node() -> None:
    cluster = two_nodes()
    controller, client, registry = replica(cluster)
    cluster.create_pod(pinned("on-a", "gpu-a"))
    cluster.create_pod(pinned("on-b", "gpu-b"))

    result = await controller.run_once()

    assert client.refusals == 1
    # The pass did not fail: gpu-a's pod was written and bound in it.
    assert result.errors == []
    assert result.bound == ["default/on-a"]
    assert result.reserved == ["default/on-a"]
    assert cluster.bound() == {"on-a": "gpu-a"}
    assert set(cluster.ledgers()) == {"gpu-a"}
    condition = cluster.condition("on-b")
    assert condition is not None
    assert condition["status"] == "False"
    assert condition["message"] == (
        f"node gpu-b was chosen for this pod but its GPULedger cannot be written (invalid: {SCHEMA}); "
        "the pod is placed again, on another node if one fits; see the Events of node gpu-b"
    )
    assert (
        registry.get_sample_value("vgpu_guard_pending_pods_by_reason", {"reason": "ledger-unwritable"}) == 1
    )
    assert failures(registry, "gpu-b", "invalid") == 1
    assert failures(registry, "gpu-a", "invalid") is None
    events = cluster.events("LedgerWriteFailed")
    assert sorted(e["involvedObject"]["kind"] for e in events) == ["GPULedger", "Node"]
    node_event = next(e for e in events if e["involvedObject"]["kind"] == "Node")
    assert node_event["involvedObject"]["name"] == "gpu-b"
    assert node_event["involvedObject"]["uid"]  # kubectl describe node finds it by uid
    assert node_event["type"] == "Warning"
    assert node_event["message"].startswith(f"the GPULedger of node gpu-b cannot be written: {SCHEMA}; ")
    assert "volcano.sh/node-vgpu-register" in node_event["message"]  # the remedy for a schema refusal


async def test_the_held_node_takes_no_new_pod_until_its_retry_then_binds() -> None:
    cluster = two_nodes()
    controller, client, registry = replica(cluster)
    cluster.create_pod(pinned("on-b", "gpu-b"))
    await controller.run_once()
    assert client.refusals == 1

    # Within the backoff nothing is sent for gpu-b: a pod that fits either node goes to gpu-a, and
    # the pod pinned to gpu-b reads why it waits.
    cluster.create_pod(vgpu_pod("either", memory=4096))
    cluster.clock.advance(1)
    assert not controller.retry_due()
    await controller.settle()
    assert client.refusals == 1
    assert cluster.bound() == {"either": "gpu-a"}
    condition = cluster.condition("on-b")
    assert condition is not None
    assert condition["message"] == (
        "0/2 nodes are available: 1 node doesn't match the pod's node selector/affinity, "
        "1 node has a GPULedger that cannot be written"
    )

    # The retry comes due: it fails again, and the wait doubles (2 s, then 4 s).
    cluster.clock.advance(1)
    assert controller.retry_due()
    await controller.settle()
    assert client.refusals == 2
    assert failures(registry, "gpu-b", "invalid") == 2
    # The same error is reported once: one Event per object, not one per retry.
    assert len(cluster.events("LedgerWriteFailed")) == 2
    cluster.clock.advance(3)
    assert not controller.retry_due()
    cluster.clock.advance(1)
    assert controller.retry_due()

    # The ledger can be written again: the pod binds where it was pinned.
    client.refused.clear()
    await cluster.converge(controller)
    assert cluster.bound() == {"either": "gpu-a", "on-b": "gpu-b"}
    assert not controller.retry_due()


async def test_a_release_the_server_refuses_does_not_stop_decisions_elsewhere() -> None:
    """Step 1 (release) writes fail for gpu-b: the pass goes on to decide and bind on gpu-a, and the
    release on gpu-b is written once the node can be written again."""
    cluster = two_nodes()
    controller, client, _ = replica(cluster)
    client.refused.clear()
    cluster.create_pod(pinned("old", "gpu-b", memory=24576))
    await cluster.converge(controller)
    assert cluster.bound() == {"old": "gpu-b"}

    client.refused.add("gpu-b")
    client.error = Forbidden(
        'admission webhook "ledgers.example.com" denied the request: frozen', code=403, reason="Forbidden"
    )
    cluster.delete_pod("old")
    cluster.create_pod(pinned("new", "gpu-a"))
    result = await controller.run_once()
    assert result.errors == []
    assert result.released == []  # not written: not released
    assert result.bound == ["default/new"]
    assert "old" in {e.name for e in cluster.ledgers()["gpu-b"].allocations.values()}

    client.refused.clear()
    cluster.clock.advance(2)
    await cluster.converge(controller)
    assert cluster.ledgers()["gpu-b"].allocations == {}


async def test_a_race_lost_on_one_node_costs_that_node_alone_and_no_full_resync() -> None:
    """Issue 44: with the arbiter writing the same ledgers, 409s are routine. gpu-b's write loses a
    race: its pod is undone there and placed again next pass; gpu-a's pod is written and bound in
    the same pass, and the controller's picture of the fleet is not rebuilt."""
    cluster = two_nodes()
    controller, client, registry = replica(cluster, error=conflict_error("gpu-b"))
    await controller.run_once()  # the allocator is built
    cluster.create_pod(pinned("on-a", "gpu-a"))
    cluster.create_pod(pinned("on-b", "gpu-b"))
    result = await controller.run_once()
    assert result.conflicts == 1
    assert result.bound == ["default/on-a"]
    assert cluster.bound() == {"on-a": "gpu-a"}
    assert controller.world.full_resyncs == 0
    assert registry.get_sample_value("vgpu_guard_ledger_conflicts_total") == 1
    assert registry.get_sample_value("vgpu_guard_allocator_rebuilds_total", {"reason": "conflict"}) is None
    assert not controller.node_queue.blocked("gpu-b", cluster.clock())  # a race is not a failure
    client.refused.clear()
    await cluster.converge(controller)
    assert cluster.bound() == {"on-a": "gpu-a", "on-b": "gpu-b"}
    assert controller.world.full_resyncs == 0


class LaggingLedgerWatch(MemoryClusterClient):
    """The double, except that the GPULedger watch never delivers: the informer knows its LIST only."""

    def watch(self, resource: Resource, **kwargs: Any) -> AsyncIterator[WatchEvent]:
        if resource is LEDGERS:
            return self._silent()
        return super().watch(resource, **kwargs)

    async def _silent(self) -> AsyncIterator[WatchEvent]:
        await asyncio.Event().wait()  # until the informer is cancelled
        nothing: list[WatchEvent] = []
        for event in nothing:
            yield event


async def test_a_race_lost_behind_a_lagging_watch_is_decided_on_a_fresh_read_of_that_node() -> None:
    """Issue 44: after a 409 the node is decided again on its ledger as stored (one GET), not on
    the cached version that lost: with the ledger watch silent, a write by another writer costs
    one conflict, never one per pass until a relist."""
    cluster = Cluster([gpu_node("gpu-a", 1)])
    client = LaggingLedgerWatch(cluster.store)
    inputs = CachedInputs(client)
    controller = AllocationController(
        client,
        cluster.config,
        identity="r1",
        clock=cluster.clock,
        registry=CollectorRegistry(),
        inputs=inputs,
    )
    async with running(inputs):
        cluster.create_pod(pinned("first", "gpu-a"))
        await until(lambda: ("default", "first") in inputs.pods.items)
        assert (await controller.run_once()).bound == ["default/first"]
        cluster.plugin()  # the device plugin takes it: the node is free for the next binding
        stored = copy.deepcopy(cluster.store.get(LEDGERS, "gpu-a"))
        stored["metadata"].setdefault("labels", {})["written-by"] = "another-writer"
        cluster.store.replace(LEDGERS, stored)  # a new resourceVersion the informer never sees
        cluster.create_pod(pinned("second", "gpu-a"))
        await until(lambda: ("default", "second") in inputs.pods.items)
        conflicts, bound = 0, list[str]()
        for _ in range(5):
            result = await controller.run_once()
            conflicts, bound = conflicts + result.conflicts, bound + result.bound
            if bound:
                break
    assert (conflicts, bound) == (1, ["default/second"])
    assert controller.world.full_resyncs == 0


async def test_a_conflict_is_decided_again() -> None:
    cluster = two_nodes()
    controller, client, registry = replica(cluster, error=conflict_error("gpu-b"))
    cluster.create_pod(pinned("on-b", "gpu-b"))
    result = await controller.run_once()
    assert result.conflicts == 1
    assert failures(registry, "gpu-b", "other") is None
    assert cluster.events("LedgerWriteFailed") == []
    client.refused.clear()
    await cluster.converge(controller)
    assert cluster.bound() == {"on-b": "gpu-b"}


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (SCHEMA, "invalid"),
        (Forbidden("denied", code=403, reason="Forbidden"), "forbidden"),
        (KubeError("Internal error occurred", code=500, reason="InternalError"), "unavailable"),
        (KubeError("bad request", code=400, reason="BadRequest"), "other"),
    ],
)
async def test_every_failure_is_counted_by_node_and_reason(error: KubeError, reason: str) -> None:
    cluster = two_nodes()
    controller, _, registry = replica(cluster, error=error)
    cluster.create_pod(pinned("on-b", "gpu-b"))
    cluster.create_pod(pinned("on-a", "gpu-a"))
    await controller.run_once()
    assert failures(registry, "gpu-b", reason) == 1
    assert cluster.bound() == {"on-a": "gpu-a"}


def test_the_wait_doubles_to_the_cap_and_starts_over_after_a_write() -> None:
    nodes = NodeQueue(base=2.0, cap=16.0)
    waits = [nodes.add_rate_limited("n", SCHEMA, 100.0).retry_at - 100.0 for _ in range(6)]
    assert waits == [2.0, 4.0, 8.0, 16.0, 16.0, 16.0]
    assert nodes.held(110.0) == {"n": str(SCHEMA)}
    assert nodes.held(116.0) == {}
    assert nodes.next_due(110.0) == 6.0
    # A clock stepped back never holds a node longer than the cap.
    assert nodes.held(50.0) == {}
    recovered = nodes.forget("n")
    assert recovered is not None and recovered.failures == 6
    assert nodes.add_rate_limited("n", SCHEMA, 200.0).retry_at == 202.0


def test_one_nodes_failures_never_lengthen_another_nodes_wait() -> None:
    """Keyed like client-go's workqueue: each node's wait follows its own failures in a row."""
    nodes = NodeQueue(base=2.0, cap=16.0)
    for _ in range(3):
        nodes.add_rate_limited("broken", SCHEMA, 100.0)
    assert nodes.add_rate_limited("other", SCHEMA, 100.0).retry_at == 102.0
    assert nodes.next_due(100.0) == 2.0
    nodes.drop("broken")  # the node is gone: nothing of it is kept
    assert nodes.state("broken") is None and nodes.backoff.attempts("broken") == 0
    assert nodes.backoff.failing() == 1


async def test_the_pod_decided_for_the_refused_node_is_undone_there_and_goes_elsewhere() -> None:
    """The pod decided for gpu-b is undone there (the allocator's ledger and kube-scheduler's
    workloads): in the next pass, with gpu-b held, it goes to gpu-a instead of waiting for gpu-b."""
    # Binpack prefers the fuller card: gpu-b's smaller one is chosen first, and refused.
    cluster = Cluster([gpu_node("gpu-a", 1), gpu_node("gpu-b", 1, memory=8192)])
    controller, client, _ = replica(cluster)
    cluster.create_pod(vgpu_pod("either", memory=4096))
    first = await controller.run_once()
    assert client.refusals == 1
    assert first.reserved == [] and cluster.bound() == {}
    await controller.settle()
    assert cluster.bound() == {"either": "gpu-a"}
    assert client.refusals == 1


async def test_a_ledger_deleted_under_the_write_is_decided_again_not_held() -> None:
    cluster = two_nodes()
    controller, client, registry = replica(cluster)
    client.refused.clear()
    cluster.create_pod(pinned("first", "gpu-b"))
    await cluster.converge(controller)
    client.refused.add("gpu-b")
    client.error = NotFound('gpuledgers.vgpu-guard.io "gpu-b" not found', code=404, reason="NotFound")
    cluster.create_pod(pinned("second", "gpu-b"))
    result = await controller.run_once()
    assert result.conflicts == 1
    assert failures(registry, "gpu-b", "not-found") is None
    assert not controller.node_queue.blocked("gpu-b", cluster.clock())


async def test_a_held_node_that_is_deleted_is_forgotten() -> None:
    cluster = two_nodes()
    controller, _, _ = replica(cluster)
    cluster.create_pod(pinned("on-b", "gpu-b"))
    await controller.run_once()
    assert controller.node_queue.state("gpu-b") is not None
    cluster.store.delete(NODES, "gpu-b")
    await controller.run_once()
    assert controller.node_queue.state("gpu-b") is None


async def test_the_run_loop_wakes_when_a_held_nodes_retry_is_due_not_at_its_next_round() -> None:
    """The run loop's wait for a change ends at the first held node's retry (``next_retry_in``),
    not a whole retry period later."""
    import time
    from types import SimpleNamespace

    from vgpu_guard.controller.run import _Rounds

    controller = SimpleNamespace(next_retry_in=lambda: 0.05)
    inputs = SimpleNamespace(changed=asyncio.Event())
    elector = SimpleNamespace(lease_duration=15.0)
    rounds = _Rounds(
        controller,  # type: ignore[arg-type]
        inputs,  # type: ignore[arg-type]
        elector,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        resync_seconds=30.0,
        retry_seconds=5.0,
        max_passes=1,
        sleep=asyncio.sleep,
        monotonic=time.monotonic,
    )
    started = time.monotonic()
    await rounds._wait_for_change()
    assert time.monotonic() - started < 1.0
    controller.next_retry_in = lambda: None  # nothing held: the round's own period (cut short here)
    inputs.changed.set()
    await rounds._wait_for_change()
