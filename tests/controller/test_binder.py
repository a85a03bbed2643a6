"""The Binder: one binding in flight per node, the next one the moment the plugin's handshake ends."""

from __future__ import annotations

import asyncio
from typing import Any

from vgpu_guard.controller.binder import DONE_TTL_SECONDS, Binder, Waiting
from vgpu_guard.engine.ledger import Allocation
from vgpu_guard.kube.backoff import Backoff
from vgpu_guard.kube.errors import Unavailable


def entry(uid: str, at: int) -> Waiting:
    pod = {"metadata": {"uid": uid, "name": uid, "namespace": "default"}, "spec": {}}
    return Waiting(Allocation(uid, "default", uid, "q", (), reserved_at=at, committed=True), pod)


def pod(uid: str, node: str, phase: str) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "annotations": {"volcano.sh/bind-phase": phase}},
        "spec": {"nodeName": node},
        "status": {"phase": "Pending"},
    }


class Server:
    def __init__(self, fail: set[str] | None = None) -> None:
        self.bound: list[tuple[str, str]] = []
        self.fail = fail or set()

    async def bind(self, node: str, allocation: Allocation, _pod: dict[str, Any]) -> bool:
        await asyncio.sleep(0)
        if allocation.pod_uid in self.fail:
            self.fail.discard(allocation.pod_uid)
            raise Unavailable("injected")
        self.bound.append((node, allocation.pod_uid))
        return True


async def test_one_per_node_oldest_first_next_on_confirmation() -> None:
    server = Server()
    binder = Binder(server.bind)
    binder.offer({"n1": [entry("b", 2), entry("a", 1)], "n2": [entry("c", 5)]}, busy={})
    await binder.drain()
    assert sorted(server.bound) == [("n1", "a"), ("n2", "c")]
    binder.observe(pod("a", "n1", "allocating"))  # still in the handshake
    await binder.drain()
    assert len(server.bound) == 2
    binder.observe(pod("a", "n1", "success"))
    await binder.drain()
    assert server.bound[-1] == ("n1", "b")


async def test_a_node_busy_in_the_pass_waits_for_that_pod() -> None:
    server = Server()
    binder = Binder(server.bind)
    binder.offer({"n1": [entry("a", 1)]}, busy={"n1": "old"})
    await binder.drain()
    assert server.bound == []
    binder.observe(pod("other", "n1", "success"))  # not the pod the node waits for
    await binder.drain()
    assert server.bound == []
    binder.observe(pod("old", "n1", "failed"))
    await binder.drain()
    assert server.bound == [("n1", "a")]


async def test_a_pass_that_shows_the_node_free_frees_it() -> None:
    server = Server()
    binder = Binder(server.bind)
    binder.offer({"n1": [entry("a", 1), entry("b", 2)]}, busy={})
    await binder.drain()
    binder.offer({}, busy={})  # the pass read the confirmation the informer has not delivered
    await binder.drain()
    assert server.bound == [("n1", "a"), ("n1", "b")]


async def test_bound_entries_are_not_offered_again_and_failures_ask_for_a_retry() -> None:
    server = Server(fail={"a"})
    binder = Binder(server.bind)
    retried = asyncio.Event()
    binder.retry = retried.set
    binder.offer({"n1": [entry("a", 1)]}, busy={})
    await binder.drain()
    assert server.bound == [] and binder.failures and "binding default/a to n1" in binder.failures[0]
    await asyncio.wait_for(retried.wait(), 2)
    binder.offer({"n1": [entry("a", 1)]}, busy={})
    await binder.drain()
    assert server.bound == [("n1", "a")]
    binder.offer({"n1": [entry("a", 1)]}, busy={})  # a pass that read before the binding landed
    await binder.drain()
    assert server.bound == [("n1", "a")]


async def test_a_nodes_failing_bindings_never_slow_another_nodes_retry() -> None:
    """The retry delay is keyed by node (client-go's per-item rate limiter): three failures on n1
    leave n2's first failure at the first delay, a success on n1 starts it over, a node that is
    gone leaves nothing behind."""
    server = Server(fail={"a1", "a2", "a3", "b1"})
    backoff = Backoff(initial=0.01, maximum=1.0, jitter=0.0)
    binder = Binder(server.bind, backoff=backoff)
    binder.retry = lambda: None  # the run loop's wake
    for uid in ("a1", "a2", "a3"):
        binder.offer({"n1": [entry(uid, 1)]}, busy={})
        await binder.drain()
    binder.offer({"n2": [entry("b1", 1)]}, busy={})
    await binder.drain()
    assert (backoff.attempts("n1"), backoff.attempts("n2")) == (3, 1)
    binder.offer({"n1": [entry("a4", 2)]}, busy={})
    await binder.drain()
    assert server.bound == [("n1", "a4")]
    assert (backoff.attempts("n1"), backoff.attempts("n2")) == (0, 1)
    binder.forget_node("n2")
    assert backoff.failing() == 0


async def test_recent_bindings_are_remembered_for_the_ttl_then_forgotten() -> None:
    # A pass that read before a binding landed must not offer it again; after DONE_TTL_SECONDS the
    # UID is forgotten (oldest first), so the memory stays bounded by the binding rate.
    now = [0.0]
    server = Server()
    binder = Binder(server.bind, clock=lambda: now[0])
    for i in range(3):
        now[0] = float(i)
        binder.offer({f"n{i}": [entry(f"u{i}", i)]}, busy={})
        await binder.drain()
    binder.offer({"n9": [entry("u0", 0)]}, busy={})  # within the TTL: not bound twice
    await binder.drain()
    assert [uid for _, uid in server.bound] == ["u0", "u1", "u2"]
    now[0] = 1.5 + DONE_TTL_SECONDS  # u0 and u1 are older than the TTL when the next one binds
    binder.offer({"n3": [entry("u3", 3)]}, busy={})
    await binder.drain()
    assert list(binder._done) == ["u2", "u3"]
