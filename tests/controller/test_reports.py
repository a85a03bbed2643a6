"""Events wait for their own budget, and a flood of them is dropped and counted, never queued forever."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from tests.controller.allocation_testkit import Cluster
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.controller.metrics import AllocationMetrics
from vgpu_guard.controller.reports import MAX_PENDING_EVENTS, Reporter


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
        reporter.emit(slow_event())
    assert registry.get_sample_value("vgpu_guard_events_dropped_total") == 25
    gate.set()
    await reporter.flush_events()
    assert sent == MAX_PENDING_EVENTS
