"""FaultPlan: the API misbehaving on purpose, for the controller's "faults of the API" tests."""

from __future__ import annotations

import asyncio

import pytest

from tests.apidouble_support.faults import (
    FaultPlan,
    conflict_error,
    expired_error,
    timeout_error,
    unavailable_error,
)
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.apidouble.store import Store
from vgpu_guard.kube.errors import Conflict, Expired, Unavailable
from vgpu_guard.kube.resources import NODES, PODS

from .objects import node, pod


async def test_injected_conflicts_hit_the_named_verb_and_resource_only(store: Store) -> None:
    plan = FaultPlan()
    plan.add(verb="create", resource=PODS, error=conflict_error("p"), times=2)
    c = MemoryClusterClient(store, faults=plan)
    await c.create(NODES, node("n1"))  # another resource: untouched
    for _ in range(2):
        with pytest.raises(Conflict):
            await c.create(PODS, pod("p"))
    await c.create(PODS, pod("p"))  # the third attempt goes through
    assert plan.log == [("create", "pods"), ("create", "pods")]


async def test_after_faults_apply_the_write_and_lose_the_answer(store: Store) -> None:
    plan = FaultPlan()
    plan.add(verb="bind", when="after", error=unavailable_error())
    c = MemoryClusterClient(store, faults=plan)
    await c.create(PODS, pod("p"))
    with pytest.raises(Unavailable):
        await c.bind("default", "p", node="n1", annotations={"a": "b"})
    assert (await c.get(PODS, "p", namespace="default"))["spec"]["nodeName"] == "n1"
    with pytest.raises(Conflict, match="already assigned"):
        await c.bind("default", "p", node="n1", annotations={})


async def test_slow_calls_and_timeouts(store: Store) -> None:
    plan = FaultPlan()
    plan.add(verb="get", delay=0.2, error=timeout_error())
    c = MemoryClusterClient(store, faults=plan)
    await c.create(PODS, pod("p"))
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(Unavailable, match="timed out"):
        await c.get(PODS, "p", namespace="default")
    assert loop.time() - began >= 0.2
    with pytest.raises(TimeoutError):
        plan.add(verb="list", delay=5)
        await asyncio.wait_for(c.list(PODS), 0.05)


async def test_dropped_and_expired_watches(store: Store) -> None:
    plan = FaultPlan()
    plan.add(verb="watch", drop_after=1)
    plan.add(verb="watch", error=expired_error("5"))
    c = MemoryClusterClient(store, faults=plan)
    rv = str(store.resource_version)
    await c.create(PODS, pod("a"))
    await c.create(PODS, pod("b"))
    got = [ev.type async for ev in c.watch(PODS, resource_version=rv, timeout_seconds=2)]
    assert got == ["ADDED"]  # the stream ended after one event, like a server closing it
    with pytest.raises(Expired):
        async for _ in c.watch(PODS, resource_version=rv):
            pass


def test_a_rule_needs_an_effect() -> None:
    with pytest.raises(ValueError, match="needs an error, a delay or drop_after"):
        FaultPlan().add(verb="get")
