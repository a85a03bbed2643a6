"""The controller process's collector settings (controller/gc_tuning.py): the thresholds in a fresh
interpreter, and the pause while a start loads the cluster."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tests.controller.allocation_testkit import Cluster, gpu_node, lease_held_by_another, vgpu_pod
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.controller.gc_tuning import CONTROLLER_GC_THRESHOLDS, StartPause
from vgpu_guard.controller.run import run_controller

PROBE = """
import gc, json
from vgpu_guard.controller.gc_tuning import tune_gc
before = gc.get_threshold()
tune_gc()
print(json.dumps({"before": before, "after": gc.get_threshold(), "frozen": gc.get_freeze_count()}))
"""


def test_tune_gc_raises_the_young_threshold_and_freezes_the_startup_heap() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    seen = json.loads(done.stdout)
    assert seen["before"] != seen["after"]  # it changed something, whatever this CPython's defaults
    assert tuple(seen["after"]) == CONTROLLER_GC_THRESHOLDS
    assert CONTROLLER_GC_THRESHOLDS[0] >= 10_000
    assert seen["frozen"] > 1_000  # the modules and config loaded so far


@pytest.fixture
def collector_on() -> Iterator[None]:
    """Each test starts with the collector on and leaves it as it found it."""
    was = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        (gc.enable if was else gc.disable)()


class Steady:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_start_pause_turns_the_collector_off_and_ends_once_freezing_what_was_built(
    collector_on: None,
) -> None:
    pause = StartPause(monotonic=Steady())
    frozen = gc.get_freeze_count()
    pause.begin()
    assert not gc.isenabled() and pause.paused
    built = [{"pod": i} for i in range(1_000)]  # what a start keeps
    pause.end()
    assert gc.isenabled() and not pause.paused
    assert gc.get_freeze_count() >= frozen + len(built)
    gc.disable()  # a later end() is a no-op: it does not turn on what someone else turned off
    pause.end()
    assert not gc.isenabled()


def test_a_start_pause_ends_by_itself_after_its_limit(collector_on: None) -> None:
    clock = Steady()
    pause = StartPause(limit_seconds=120.0, monotonic=clock)
    pause.begin()
    clock.now += 119.9
    pause.end_if_overdue()
    assert not gc.isenabled()  # caches still listing: keep it off
    clock.now += 0.1
    pause.end_if_overdue()
    assert gc.isenabled() and not pause.paused  # a start that never syncs does not keep it off


def test_a_start_pause_leaves_a_collector_someone_else_turned_off_alone(collector_on: None) -> None:
    gc.disable()
    pause = StartPause(monotonic=Steady())
    pause.begin()
    assert not pause.paused
    pause.end()
    assert not gc.isenabled()


class SeesCollector:
    """The in-process client, noting whether the collector was on at each LIST and bind."""

    def __init__(self, inner: MemoryClusterClient) -> None:
        self.inner = inner
        self.at_list: list[bool] = []
        self.at_bind: list[bool] = []

    def __getattr__(self, verb: str) -> Any:
        return getattr(self.inner, verb)

    async def list(self, resource: Any, **kwargs: Any) -> Any:
        self.at_list.append(gc.isenabled())
        return await self.inner.list(resource, **kwargs)

    async def bind(self, *args: Any, **kwargs: Any) -> Any:
        self.at_bind.append(gc.isenabled())
        return await self.inner.bind(*args, **kwargs)


async def run_until(client: SeesCollector, cluster: Cluster, done: Callable[[], bool]) -> None:
    task = asyncio.ensure_future(
        run_controller(client, cluster.config, identity="a", registry=CollectorRegistry(),
                       lease_namespace="default", retry_seconds=0.05)
    )  # fmt: skip
    try:
        for _ in range(400):
            if done():
                break
            await asyncio.sleep(0.01)
        assert done()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_the_leader_collects_nothing_while_it_loads_and_again_after_its_first_pass(
    collector_on: None,
) -> None:
    cluster = Cluster([gpu_node("a", 1)])
    cluster.create_pod(vgpu_pod("first", memory=1000))
    client = SeesCollector(MemoryClusterClient(cluster.store))
    await run_until(client, cluster, lambda: bool(client.at_bind) and gc.isenabled())
    assert client.at_list and not any(client.at_list)  # every cache's first LIST ran paused
    assert gc.isenabled()  # ...and the first pass ended the pause


async def test_a_standby_ends_the_pause_once_its_caches_are_synced(collector_on: None) -> None:
    cluster = Cluster([gpu_node("a", 1)])
    lease_held_by_another(cluster, time.time())
    client = SeesCollector(MemoryClusterClient(cluster.store))
    await run_until(client, cluster, lambda: len(client.at_list) >= 5 and gc.isenabled())
    assert not client.at_bind  # it never led
    assert not client.at_list[0]
