"""The queue audit: Events on affected Queues (deduplicated), the ratio gauge, one audit line per
outcome, never a judgement on an unsynced view, never a write to a Queue.

Runs against the API double (``MemoryClusterClient`` over a real ``Store``), so the Events are
what ``kubectl describe queue`` would show.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from importlib import resources
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from tests.apidouble_support.faults import FaultPlan, unavailable_error
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.apidouble.store import Store
from vgpu_guard.controller.queue_audit import QueueAuditor, run_queue_audit
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.kube.client import typed_items
from vgpu_guard.kube.resources import CRDS, EVENTS, NODES, QUEUES
from vgpu_guard.kube.view_cache import ClusterCache
from vgpu_guard.logs import AUDIT_LOGGER

Obj = dict[str, Any]
CONFIG = GuardConfig()
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def node(name: str, *, ready: bool = True, unschedulable: bool = False) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "spec": {"unschedulable": unschedulable},
        "status": {
            "allocatable": {"cpu": "8", "memory": "32Gi"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def queue(name: str, cpu: str, *, parent: str | None = None) -> Obj:
    spec: Obj = {"guarantee": {"resource": {"cpu": cpu}}}
    if parent:
        spec["parent"] = parent
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


@pytest.fixture
def store() -> Store:
    s = Store(seed=3)
    text = (
        resources.files("vgpu_guard")
        .joinpath("data/crds/volcano/scheduling.volcano.sh_queues.yaml")
        .read_text()
    )
    s.create(CRDS, yaml.safe_load(text))
    text = (
        resources.files("vgpu_guard")
        .joinpath("data/crds/volcano/scheduling.volcano.sh_podgroups.yaml")
        .read_text()
    )
    s.create(CRDS, yaml.safe_load(text))
    for i in range(8):
        s.create(NODES, node(f"worker-{i}"))
    for name, cpu in (("training", "32"), ("inference", "24"), ("notebooks", "4")):
        s.create(QUEUES, queue(name, cpu))
    return s


def view_of(store: Store, *, synced: bool = True) -> ClusterView:
    objects = [*typed_items(store.list(NODES).items, NODES), *store.list(QUEUES).items]
    return ClusterView.from_objects(objects, CONFIG, synced=synced)


def events(store: Store) -> list[tuple[str, str, str, str]]:
    """(queue, type, reason, message) of every recorded Event, oldest first."""
    items = sorted(
        store.list(EVENTS, namespace="default").items, key=lambda e: int(e["metadata"]["resourceVersion"])
    )
    return [(e["involvedObject"]["name"], e["type"], e["reason"], e["message"]) for e in items]


def audit_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [r.audit for r in caplog.records if r.name == AUDIT_LOGGER]  # type: ignore[attr-defined]


def ratio(registry: CollectorRegistry, resource: str) -> float | None:
    return registry.get_sample_value("vgpu_guard_queue_guarantee_ratio", {"resource": resource})


def cpu_message(own: str, total: str, capacity: str, nodes: int, excess: str) -> str:
    return (
        f"[queue-guarantee-capacity] spec.guarantee.resource.cpu: {own} is part of {total} guaranteed cpu but "
        f"cluster capacity is {capacity} ({nodes} Ready nodes); the queues must give up {excess} or nodes be added"
    )


async def test_capacity_shrinking_under_the_queues_is_reported_once(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=AUDIT_LOGGER)
    registry = CollectorRegistry()
    auditor = QueueAuditor(MemoryClusterClient(store), registry=registry, clock=lambda: NOW)

    result = await auditor.audit_once(view_of(store), CONFIG)
    assert result is not None and result.findings == {}
    assert ratio(registry, "cpu") == 60 / 64
    assert events(store) == []

    # Two nodes go: one NotReady, one cordoned. 60 cpu guaranteed on 48.
    store.patch(
        NODES,
        "worker-6",
        {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
        subresource="status",
    )
    store.patch(NODES, "worker-7", {"spec": {"unschedulable": True}})
    queues_before = {
        q["metadata"]["name"]: q["metadata"]["resourceVersion"] for q in store.list(QUEUES).items
    }
    await auditor.audit_once(view_of(store), CONFIG)
    await auditor.audit_once(view_of(store), CONFIG)  # same state: nothing new
    assert events(store) == [
        ("inference", "Warning", "GuaranteeExceedsCapacity", cpu_message("24", "60", "48", 6, "12")),
        ("notebooks", "Warning", "GuaranteeExceedsCapacity", cpu_message("4", "60", "48", 6, "12")),
        ("training", "Warning", "GuaranteeExceedsCapacity", cpu_message("32", "60", "48", 6, "12")),
    ]
    assert ratio(registry, "cpu") == 60 / 48
    # The user's queues are never written.
    assert {
        q["metadata"]["name"]: q["metadata"]["resourceVersion"] for q in store.list(QUEUES).items
    } == queues_before

    lines = audit_lines(caplog)
    assert len(lines) == 2  # one per distinct outcome
    assert lines[1]["event"] == "queue-audit"
    assert lines[1]["over_committed"] == ["cpu"]
    assert lines[1]["affected_queues"] == ["inference", "notebooks", "training"]
    assert lines[1]["resources"]["cpu"] == {
        "guaranteed": "60",
        "capacity": "48",
        "nodes": 6,
        "exceeded": True,
    }
    json.dumps(lines[1])  # the line is JSON-serialisable as logged

    # Capacity comes back: each affected queue gets one Normal event.
    store.patch(NODES, "worker-7", {"spec": {"unschedulable": False}})
    store.patch(
        NODES,
        "worker-6",
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        subresource="status",
    )
    await auditor.audit_once(view_of(store), CONFIG)
    resolved = "the queue's guarantees fit the cluster's capacity and its parent again"
    assert events(store)[3:] == [
        ("inference", "Normal", "GuaranteesFit", resolved),
        ("notebooks", "Normal", "GuaranteesFit", resolved),
        ("training", "Normal", "GuaranteesFit", resolved),
    ]


async def test_event_carries_the_queue_reference(store: Store) -> None:
    store.create(QUEUES, queue("extra", "8"))
    auditor = QueueAuditor(MemoryClusterClient(store), registry=CollectorRegistry(), clock=lambda: NOW)
    await auditor.audit_once(view_of(store), CONFIG)
    event = next(
        e for e in store.list(EVENTS, namespace="default").items if e["involvedObject"]["name"] == "extra"
    )
    stored = store.get(QUEUES, "extra")
    assert event["involvedObject"] == {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "name": "extra",
        "uid": stored["metadata"]["uid"],
        "resourceVersion": stored["metadata"]["resourceVersion"],
    }
    assert (event["type"], event["source"], event["lastTimestamp"]) == (
        "Warning",
        {"component": "vgpu-guard"},
        "2026-01-02T03:04:05Z",
    )


async def test_unsynced_view_is_never_judged(store: Store) -> None:
    registry = CollectorRegistry()
    auditor = QueueAuditor(MemoryClusterClient(store), registry=registry)
    # A half-listed cache: no nodes yet, so every guarantee would look over capacity.
    partial = ClusterView.from_objects(store.list(QUEUES).items, CONFIG, synced=False)
    assert await auditor.audit_once(partial, CONFIG) is None
    assert events(store) == []
    assert ratio(registry, "cpu") is None


async def test_failed_events_are_retried_and_gauges_track_vanished_resources(store: Store) -> None:
    plan = FaultPlan()
    plan.add(verb="create", resource=EVENTS, error=unavailable_error(), times=1)
    registry = CollectorRegistry()
    auditor = QueueAuditor(MemoryClusterClient(store, faults=plan), registry=registry)
    store.create(QUEUES, queue("gpus", "0") | {"spec": {"guarantee": {"resource": {"nvidia.com/gpu": "2"}}}})
    await auditor.audit_once(view_of(store), CONFIG)
    assert events(store) == []  # the API refused the one event
    assert ratio(registry, "nvidia.com/gpu") == math.inf  # guaranteed, but no node has any
    await auditor.audit_once(view_of(store), CONFIG)
    assert [(q, reason) for q, _, reason, _ in events(store)] == [("gpus", "GuaranteeExceedsCapacity")]
    store.delete(QUEUES, "gpus")
    await auditor.audit_once(view_of(store), CONFIG)
    assert ratio(registry, "nvidia.com/gpu") is None
    assert len(events(store)) == 1  # a deleted queue gets no "fits" event


async def test_hierarchy_findings_land_on_the_parent(store: Store) -> None:
    store.create(QUEUES, queue("team", "4"))
    store.create(QUEUES, queue("team-a", "3", parent="team"))
    store.create(QUEUES, queue("team-b", "3", parent="team"))
    auditor = QueueAuditor(MemoryClusterClient(store), registry=CollectorRegistry())
    await auditor.audit_once(view_of(store), CONFIG)
    hierarchy = (
        "[queue-hierarchy] spec.guarantee.resource.cpu: 4 is less than its children's guarantees 6 "
        "(team-a, team-b); raise it to at least 6 or lower the children's guarantees first"
    )
    # 32 + 24 + 4 + max(4, 3 + 3) = 66 of 64: every queue with a cpu guarantee is told.
    assert events(store) == [
        ("inference", "Warning", "GuaranteeExceedsCapacity", cpu_message("24", "66", "64", 8, "2")),
        ("notebooks", "Warning", "GuaranteeExceedsCapacity", cpu_message("4", "66", "64", 8, "2")),
        ("team", "Warning", "GuaranteeExceedsCapacity", cpu_message("4", "66", "64", 8, "2")),
        ("team", "Warning", "GuaranteeExceedsParent", hierarchy),
        ("team-a", "Warning", "GuaranteeExceedsCapacity", cpu_message("3", "66", "64", 8, "2")),
        ("team-b", "Warning", "GuaranteeExceedsCapacity", cpu_message("3", "66", "64", 8, "2")),
        ("training", "Warning", "GuaranteeExceedsCapacity", cpu_message("32", "66", "64", 8, "2")),
    ]


# --- the running loop over real watches -----------------------------------------------------------


@pytest.fixture
async def background() -> AsyncIterator[Callable[[Any], asyncio.Task[None]]]:
    tasks: list[asyncio.Task[None]] = []

    def start(coro: Any) -> asyncio.Task[None]:
        tasks.append(asyncio.create_task(coro))
        return tasks[-1]

    yield start
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_run_queue_audit_reacts_to_a_node_removed(
    store: Store, background: Callable[[Any], asyncio.Task[None]]
) -> None:
    client = MemoryClusterClient(store, bookmark_interval=60)
    cache = ClusterCache(client)
    registry = CollectorRegistry()
    background(cache.run())
    task = background(run_queue_audit(client, CONFIG, cache=cache, registry=registry, debounce_seconds=0))
    async with asyncio.timeout(5):
        while ratio(registry, "cpu") != 60 / 64:  # noqa: ASYNC110 - polling another task's output
            await asyncio.sleep(0.01)
    store.delete(NODES, "worker-0")
    async with asyncio.timeout(5):
        while len(events(store)) < 3:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    assert [(q, reason) for q, _, reason, _ in events(store)] == [
        ("inference", "GuaranteeExceedsCapacity"),
        ("notebooks", "GuaranteeExceedsCapacity"),
        ("training", "GuaranteeExceedsCapacity"),
    ]
    assert events(store)[0][3] == cpu_message("24", "60", "56", 7, "4")
    assert ratio(registry, "cpu") == 60 / 56
    assert not task.done()


async def test_a_parent_cycle_is_reported_on_every_queue_of_it_with_the_way_out(store: Store) -> None:
    """Two parent updates admitted at the same moment (the store has no webhook: as if both passed
    their check) leave qx -> qy -> qx. Each queue gets one QueueParentCycle Event naming the cycle
    and the patch; the gauge counts it; breaking it clears the gauge and says so."""
    registry = CollectorRegistry()
    auditor = QueueAuditor(MemoryClusterClient(store), registry=registry, clock=lambda: NOW)
    store.create(QUEUES, queue("qx", "1", parent="qy"))
    store.create(QUEUES, queue("qy", "1", parent="qx"))
    await auditor.audit_once(view_of(store), CONFIG)
    await auditor.audit_once(view_of(store), CONFIG)  # the same state: nothing new
    message = (
        "[queue-hierarchy] spec.parent: queues qx -> qy -> qx form a parent cycle (each parent update was "
        "admitted against the queues as they were; two updates admitted at the same moment cannot be "
        "checked as one); Volcano's capacity plugin with hierarchy enabled refuses allocation to every "
        "queue while a job is in one of them; vgpu-guard changes no Queue: give one of them a parent "
        'outside the cycle, e.g. kubectl patch queue qx --type merge -p \'{"spec":{"parent":"root"}}\''
    )
    cycle_events = [e for e in events(store) if e[2] == "QueueParentCycle"]
    assert cycle_events == [
        ("qx", "Warning", "QueueParentCycle", message),
        ("qy", "Warning", "QueueParentCycle", message),
    ]
    # The cycle is said once per queue, not again as a parent finding.
    assert not any(e[0] in ("qx", "qy") and "descendant" in e[3] for e in events(store))
    assert registry.get_sample_value("vgpu_guard_queue_parent_cycles") == 1

    store.patch(QUEUES, "qx", {"spec": {"parent": "root"}})
    await auditor.audit_once(view_of(store), CONFIG)
    assert registry.get_sample_value("vgpu_guard_queue_parent_cycles") == 0
    assert events(store)[-2:] == [
        (
            "qx",
            "Normal",
            "GuaranteesFit",
            "the queue's guarantees fit the cluster's capacity and its parent again",
        ),
        (
            "qy",
            "Normal",
            "GuaranteesFit",
            "the queue's guarantees fit the cluster's capacity and its parent again",
        ),
    ]
