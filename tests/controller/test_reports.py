"""Events wait for their own budget, and a flood of them is dropped and counted, never queued forever."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from tests.controller.allocation_testkit import Cluster, vgpu_pod
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.controller.events import MAX_PENDING_EVENTS
from vgpu_guard.controller.metrics import AllocationMetrics
from vgpu_guard.controller.reports import PassReports, Reporter
from vgpu_guard.kube.resources import PODS


async def test_events_beyond_the_backlog_are_dropped_and_counted() -> None:
    cluster = Cluster()
    registry = CollectorRegistry()
    reporter = Reporter(
        MemoryClusterClient(cluster.store),
        cluster.config,
        identity="r",
        clock=cluster.clock,
        metrics=AllocationMetrics(registry),
    )
    gate = asyncio.Event()
    sent = 0

    async def slow_event() -> None:
        nonlocal sent
        await gate.wait()  # as if waiting for the Events rate limit
        sent += 1

    for _ in range(MAX_PENDING_EVENTS + 25):
        reporter.events.emit(slow_event())
    assert registry.get_sample_value("vgpu_guard_events_dropped_total") == 25
    gate.set()
    await reporter.events.flush_events()
    assert sent == MAX_PENDING_EVENTS


def _reporter(cluster: Cluster, registry: CollectorRegistry) -> Reporter:
    return Reporter(
        MemoryClusterClient(cluster.store),
        cluster.config,
        identity="r",
        clock=cluster.clock,
        metrics=AllocationMetrics(registry),
    )


async def test_an_unschedulable_pod_is_reported_once_while_the_cache_lags() -> None:
    """A pass that reads the pod before our status patch reached the cache must not patch it and
    send the Event again (seen on the real control plane: two FailedScheduling Events)."""
    cluster = Cluster()
    reporter = _reporter(cluster, CollectorRegistry())
    stale = cluster.create_pod(vgpu_pod("p", memory=12288))
    message = "0/1 nodes are available: 1 GPU has 0 MiB free < 12288 MiB requested"
    for _ in range(3):  # the same cached version, pass after pass
        await reporter.unschedulable(stale, message, PassReports())
    await reporter.events.flush_events()
    assert len(cluster.events("FailedScheduling")) == 1
    # A newer version without the condition (someone cleared it) is reported again.
    current = cluster.store.get(PODS, "p", namespace="default")
    cleared = cluster.store.patch(
        PODS, "p", {"status": {"conditions": []}}, namespace="default", subresource="status"
    )
    assert cleared["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]
    await reporter.unschedulable(cleared, message, PassReports())
    # A new message from the stale version is news too.
    await reporter.unschedulable(stale, message + " (changed)", PassReports())
    await reporter.events.flush_events()
    assert len(cluster.events("FailedScheduling")) == 3


async def test_a_pod_that_went_is_forgotten() -> None:
    """What was sent for a pod is dropped with the pod (the memory stays bounded by live pods)."""
    cluster = Cluster()
    reporter = _reporter(cluster, CollectorRegistry())
    pod = cluster.create_pod(vgpu_pod("p", memory=12288))
    await reporter.unschedulable(pod, "no room", PassReports())
    reporter.forget_pods({pod["metadata"]["uid"]})
    await reporter.unschedulable(pod, "no room", PassReports())  # nothing remembered: sent again
    await reporter.events.flush_events()
    assert len(cluster.events("FailedScheduling")) == 2
