"""``ClusterCache`` views that change by the change (issue 44): nodes parsed in their events, a
heartbeat that changes nothing decisions read leaves the view's nodes as they were, fleet facts
counted as nodes come and go, one node's ledger read without the others, views that never change
after they are handed out.

Real store semantics (``MemoryClusterClient`` over ``vgpu_guard.apidouble.store.Store``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from functools import partial
from importlib import resources
from typing import Any

import pytest
import yaml

from tests.builders import A30, default_config
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.apidouble.store import Store
from vgpu_guard.engine.cluster import FleetFacts, NodeInfo
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.ledger import NodeLedger, encode_ledger
from vgpu_guard.kube import view_cache
from vgpu_guard.kube.resources import CRDS, LEDGERS, NODES
from vgpu_guard.kube.view_cache import ClusterCache

Obj = dict[str, Any]
CONFIG = default_config()


def gpu_node(
    name: str, *, memory: int = 81920, mode: str = "hami-core", labels: dict[str, str] | None = None
) -> Obj:
    model = A30 if mode == "mig" else "NVIDIA-NVIDIA H100 80GB HBM3"
    records = "".join(f"GPU-{name}-{i},10,{memory},{model},true,{mode}:" for i in range(2))
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": dict(labels or {}),
            "annotations": {"volcano.sh/node-vgpu-register": records},
        },
        "status": {
            "allocatable": {
                "cpu": "8",
                "volcano.sh/vgpu-number": "20",
                "volcano.sh/vgpu-memory": str(2 * memory),
                "volcano.sh/vgpu-cores": "200",
            },
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-11-28T10:00:00Z"}],
        },
    }


def heartbeat(at: str) -> Obj:
    return {"status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": at}]}}


@pytest.fixture
def store() -> Store:
    store = Store(seed=1)
    text = resources.files("vgpu_guard").joinpath("data/crds/gpuledgers.vgpu-guard.io.yaml").read_text()
    store.create(CRDS, yaml.safe_load(text))
    return store


@pytest.fixture
async def cache(store: Store) -> AsyncIterator[ClusterCache]:
    cache = ClusterCache(MemoryClusterClient(store, bookmark_interval=60))
    task = asyncio.create_task(cache.run())
    await asyncio.wait_for(cache.wait_synced(), 5)
    yield cache
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def changed(cache: ClusterCache, write: Callable[[], object]) -> None:
    version = cache.version
    write()
    await asyncio.wait_for(cache.wait_for_change(version), 5)


def facts_fields(facts: FleetFacts) -> tuple[object, ...]:
    return (
        facts.gpu_node_count,
        facts.offered_modes,
        facts.max_gpus_per_node,
        facts.largest_card_memory,
        facts.mig_card_types,
        facts.label_keys,
        facts.gpu_nodes,
    )


async def test_a_heartbeat_leaves_the_nodes_part_and_its_facts_as_they_were(
    store: Store, cache: ClusterCache
) -> None:
    for i in range(3):
        await changed(cache, partial(store.create, NODES, gpu_node(f"n{i}")))
    first = cache.snapshot(CONFIG)
    largest = first.largest_card_memory
    await changed(
        cache, lambda: store.patch(NODES, "n1", heartbeat("2026-11-28T10:00:10Z"), subresource="status")
    )
    second = cache.snapshot(CONFIG)
    assert second is not first  # a new resourceVersion is a new view
    assert (
        second.nodes is first.nodes and second.facts is first.facts and second.largest_card_memory == largest
    )


async def test_a_real_change_replaces_that_node_only_and_old_views_stay_as_they_were(
    store: Store, cache: ClusterCache
) -> None:
    for i in range(3):
        await changed(cache, partial(store.create, NODES, gpu_node(f"n{i}")))
    first = cache.snapshot(CONFIG)
    await changed(
        cache,
        lambda: store.patch(
            NODES,
            "n2",
            {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
            subresource="status",
        ),
    )
    second = cache.snapshot(CONFIG)
    assert not second.nodes["n2"].ready and first.nodes["n2"].ready
    assert second.nodes["n0"] is first.nodes["n0"] and second.nodes["n1"] is first.nodes["n1"]
    await changed(cache, lambda: store.delete(NODES, "n0"))
    third = cache.snapshot(CONFIG)
    assert sorted(third.nodes) == ["n1", "n2"] and sorted(second.nodes) == ["n0", "n1", "n2"]
    assert third.facts.gpu_node_count == 2 and second.facts.gpu_node_count == 3


async def test_nodes_are_parsed_in_their_events_not_when_a_view_is_built(
    store: Store, cache: ClusterCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache.snapshot(CONFIG)  # the config is known: every event parses from now on
    parsed: list[str] = []
    real = view_cache.node_info  # type: ignore[attr-defined]

    def counting(obj: Obj, config: GuardConfig) -> NodeInfo:
        parsed.append(obj["metadata"]["name"])
        return real(obj, config)

    monkeypatch.setattr(view_cache, "node_info", counting)
    await changed(cache, lambda: store.create(NODES, gpu_node("n0")))
    await changed(
        cache, lambda: store.patch(NODES, "n0", heartbeat("2026-11-28T10:00:10Z"), subresource="status")
    )
    assert parsed == ["n0", "n0"]  # once per resourceVersion
    view = cache.snapshot(CONFIG)
    assert parsed == ["n0", "n0"] and view.nodes["n0"].vgpu_capable
    assert cache.snapshot(GuardConfig()).nodes["n0"] is not view.nodes["n0"]  # a new config parses again
    assert parsed == ["n0", "n0", "n0"]


async def test_fleet_facts_follow_adds_changes_and_deletes_as_computed_from_scratch(
    store: Store, cache: ClusterCache
) -> None:
    cache.snapshot(CONFIG)
    steps: list[Callable[[], object]] = [
        lambda: store.create(NODES, gpu_node("a", memory=40960, labels={"zone": "z1"})),
        lambda: store.create(NODES, gpu_node("b", memory=81920, mode="mig")),
        lambda: store.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cpu"}}),
        lambda: store.patch(NODES, "a", {"metadata": {"labels": {"zone": None, "autoscaler": "yes"}}}),
        lambda: store.delete(NODES, "b"),
        lambda: store.patch(
            NODES, "a", {"metadata": {"annotations": {"volcano.sh/node-vgpu-register": "bad"}}}
        ),
        lambda: store.create(NODES, gpu_node("c", memory=24576)),
    ]
    for step in steps:
        await changed(cache, step)
        view = cache.snapshot(CONFIG)
        assert view.fleet is view.facts  # the cache's counts, not a walk over the nodes
        assert facts_fields(view.facts) == facts_fields(FleetFacts.of(view.nodes))
    assert view.largest_card_memory == 24576 and view.any_node_labelled(("autoscaler",))
    assert not view.any_node_labelled(("zone",)) and view.mig_card_types == ()


async def test_one_nodes_ledger_is_read_without_the_others(store: Store, cache: ClusterCache) -> None:
    await changed(cache, lambda: store.create(LEDGERS, encode_ledger(NodeLedger(node="n0"))))
    before = cache.snapshot(CONFIG)
    await changed(cache, lambda: store.create(LEDGERS, encode_ledger(NodeLedger(node="n1"))))
    view = cache.snapshot(CONFIG)
    n1 = view.ledger("n1")
    assert n1 is not None and n1["metadata"]["name"] == "n1"
    assert n1 is cache.ledger("n1")
    assert view.ledger("n9") is None and before.ledger("n1") is None
    assert view.ledgers["n0"] is before.ledgers["n0"]  # decoded once, shared by the views
