"""The list+watch cache against the API double: sync, relist on 410, re-watch after a dropped
stream, backoff on errors, and ``ClusterCache.snapshot`` reuse.

Real store semantics (``MemoryClusterClient`` over ``vgpu_guard.apidouble.store.Store``); faults
come from the client's ``FaultPlan`` or from the store's own bounded watch window.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable
from importlib import resources
from typing import Any

import pytest
import yaml

from tests.apidouble_support.faults import FaultPlan, unavailable_error
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.apidouble.store import Store
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.ledger import (
    Allocation,
    ContainerGrant,
    DeviceGrant,
    NodeLedger,
    decode_ledger,
    encode_ledger,
)
from vgpu_guard.kube.backoff import Backoff
from vgpu_guard.kube.informer import Informer, InformerEvent
from vgpu_guard.kube.resources import CRDS, LEDGERS, NODES, QUEUES
from vgpu_guard.kube.view_cache import ClusterCache

Obj = dict[str, Any]


def node(name: str, *, cpu: str = "8", ready: bool = True) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {
            "allocatable": {"cpu": cpu},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def queue(name: str, cpu: str) -> Obj:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"guarantee": {"resource": {"cpu": cpu}}},
    }


def install_volcano_crds(store: Store) -> None:
    for name in ("scheduling.volcano.sh_queues", "scheduling.volcano.sh_podgroups"):
        text = resources.files("vgpu_guard").joinpath(f"data/crds/volcano/{name}.yaml").read_text()
        store.create(CRDS, yaml.safe_load(text))


class Sleeps:
    """The informer's injected sleep: records each delay and waits for the gate (open by default)."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        await self.gate.wait()
        await asyncio.sleep(0)


async def eventually(predicate: Callable[[], bool]) -> None:
    """Poll a condition another task makes true (bounded: a hang fails the test in 5 s)."""
    async with asyncio.timeout(5):
        while not predicate():  # noqa: ASYNC110 - the state has no event of its own to wait on
            await asyncio.sleep(0.005)


def names(informer: Informer) -> list[str]:
    return sorted(name for _, name in informer.items)


@pytest.fixture
def store() -> Store:
    return Store(watch_window=3, seed=1)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


def exact_backoff() -> Backoff:
    return Backoff(initial=0.2, maximum=1.0, jitter=0.0, rng=random.Random(0))


@pytest.fixture
async def running() -> AsyncIterator[Callable[[Any], asyncio.Task[None]]]:
    tasks: list[asyncio.Task[None]] = []

    def start(coro: Any) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        tasks.append(task)
        return task

    yield start
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_lists_then_follows_the_watch(
    store: Store, running: Callable[[Any], asyncio.Task[None]]
) -> None:
    store.create(NODES, node("a"))
    informer = Informer(MemoryClusterClient(store, bookmark_interval=60), NODES)
    seen: list[tuple[str, str]] = []
    informer.add_handler(lambda e: seen.append((e.type, e.object["metadata"]["name"])))
    assert not informer.synced
    running(informer.run())
    await asyncio.wait_for(informer.wait_synced(), 5)
    store.create(NODES, node("b"))
    store.patch(NODES, "a", {"metadata": {"labels": {"x": "1"}}})
    store.delete(NODES, "b")
    await eventually(lambda: len(seen) == 4)
    assert seen == [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    assert names(informer) == ["a"]
    assert informer.items[("", "a")]["metadata"]["labels"] == {"x": "1"}
    assert (informer.lists, informer.errors) == (1, 0)


async def test_dropped_stream_rewatches_from_the_last_version_without_relisting(
    store: Store, running: Callable[[Any], asyncio.Task[None]], sleeps: Sleeps
) -> None:
    plan = FaultPlan()
    plan.add(verb="watch", resource=NODES, drop_after=2)  # the server ends the first stream early
    informer = Informer(
        MemoryClusterClient(store, faults=plan, bookmark_interval=60),
        NODES,
        sleep=sleeps,
        backoff=exact_backoff(),
    )
    seen: list[str] = []
    informer.add_handler(lambda e: seen.append(f"{e.type} {e.object['metadata']['name']}"))
    running(informer.run())
    await asyncio.wait_for(informer.wait_synced(), 5)
    for name in ("n1", "n2", "n3", "n4", "n5"):
        store.create(NODES, node(name))
    await eventually(lambda: len(informer.items) == 5)
    # Every change exactly once, in order: the third event, cut from the first stream, comes
    # with the second one, which started from the second event's resourceVersion.
    assert seen == ["ADDED n1", "ADDED n2", "ADDED n3", "ADDED n4", "ADDED n5"]
    assert (informer.lists, informer.watches) == (1, 2)
    assert sleeps.delays == []  # the dropped stream had brought events: re-watch at once


async def test_expired_version_relists_and_reports_what_changed_meanwhile(
    store: Store, running: Callable[[Any], asyncio.Task[None]], sleeps: Sleeps
) -> None:
    store.create(NODES, node("a"))
    store.create(NODES, node("b"))
    plan = FaultPlan()
    # The first stream ends as the next event arrives, before delivering it: the informer backs
    # off (gated below) while the store moves on past its 3-event window.
    plan.add(verb="watch", resource=NODES, drop_after=0)
    informer = Informer(
        MemoryClusterClient(store, faults=plan, bookmark_interval=60),
        NODES,
        sleep=sleeps,
        backoff=exact_backoff(),
    )
    events: list[InformerEvent] = []
    informer.add_handler(events.append)
    running(informer.run())
    await asyncio.wait_for(informer.wait_synced(), 5)
    sleeps.gate.clear()
    store.delete(NODES, "b")
    await eventually(lambda: len(sleeps.delays) == 1)
    for name in ("c", "d", "e"):
        store.create(NODES, node(name))
    store.patch(NODES, "a", {"metadata": {"labels": {"x": "1"}}})
    sleeps.gate.set()
    await eventually(lambda: informer.lists == 2)
    assert names(informer) == ["a", "c", "d", "e"]
    assert [(e.type, e.object["metadata"]["name"]) for e in events[2:]] == [
        ("MODIFIED", "a"),
        ("ADDED", "c"),
        ("ADDED", "d"),
        ("ADDED", "e"),
        ("DELETED", "b"),
    ]
    assert informer.resource_version == str(store.resource_version)
    assert sleeps.delays == [0.2]
    # And it keeps watching after the relist.
    store.create(NODES, node("f"))
    await eventually(lambda: ("", "f") in informer.items)


async def test_errors_back_off_with_bounds_and_never_end_the_loop(
    store: Store, running: Callable[[Any], asyncio.Task[None]], sleeps: Sleeps
) -> None:
    store.create(NODES, node("a"))
    plan = FaultPlan()
    plan.add(verb="list", resource=NODES, error=unavailable_error(), times=4)
    informer = Informer(
        MemoryClusterClient(store, faults=plan, bookmark_interval=60),
        NODES,
        sleep=sleeps,
        backoff=exact_backoff(),
    )

    def broken(_: InformerEvent) -> None:
        raise RuntimeError("a handler bug")

    informer.add_handler(broken)
    task = running(informer.run())
    await asyncio.wait_for(informer.wait_synced(), 5)
    assert sleeps.delays == [0.2, 0.4, 0.8, 1.0]  # doubling, capped at the maximum
    assert informer.errors == 4
    store.create(NODES, node("b"))  # the failing handler does not stop delivery
    await eventually(lambda: ("", "b") in informer.items)
    assert not task.done()


# --- ClusterCache ---------------------------------------------------------------------------------


async def test_cluster_cache_is_unsynced_until_every_informer_listed(
    store: Store, running: Callable[[Any], asyncio.Task[None]]
) -> None:
    install_volcano_crds(store)
    plan = FaultPlan()
    plan.add(verb="list", resource=QUEUES, delay=0.2)
    cache = ClusterCache(MemoryClusterClient(store, faults=plan, bookmark_interval=60))
    config = GuardConfig()
    assert not cache.snapshot(config).synced
    running(cache.run())
    await eventually(lambda: cache.nodes.synced and cache.podgroups.synced)
    assert not cache.synced and not cache.snapshot(config).synced
    await asyncio.wait_for(cache.wait_synced(), 5)
    assert cache.snapshot(config).synced


async def test_snapshot_is_reused_until_something_changes(
    store: Store, running: Callable[[Any], asyncio.Task[None]]
) -> None:
    install_volcano_crds(store)
    for i in range(3):
        store.create(NODES, node(f"n{i}"))
    store.create(QUEUES, queue("q", "8"))
    cache = ClusterCache(MemoryClusterClient(store, bookmark_interval=60))
    config = GuardConfig()
    running(cache.run())
    await asyncio.wait_for(cache.wait_synced(), 5)
    first = cache.snapshot(config)
    builds = cache.builds
    assert cache.snapshot(config) is first and cache.builds == builds
    assert sorted(first.nodes) == ["n0", "n1", "n2"] and sorted(first.queues) == ["q"]

    version = cache.version
    store.patch(
        NODES, "n2", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}, subresource="status"
    )
    await asyncio.wait_for(cache.wait_for_change(version), 5)
    second = cache.snapshot(config)
    assert second is not first and cache.builds == builds + 1
    assert not second.nodes["n2"].ready
    assert second.nodes["n0"] is first.nodes["n0"]  # unchanged nodes are not parsed again
    assert first.nodes["n2"].ready  # the earlier view is immutable

    other = GuardConfig()
    assert cache.snapshot(other) is not second  # a reloaded config rebuilds
    assert cache.snapshot(other).nodes["n0"] is not second.nodes["n0"]


async def test_an_unserved_resource_is_an_empty_synced_cache_until_its_crd_appears(
    store: Store, running: Callable[[Any], asyncio.Task[None]], sleeps: Sleeps
) -> None:
    # No Volcano CRDs: queues are not served (404). The cache must not stay unsynced forever.
    informer = Informer(
        MemoryClusterClient(store, bookmark_interval=60), QUEUES, sleep=sleeps, absent_recheck_seconds=7.0
    )
    running(informer.run())
    await asyncio.wait_for(informer.wait_synced(), 5)
    assert informer.items == {} and 7.0 in sleeps.delays
    install_volcano_crds(store)
    store.create(
        QUEUES,
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": "q"},
            "spec": {"weight": 1},
        },
    )
    await eventually(lambda: ("", "q") in informer.items)


async def test_the_cache_keeps_ledgers_decoded_once_not_their_raw_entries(
    store: Store, running: Callable[[Any], asyncio.Task[None]]
) -> None:
    text = resources.files("vgpu_guard").joinpath("data/crds/gpuledgers.vgpu-guard.io.yaml").read_text()
    store.create(CRDS, yaml.safe_load(text))
    entry = Allocation("u", "ns", "p", "default", (ContainerGrant(0, "c", (DeviceGrant("GPU-0", 1024, 5),)),))
    store.create(LEDGERS, encode_ledger(NodeLedger(node="n0", allocations={"u": entry})))
    cache = ClusterCache(MemoryClusterClient(store, bookmark_interval=60))
    running(cache.run())
    await asyncio.wait_for(cache.wait_synced(), 5)
    cached = cache.snapshot(GuardConfig()).ledgers["n0"]
    assert "allocations" not in cached["spec"]
    decoded = decode_ledger(cached)
    assert (
        decoded.allocations == {"u": entry}
        and decoded.resource_version == cached["metadata"]["resourceVersion"]
    )
    assert decode_ledger(cached) is decoded  # read again, not parsed again


async def test_a_ledger_write_rebuilds_only_the_ledgers_part_of_the_view(
    store: Store, running: Callable[[Any], asyncio.Task[None]]
) -> None:
    """Our own ledger write, once per pass, must not cost a pass a copy of every node: an unchanged
    part is the same mapping (World skips comparing nodes on that identity)."""
    text = resources.files("vgpu_guard").joinpath("data/crds/gpuledgers.vgpu-guard.io.yaml").read_text()
    store.create(CRDS, yaml.safe_load(text))
    store.create(NODES, node("n0"))
    cache = ClusterCache(MemoryClusterClient(store, bookmark_interval=60))
    running(cache.run())
    await asyncio.wait_for(cache.wait_synced(), 5)
    config = GuardConfig()
    first = cache.snapshot(config)
    version = cache.version
    store.create(LEDGERS, encode_ledger(NodeLedger(node="n0", allocations={})))
    await asyncio.wait_for(cache.wait_for_change(version), 5)
    second = cache.snapshot(config)
    assert second is not first and second.nodes is first.nodes and second.queues is first.queues
    # Every part is the cache's state when the view was built, however late it is read.
    assert "n0" in second.ledgers and "n0" not in first.ledgers


@pytest.mark.parametrize("slice_seconds", [0.0, None])
async def test_a_burst_of_watch_events_gives_the_loop_back_between_slices(
    store: Store, running: Callable[[Any], asyncio.Task[None]], slice_seconds: float | None
) -> None:
    """Events the watch has buffered come without a suspension; handled in one go they would hold
    the event loop, and every admission review waiting on it, for the whole burst. Another task
    gets the loop in the middle of a burst: after every event with a slice of 0, and with the
    default slice when each event's handling takes longer than it (2 ms here)."""
    informer = Informer(MemoryClusterClient(store, bookmark_interval=60), NODES)
    if slice_seconds is not None:
        informer.event_slice_seconds = slice_seconds
    seen: list[str] = []

    def handle(event: InformerEvent) -> None:
        if slice_seconds is None:
            time.sleep(0.002)
        seen.append(event.object["metadata"]["name"])

    informer.add_handler(handle)
    running(informer.run())
    await asyncio.wait_for(informer.wait_synced(), 5)
    burst = 40
    for i in range(burst):
        store.create(NODES, node(f"n{i}"))
    observed: set[int] = set()

    async def watch_progress() -> None:
        while len(seen) < burst:
            observed.add(len(seen))
            await asyncio.sleep(0)

    await asyncio.wait_for(watch_progress(), 10)
    assert observed & set(range(1, burst)), observed  # it ran while the burst was being handled
