"""A change of leadership is logged once, and a replica that stands by exports no leader-only numbers.

A former leader kept its last pending counts and queue ratios: a dashboard's max() over replicas
showed them for good, and nothing in the log said the Lease had moved.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tests.controller.allocation_testkit import Cluster, gpu_node
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.controller.allocation import AllocationController
from vgpu_guard.controller.inputs import CachedInputs
from vgpu_guard.controller.metrics import AllocationMetrics
from vgpu_guard.controller.queue_audit import QueueAuditor
from vgpu_guard.controller.run import _Rounds


class ScriptedElector:
    """Leads, then loses the Lease to ``other`` (what ``LeaderElector`` reports after each round)."""

    namespace, name, lease_duration = "vgpu-guard", "vgpu-guard-controller", 15.0

    def __init__(self, script: list[bool]) -> None:
        self.script = script
        self.leading = False
        self.holder = ""
        self.error: str | None = None

    async def try_acquire_or_renew(self) -> bool:
        self.leading = self.script.pop(0)
        self.holder = "r1" if self.leading else "other"
        return self.leading


async def test_losing_the_lease_is_logged_and_clears_what_only_the_leader_exports(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = Cluster([gpu_node("a", 1)])
    registry = CollectorRegistry()
    metrics = AllocationMetrics(registry)
    client = MemoryClusterClient(cluster.store)
    inputs = CachedInputs(client)
    controller = AllocationController(client, cluster.config, identity="r1", metrics=metrics, inputs=inputs)
    elector: Any = ScriptedElector([True, False, False])
    now = [0.0]

    async def sleep(seconds: float) -> None:
        now[0] += seconds
        await asyncio.sleep(0)

    rounds = _Rounds(controller, inputs, elector, metrics, resync_seconds=30, retry_seconds=2, max_passes=5,
                     sleep=sleep, monotonic=lambda: now[0])  # fmt: skip
    with caplog.at_level(logging.INFO, logger="vgpu_guard.controller"):
        assert await rounds._leading()
        metrics.pending.set(3)  # what a pass as the leader left
        metrics.set_pending_reasons(["capacity", "capacity", "queue"])
        now[0] += 10  # past the renewal period: the next round asks the Lease again
        assert not await rounds._leading()
        await rounds._stand_by()
        now[0] += 10
        assert not await rounds._leading()  # still standing by: no second line
    lines = [r.getMessage() for r in caplog.records if r.name == "vgpu_guard.controller"]
    assert lines == [
        "leading: holds Lease vgpu-guard/vgpu-guard-controller",
        "standing by: Lease vgpu-guard/vgpu-guard-controller is held by other",
    ]
    assert registry.get_sample_value("vgpu_guard_leader") == 0
    assert registry.get_sample_value("vgpu_guard_pending_pods") == 0
    assert registry.get_sample_value("vgpu_guard_pending_pods_by_reason", {"reason": "capacity"}) == 0


def test_a_queue_auditor_that_stands_down_exports_no_ratio() -> None:
    registry = CollectorRegistry()
    auditor = QueueAuditor(MemoryClusterClient(Cluster().store), registry=registry)
    auditor.ratio.labels(resource="cpu").set(0.9)
    auditor._gauged = {"cpu"}
    assert registry.get_sample_value("vgpu_guard_queue_guarantee_ratio", {"resource": "cpu"}) == 0.9
    auditor.stand_down()
    assert registry.get_sample_value("vgpu_guard_queue_guarantee_ratio", {"resource": "cpu"}) is None
