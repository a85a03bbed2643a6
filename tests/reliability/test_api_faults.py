"""Faults of the API against the real controller loop: it converges, nothing lost or double-allocated.

Each case runs ``run_controller`` (watches, Lease, settle) as a task over the seed-000 shape (one
node, 8 x 24 GiB cards, 7 held by pods bound before vgpu-guard; three 12 GiB pods for the one free
card) on the in-process API double, with a ``FaultPlan`` for one fault family: 409s, 5xx before the
call, writes that land with the answer lost ("after"), client timeouts, slow responses, dropped
watch streams, 410 Gone on every re-watch, and a split brain (two replicas that both believe they
lead, racing on slow API calls). The device plugin stand-in (``confirm_allocations``) confirms
bindings as the test polls the store. The resync period is 30 s, beyond every deadline, so the
controller only moves when a watch wakes it: a broken watch loop cannot hide behind the resync.

Converged means, in the store: every GPU within capacity in every GPULedger, each bound vGPU pod
with exactly one ledger entry, no entry without a live pod, web-0 and web-1 bound and confirmed,
web-2 ``PodScheduled=False``. Each case has 10 s (they take 0.1-2 s).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tests.apidouble_support.faults import (
    FaultPlan,
    conflict_error,
    expired_error,
    timeout_error,
    unavailable_error,
)
from tests.controller.allocation_testkit import Cluster, seed_000, vgpu_pod
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.cli.simulation import confirm_allocations
from vgpu_guard.controller.run import run_controller
from vgpu_guard.kube.resources import LEASES, LEDGERS, NODES, PODS

DEADLINE = 10.0
VGPU_PREFIX = "volcano.sh/vgpu-"


# --- fault families ------------------------------------------------------------------------------


def conflicts(plan: FaultPlan) -> None:
    plan.add(verb="create", resource=LEDGERS, error=conflict_error("gpu-0"), times=1)
    plan.add(verb="replace", resource=LEDGERS, error=conflict_error("gpu-0"), times=3)
    plan.add(verb="bind", error=conflict_error("web-0"), times=1)
    plan.add(verb="replace", resource=LEASES, error=conflict_error("lease"), times=2)


def server_errors(plan: FaultPlan) -> None:
    plan.add(verb="list", resource=PODS, error=unavailable_error(), times=3)
    plan.add(verb="list", resource=LEDGERS, error=unavailable_error(), times=2)
    plan.add(verb="create", resource=LEDGERS, error=unavailable_error(), times=1)
    plan.add(verb="replace", resource=LEDGERS, error=unavailable_error(), times=2)
    plan.add(verb="bind", error=unavailable_error(), times=2)
    plan.add(verb="patch", resource=PODS, error=unavailable_error(), times=2)
    plan.add(verb="get", resource=LEASES, error=unavailable_error(), times=2)


def lost_answers(plan: FaultPlan) -> None:
    """Every write lands, and its answer is lost (a 503 after the store applied it)."""
    plan.add(verb="create", resource=LEDGERS, error=unavailable_error(), when="after", times=1)
    plan.add(verb="replace", resource=LEDGERS, error=unavailable_error(), when="after", times=3)
    plan.add(verb="bind", error=unavailable_error(), when="after", times=2)
    plan.add(verb="patch", resource=PODS, error=unavailable_error(), when="after", times=2)
    plan.add(verb="create", resource=LEASES, error=unavailable_error(), when="after", times=1)
    plan.add(verb="replace", resource=LEASES, error=unavailable_error(), when="after", times=2)


def timeouts(plan: FaultPlan) -> None:
    """Client-side timeouts after a slow call; half of them after the write landed."""
    slow = 0.05
    plan.add(verb="list", resource=PODS, error=timeout_error(), delay=slow, times=2)
    plan.add(verb="create", resource=LEDGERS, error=timeout_error(), when="after", delay=slow, times=1)
    plan.add(verb="replace", resource=LEDGERS, error=timeout_error(), delay=slow, times=1)
    plan.add(verb="replace", resource=LEDGERS, error=timeout_error(), when="after", delay=slow, times=1)
    plan.add(verb="bind", error=timeout_error(), when="after", delay=slow, times=1)
    plan.add(verb="bind", error=timeout_error(), delay=slow, times=1)
    plan.add(verb="watch", error=timeout_error(), delay=slow, times=3)


def slow_responses(plan: FaultPlan) -> None:
    plan.add(delay=0.02, times=None)  # every call, every resource


def dropped_watches(plan: FaultPlan) -> None:
    plan.add(verb="watch", drop_after=1, times=None)  # every stream ends after its first event


def gone(plan: FaultPlan) -> None:
    """Every re-watch of pods answers 410 for a while, as after an etcd compaction."""
    plan.add(verb="watch", resource=PODS, drop_after=1, times=2)
    plan.add(verb="watch", resource=PODS, error=expired_error(), times=GONE_TIMES)


GONE_TIMES = 6
FAMILIES: dict[str, Callable[[FaultPlan], None]] = {
    "409-conflicts": conflicts,
    "5xx-before": server_errors,
    "lost-answers-after": lost_answers,
    "timeouts": timeouts,
    "slow-responses": slow_responses,
    "dropped-watches": dropped_watches,
    "410-gone": gone,
}


# --- the check -----------------------------------------------------------------------------------


def _is_vgpu(pod: dict[str, Any]) -> bool:
    for container in pod["spec"].get("containers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        if any(k.startswith(VGPU_PREFIX) for k in limits):
            return True
    return False


def problems(cluster: Cluster) -> list[str]:
    """Safety, at any moment: capacity in every ledger; entries match live bound pods one to one."""
    out = [f"invariant: {v}" for v in cluster.violations()]
    entries: Counter[str] = Counter()
    for ledger in cluster.ledgers().values():
        for entry in ledger.allocations.values():
            entries[entry.pod_uid] += 1
    live = {p["metadata"]["uid"]: p for p in cluster.pods()}
    for pod in live.values():
        if pod["spec"].get("nodeName") and _is_vgpu(pod):
            n = entries.get(pod["metadata"]["uid"], 0)
            if n != 1:
                out.append(f"bound pod {pod['metadata']['name']} has {n} ledger entries")
    out.extend(f"entry of pod uid {uid} that does not exist" for uid in entries if uid not in live)
    return out


def converged(cluster: Cluster) -> bool:
    bound = cluster.bound()
    if sorted(n for n in bound if n.startswith("web")) != ["web-0", "web-1"]:
        return False
    for name in ("web-0", "web-1"):
        if (cluster.pod(name)["metadata"].get("annotations") or {}).get("volcano.sh/bind-phase") != "success":
            return False
    condition = cluster.condition("web-2")
    if condition is None or condition.get("status") != "False":
        return False
    return not problems(cluster)


# --- the run -------------------------------------------------------------------------------------


class AlwaysLeads:
    """A split brain: this replica believes it leads whatever the Lease says."""

    leading = True
    lease_duration = 15
    namespace, name, holder, error = "default", "vgpu-guard-controller", "", None

    async def try_acquire_or_renew(self) -> bool:
        await asyncio.sleep(0)
        return True

    async def release(self) -> None:
        return None


@dataclass
class Outcome:
    seconds: float
    polls: int
    confirmed: int
    hits: int
    unsafe: list[str] = field(default_factory=list)


async def drive(cluster: Cluster, replicas: list[tuple[str, FaultPlan, Any]]) -> Outcome:
    tasks = []
    for identity, plan, elector in replicas:
        client = MemoryClusterClient(cluster.store, faults=plan, bookmark_interval=60.0)
        tasks.append(
            asyncio.create_task(
                run_controller(
                    client,
                    cluster.config,
                    identity=identity,
                    registry=CollectorRegistry(),
                    lease_namespace="default",
                    resync_seconds=30.0,  # beyond the deadline: only the watches wake the loop
                    retry_seconds=0.05,
                    elector=elector,
                ),
                name=f"controller-{identity}",
            )
        )
    started = time.monotonic()
    polls = confirmed = 0
    unsafe: list[str] = []
    try:
        for i in range(3):
            cluster.create_pod(vgpu_pod(f"web-{i}", memory=12288))
            await asyncio.sleep(0.01)
        while time.monotonic() - started < DEADLINE:
            await asyncio.sleep(0.01)
            polls += 1
            # Capacity and one-entry-per-bound-pod hold at every observed state, not only at the end.
            # (The busy pods were bound before vgpu-guard: no entry until the first pass adopts them.)
            unsafe.extend(p for p in problems(cluster) if not p.startswith("bound pod busy-"))
            confirmed += confirm_allocations(cluster.store)
            if converged(cluster):
                break
            for task in tasks:
                if task.done():
                    task.result()  # the loop must never end on its own
                    raise AssertionError(f"{task.get_name()} ended")
    finally:
        for task in tasks:
            task.cancel()
        # Shutdown must be clean: a loop that swallows its cancellation (asyncio.wait_for on 3.11
        # could, in the controller's wait and in the double's watch) would hang a real process.
        _, pending = await asyncio.wait(tasks, timeout=5.0)
        assert not pending, f"still running after cancel: {[t.get_name() for t in pending]}"
    hits = sum(r.hits for _, plan, _ in replicas for r in plan.rules)
    return Outcome(time.monotonic() - started, polls, confirmed, hits, unsafe)


def assert_converged(cluster: Cluster, outcome: Outcome) -> None:
    assert converged(cluster), (
        f"not converged in {DEADLINE} s: bound={cluster.bound()}, problems={problems(cluster)}, "
        f"web-2 condition={cluster.condition('web-2')}"
    )
    assert outcome.unsafe == []
    assert len(cluster.ledgers()["gpu-0"].allocations) == 9


class TimedPlan(FaultPlan):
    """Notes when each injected error is handed out (the 410s must come back to back)."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []
        self.pod_calls: list[tuple[str, bool]] = []  # (verb, failed with 410) of every pods call

    def take(self, verb: str, resource: Any) -> Any:
        rule = super().take(verb, resource)
        if rule is not None and rule.error is not None:
            self.times.append(time.monotonic())
        if resource is PODS:
            self.pod_calls.append((verb, rule is not None and rule.error is not None and verb == "watch"))
        return rule


@pytest.mark.parametrize("family", sorted(FAMILIES))
async def test_controller_converges_under_api_faults(
    family: str, reliability_report: Callable[[str], None]
) -> None:
    cluster = seed_000()
    plan = TimedPlan()
    FAMILIES[family](plan)
    outcome = await drive(cluster, [("main", plan, None)])
    assert_converged(cluster, outcome)
    assert outcome.hits > 0, "no fault was injected"
    if family == "410-gone":
        # client-go's reflector: a 410 is answered by a relist, never by watching the old version
        # again (a fresh list's version that expires again before its watch brings anything is
        # backed off, so a server that keeps answering 410 is not hammered).
        reads = [call for call in plan.pod_calls if call[0] in ("list", "watch")]
        gone_at = [i for i, (_, expired) in enumerate(reads) if expired]
        assert gone_at, "no 410 was handed out"
        for i in gone_at:
            assert reads[i + 1 : i + 2] in ([], [("list", False)]), reads
    reliability_report(
        f"API faults {family}: converged in {outcome.seconds:.2f} s, {outcome.hits} faults injected, "
        f"{outcome.confirmed} confirmations, 2/3 bound, 0 overcommitted GPUs, 0 lost or duplicated entries"
    )


async def test_split_brain_replicas_on_slow_api_do_not_double_allocate(
    reliability_report: Callable[[str], None],
) -> None:
    """Two replicas that both lead (Lease unreachable), one slow to write, one slow to list pods.

    The slow writer decides on an old pod list while the other binds from a newer one; only the
    ledger's resourceVersion precondition keeps the slow write from overwriting the other's entries.
    """
    runs = 0
    for writer_delay in (0.02, 0.05, 0.1):
        cluster = seed_000()
        a, b = FaultPlan(), FaultPlan()
        a.add(verb="replace", resource=LEDGERS, delay=writer_delay, times=None)
        a.add(verb="create", resource=LEDGERS, delay=writer_delay, times=None)
        b.add(verb="list", resource=PODS, delay=writer_delay / 2, times=None)
        b.add(verb="list", resource=NODES, delay=0.005, times=None)
        outcome = await drive(cluster, [("a", a, AlwaysLeads()), ("b", b, AlwaysLeads())])
        assert_converged(cluster, outcome)
        runs += 1
    reliability_report(
        f"API faults split-brain: {runs} runs of two leading replicas on slow writes/lists converged, "
        "2/3 bound, 0 overcommitted GPUs, 0 lost or duplicated entries"
    )
