"""A standby replica, or one whose Lease cannot be written, is quiet: request counts over a simulated
minute (fake clock and sleep, no real waiting).

Before: the watches' wake event was cleared only while leading, so a standby's wait returned at once
and it sent ~1,000 Lease GETs a second; with the namespace deleted both replicas logged a warning on
every round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tests.controller.allocation_testkit import Cluster, gpu_node, lease_held_by_another
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.controller.run import run_controller
from vgpu_guard.kube.client import WatchEvent
from vgpu_guard.kube.resources import Resource

MINUTE = 60.0
RETRY = 2.0


class Counting:
    """The in-process client, counting every call by (verb, resource)."""

    def __init__(self, inner: MemoryClusterClient) -> None:
        self.inner = inner
        self.calls: Counter[tuple[str, str]] = Counter()

    def __getattr__(self, verb: str) -> Any:
        method = getattr(self.inner, verb)

        async def call(resource: Resource, *args: Any, **kwargs: Any) -> Any:
            self.calls[(verb, resource.plural)] += 1
            return await method(resource, *args, **kwargs)

        return call

    def watch(self, resource: Resource, **kwargs: Any) -> AsyncIterator[WatchEvent]:
        self.calls[("watch", resource.plural)] += 1
        return self.inner.watch(resource, **kwargs)


class SimulatedMinute(Exception):
    pass


class FakeTime:
    def __init__(self) -> None:
        self.now = 1_750_000_000.0
        self.start = self.now

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        if self.now - self.start >= MINUTE:
            raise SimulatedMinute
        await asyncio.sleep(0)


async def run_for_a_minute(client: Counting, time: FakeTime, namespace: str) -> None:
    with pytest.raises(SimulatedMinute):
        await run_controller(
            client,
            Cluster().config,
            identity="standby",
            clock=time.clock,
            sleep=time.sleep,
            registry=CollectorRegistry(),
            lease_namespace=namespace,
            retry_seconds=RETRY,
        )


async def test_a_standby_sends_one_lease_read_per_retry_period_and_nothing_else() -> None:
    cluster = Cluster([gpu_node("a", 1)])
    time = FakeTime()
    lease_held_by_another(cluster, time.now)
    client = Counting(MemoryClusterClient(cluster.store))
    await run_for_a_minute(client, time, "default")
    rounds = int(MINUTE / RETRY)
    assert client.calls[("get", "leases")] == rounds
    writes = {k: n for k, n in client.calls.items() if k[0] not in ("get", "list", "watch")}
    assert writes == {}
    # Besides the Lease, only each watch's first list and its watch: nothing is re-read per round.
    others = sum(n for (verb, plural), n in client.calls.items() if plural != "leases")
    assert others <= 2 * 6


async def test_a_lease_that_cannot_be_written_is_logged_once_and_retried_with_backoff(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = Cluster([gpu_node("a", 1)])
    time = FakeTime()
    client = Counting(MemoryClusterClient(cluster.store))
    with caplog.at_level(logging.WARNING, logger="vgpu_guard"):
        await run_for_a_minute(client, time, "deleted-namespace")
    # Rounds at 0, 2, 6, 14, 30 and 46 s: the wait doubles from the retry period up to 8 of them.
    assert client.calls[("get", "leases")] == 6
    assert client.calls[("create", "leases")] == 6
    lease_lines = [r.getMessage() for r in caplog.records if "Lease" in r.getMessage()]
    assert lease_lines == [
        "cannot write Lease deleted-namespace/vgpu-guard-controller: create coordination.k8s.io/v1/leases "
        'deleted-namespace/vgpu-guard-controller: HTTP 404 NotFound: namespaces "deleted-namespace" not found; '
        "namespace deleted-namespace not found; retrying with backoff, logged again only if the error changes"
    ]


async def test_a_busy_leader_renews_its_lease_once_per_retry_period_not_once_per_pass() -> None:
    cluster = Cluster([gpu_node("a", 1)])
    time, steady = FakeTime(), FakeTime()  # the wall clock and the monotonic one
    client = Counting(MemoryClusterClient(cluster.store))
    task = asyncio.ensure_future(
        run_controller(
            client,
            cluster.config,
            identity="leader",
            clock=time.clock,
            monotonic=steady.clock,
            sleep=time.sleep,
            registry=CollectorRegistry(),
            lease_namespace="default",
            retry_seconds=RETRY,
        )
    )
    try:
        for _ in range(100):
            if client.calls[("create", "leases")]:
                break
            await asyncio.sleep(0.02)

        async def passes(count: int, tag: str) -> None:
            for i in range(count):  # every new pod wakes a pass
                cluster.create_pod(cpu_pod(f"{tag}-{i}"))
                await asyncio.sleep(0.02)

        await passes(10, "now")
        assert client.calls[("get", "leases")] == 1  # the first round only: created, leading
        # The wall clock steps back a minute (NTP) while a retry period really passes: the
        # renewal is due all the same (timed on the monotonic clock).
        time.now -= 60
        steady.now += RETRY
        await passes(10, "later")
        assert client.calls[("get", "leases")] == 2 and client.calls[("replace", "leases")] == 1
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def cpu_pod(name: str) -> dict[str, Any]:
    container = {"name": "c", "image": "busybox"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [container]},
    }
