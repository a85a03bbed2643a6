"""The allocation controller against the API double: seed 000, gangs, release, adoption, crashes."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tests.apidouble_support.faults import FaultPlan, conflict_error, unavailable_error
from tests.controller.allocation_testkit import Cluster, FakeClock, gpu_node, seed_000, vgpu_pod
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.controller.allocation import AllocationController
from vgpu_guard.controller.leader import LeaderElector
from vgpu_guard.controller.run import run_controller
from vgpu_guard.kube.resources import LEDGERS, NODES, PODGROUPS, PODS, Resource

MIB = 1024 * 1024  # the GPU memory gauges are in bytes, the ledger in MiB

PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False)

SEED_000_MESSAGE = "0/1 nodes are available: 8 GPUs have no free memory (12288 MiB requested)"


async def test_seed_000_two_bound_to_the_free_gpu_third_pending_with_the_reason() -> None:
    cluster = seed_000()
    controller = cluster.replica()
    for i in range(3):
        cluster.create_pod(vgpu_pod(f"web-{i}", memory=12288))
    await cluster.converge(controller)
    bound = {name: node for name, node in cluster.bound().items() if name.startswith("web")}
    assert sorted(bound) == ["web-0", "web-1"]
    for name in bound:
        notes = cluster.pod(name)["metadata"]["annotations"]
        assert notes["volcano.sh/vgpu-ids-new"] == "GPU-gpu-0-7,NVIDIA,12288,0:"
        assert notes["volcano.sh/devices-to-allocate"] == "GPU-gpu-0-7,NVIDIA,12288,0:"
        assert notes["volcano.sh/vgpu-node"] == "gpu-0"
    condition = cluster.condition("web-2")
    assert condition is not None
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False",
        "Unschedulable",
        SEED_000_MESSAGE,
    )
    assert [e["message"] for e in cluster.events("FailedScheduling")] == [SEED_000_MESSAGE]
    assert cluster.violations() == []
    ledger = cluster.ledgers()["gpu-0"]
    assert len(ledger.allocations) == 9
    # Nothing changes on further passes: the message is not re-posted, no second event.
    await cluster.converge(controller)
    assert len(cluster.events("FailedScheduling")) == 1


async def test_pending_pod_is_retried_when_the_ledger_frees_up() -> None:
    cluster = seed_000()
    controller = cluster.replica()
    for i in range(3):
        cluster.create_pod(vgpu_pod(f"web-{i}", memory=12288))
    await cluster.converge(controller)
    cluster.finish_pod("web-0")
    await cluster.converge(controller)
    assert "web-2" in cluster.bound()
    assert cluster.violations() == []
    assert cluster.events("Scheduled")


async def test_at_most_one_pod_per_node_is_allocating() -> None:
    cluster = Cluster([gpu_node("a", 2)])
    controller = cluster.replica()
    for i in range(2):
        cluster.create_pod(vgpu_pod(f"p{i}", memory=1000))
    await controller.settle()
    assert len(cluster.bound()) == 1  # the second waits for the plugin to confirm the first
    cluster.plugin()
    await controller.settle()
    assert len(cluster.bound()) == 2


async def test_allocating_timeout_releases_the_node_and_says_so() -> None:
    cluster = Cluster([gpu_node("a", 2)])
    controller = cluster.replica()
    cluster.create_pod(vgpu_pod("p0", memory=1000))
    cluster.create_pod(vgpu_pod("p1", memory=1000))
    await controller.settle()
    assert len(cluster.bound()) == 1
    cluster.clock.advance(cluster.config.scheduling.allocating_timeout_seconds + 1)
    await controller.settle()
    assert len(cluster.bound()) == 2
    [event] = cluster.events("AllocationTimeout")
    assert "has not confirmed the GPU assignment within 120s" in event["message"]


async def _bound_then_bind_time(bind_time: str | None = None) -> tuple[Cluster, AllocationController]:
    """Two pods for one node: the first bound (its node waits for the plugin), then its bind-time set."""
    cluster = Cluster([gpu_node("a", 2)])
    controller = cluster.replica()
    cluster.create_pod(vgpu_pod("p0", memory=1000))
    cluster.create_pod(vgpu_pod("p1", memory=1000))
    await controller.settle()
    [bound] = cluster.bound()
    stamp = bind_time if bind_time is not None else str(int(cluster.clock()) + 60)
    notes = {"metadata": {"annotations": {"volcano.sh/bind-time": stamp}}}
    cluster.store.patch(PODS, bound, notes, namespace="default")
    return cluster, controller


@pytest.mark.parametrize("bind_time", ["\u00b2", "9" * 5000, "soon"])
async def test_an_unreadable_bind_time_counts_as_timed_out_and_never_stops_a_pass(bind_time: str) -> None:
    # Anyone who may update the pod can write this annotation; a pass must never raise on it.
    cluster, controller = await _bound_then_bind_time(bind_time)
    results = await controller.settle()
    assert not any(r.errors for r in results)
    assert len(cluster.bound()) == 2  # read as time 0: long past the timeout, the node is free again


async def test_a_bind_time_from_the_future_counts_as_timed_out_and_says_why() -> None:
    """Issue 36: bind-time 9999999999 kept its node busy for ever (now - bind_time stayed negative)."""
    cluster, controller = await _bound_then_bind_time("9999999999")
    await controller.settle()
    assert len(cluster.bound()) == 2
    [event] = cluster.events("AllocationTimeout")
    ahead = 9999999999 - int(cluster.clock())
    assert event["message"].startswith(
        f"its volcano.sh/bind-time 9999999999 is {ahead}s ahead of this controller's clock (more than the 60s "
        "skew allowed), so it counts as timed out; node a is released for the next pod"
    )


async def test_a_bind_time_within_the_clock_skew_still_holds_its_node() -> None:
    cluster, controller = await _bound_then_bind_time()  # 60 s ahead: within the skew allowed
    await controller.settle()
    assert len(cluster.bound()) == 1


async def test_gang_of_four_with_room_for_three_binds_none() -> None:
    cluster = Cluster([gpu_node("a", 3)])
    cluster.store.create(
        PODGROUPS,
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "job", "namespace": "default"},
            "spec": {"minMember": 4},
        },
        namespace="default",
    )
    controller = cluster.replica()
    for i in range(4):
        cluster.create_pod(
            vgpu_pod(f"w{i}", memory=24576, annotations={"scheduling.k8s.io/group-name": "job"})
        )
    await cluster.converge(controller)
    assert cluster.bound() == {}
    assert cluster.ledgers().get("a") is None or cluster.ledgers()["a"].allocations == {}
    condition = cluster.condition("w0")
    assert condition is not None
    assert condition["message"].startswith(
        "gang default/job: only 3 of 4 members can run (minMember 4); "
        "w3, judged on what would remain once w0, w1, w2 are placed: "
    )
    # A fourth GPU appears: the whole gang goes.
    cluster.store.delete(NODES, "a", grace_period_seconds=0)
    cluster.store.create(NODES, gpu_node("a", 4))
    await cluster.converge(controller)
    assert sorted(cluster.bound()) == ["w0", "w1", "w2", "w3"]
    assert cluster.violations() == []


async def test_priority_decides_who_gets_the_last_gpu() -> None:
    # The low-priority pod comes first by name and by creation: only the priority can put "b-high" first.
    cluster = Cluster([gpu_node("a", 1)])
    for name, value in (("low", 1), ("high", 1000)):
        cluster.store.create(PRIORITY_CLASSES, {"metadata": {"name": name}, "value": value})
    controller = cluster.replica()
    low = vgpu_pod("a-low", memory=20000)
    low["spec"]["priorityClassName"] = "low"
    cluster.create_pod(low)
    cluster.clock.advance(1)
    high = vgpu_pod("b-high", memory=20000)
    high["spec"]["priorityClassName"] = "high"
    cluster.create_pod(high)
    await cluster.converge(controller)
    assert list(cluster.bound()) == ["b-high"]


async def test_deleted_and_finished_pods_are_released() -> None:
    cluster = Cluster([gpu_node("a", 1)])
    controller = cluster.replica()
    cluster.create_pod(vgpu_pod("one", memory=24576))
    await cluster.converge(controller)
    cluster.create_pod(vgpu_pod("two", memory=24576))
    await cluster.converge(controller)
    assert list(cluster.bound()) == ["one"]
    cluster.delete_pod("one")
    await cluster.converge(controller)
    assert list(cluster.bound()) == ["two"]
    cluster.finish_pod("two", "Failed")
    await cluster.converge(controller)
    assert cluster.ledgers()["a"].allocations == {}


async def test_pre_existing_overcommit_is_reported_loudly_and_not_evicted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = Cluster([gpu_node("a", 2)])
    for i in range(3):
        cluster.bound_with_assignment(f"old-{i}", node="a", ids="GPU-a-0,NVIDIA,12288,0:", memory=12288)
    registry = CollectorRegistry()
    controller = cluster.replica(registry=registry)
    cluster.create_pod(vgpu_pod("new", memory=1000, annotations={"volcano.sh/vgpu-use-gpuuuid": "GPU-a-0"}))
    with caplog.at_level(logging.INFO, logger="vgpu_guard.audit"):
        await cluster.converge(controller)
    assert len(cluster.pods()) == 4  # nobody evicted
    [event] = cluster.events("GPUOvercommitted")
    assert event["involvedObject"]["kind"] == "Node"
    assert "GPU GPU-a-0 on node a: 36864 MiB reserved > 24576 MiB capacity" in event["message"]
    # Both ways to get here, since the controller cannot tell them apart from the ledger alone.
    assert (
        "either these pods were bound before vgpu-guard reserved them, or the node's GPU registration"
        in (event["message"])
    )
    assert "new" not in cluster.bound()
    audits = [json.loads(json.dumps(r.__dict__["audit"])) for r in caplog.records if hasattr(r, "audit")]
    assert {a["event"] for a in audits} >= {"adoption", "overcommit"}
    [adoption] = [a for a in audits if a["event"] == "adoption"]  # one line for the node's write
    assert adoption["node"] == "a" and adoption["pods"] == ["default/old-0", "default/old-1", "default/old-2"]
    assert len(adoption["uids"]) == 3
    assert registry.get_sample_value("vgpu_guard_ledger_violations", {"node": "a"}) == 1


async def test_pending_pods_counts_what_the_pass_left_pending_as_the_reasons_do() -> None:
    """Set before placement, it had counted pods about to be bound and left out unreadable requests."""
    cluster = seed_000()
    registry = CollectorRegistry()
    controller = cluster.replica(registry=registry)
    for i in range(3):
        cluster.create_pod(vgpu_pod(f"web-{i}", memory=12288))
    no_vgpu = vgpu_pod("no-vgpu", memory=1000)
    del no_vgpu["spec"]["containers"][0]["resources"]
    cluster.create_pod(no_vgpu)
    await cluster.converge(controller)  # web-0 and web-1 bound, one at a time (the plugin's handshake)
    reasons = {
        reason: registry.get_sample_value("vgpu_guard_pending_pods_by_reason", {"reason": reason})
        for reason in ("capacity", "invalid-request")
    }
    assert reasons == {"capacity": 1, "invalid-request": 1}
    assert registry.get_sample_value("vgpu_guard_pending_pods") == 2  # web-2 and no-vgpu


async def test_gpu_gauges_mirror_the_last_pass_and_forget_removed_nodes() -> None:
    cluster = Cluster([gpu_node("a", 2), gpu_node("b", 1)])
    registry = CollectorRegistry()
    controller = cluster.replica(registry=registry)
    cluster.create_pod(
        vgpu_pod("one", memory=10000, cores=30, annotations={"volcano.sh/vgpu-use-gpuuuid": "GPU-a-1"})
    )
    await cluster.converge(controller)

    def sample(name: str, node: str, gpu: str) -> float | None:
        return registry.get_sample_value(name, {"node": node, "gpu": gpu})

    assert sample("vgpu_guard_gpu_memory_used_bytes", "a", "GPU-a-1") == 10000 * MIB
    assert sample("vgpu_guard_gpu_cores_used_ratio", "a", "GPU-a-1") == 0.3
    assert sample("vgpu_guard_gpu_memory_used_bytes", "a", "GPU-a-0") == 0
    assert sample("vgpu_guard_gpu_memory_total_bytes", "b", "GPU-b-0") == 24576 * MIB
    assert registry.get_sample_value("vgpu_guard_ledger_violations", {"node": "b"}) == 0
    assert registry.get_sample_value("vgpu_guard_allocations_total", {"node": "a"}) == 1
    cluster.delete_pod("one")
    cluster.store.delete(NODES, "b")
    cluster.store.delete(NODES, "a")
    await cluster.converge(controller)
    assert sample("vgpu_guard_gpu_memory_total_bytes", "b", "GPU-b-0") is None  # no stale series
    # A deleted node's own series go with it: an autoscaled fleet's churn leaves none behind.
    assert registry.get_sample_value("vgpu_guard_allocations_total", {"node": "a"}) is None
    assert registry.get_sample_value("vgpu_guard_ledger_violations", {"node": "b"}) is None


async def test_a_cpu_node_has_no_gpu_series() -> None:
    plain = gpu_node("cpu-0", 1)
    del plain["metadata"]["annotations"]["volcano.sh/node-vgpu-register"]
    cluster = Cluster([gpu_node("a", 1), plain])
    registry = CollectorRegistry()
    await cluster.converge(cluster.replica(registry=registry))
    assert registry.get_sample_value("vgpu_guard_ledger_violations", {"node": "a"}) == 0
    assert registry.get_sample_value("vgpu_guard_ledger_violations", {"node": "cpu-0"}) is None


async def test_crash_between_ledger_write_and_binding_resumes_the_reservation() -> None:
    cluster = Cluster([gpu_node("a", 2)])
    faults = FaultPlan()
    faults.add(verb="bind", error=unavailable_error())
    crashing = cluster.replica("r1", faults)
    cluster.create_pod(vgpu_pod("p", memory=1000))
    first = await crashing.run_once()
    assert first.errors and cluster.bound() == {}
    [entry] = cluster.ledgers()["a"].allocations.values()
    assert entry.committed
    restarted = cluster.replica("r1-restarted")
    await cluster.converge(restarted)
    assert cluster.bound() == {"p": "a"}
    assert list(cluster.ledgers()["a"].allocations) == [entry.pod_uid]


async def test_binding_applied_but_answer_lost_converges_to_one_entry() -> None:
    cluster = Cluster([gpu_node("a", 2)])
    faults = FaultPlan()
    faults.add(verb="bind", when="after", error=unavailable_error())
    replica = cluster.replica("r1", faults)
    cluster.create_pod(vgpu_pod("p", memory=1000))
    await cluster.converge(replica)
    assert cluster.bound() == {"p": "a"}
    assert len(cluster.ledgers()["a"].allocations) == 1


async def test_a_lost_cas_race_is_counted_and_redecided() -> None:
    cluster = Cluster([gpu_node("a", 1)])
    faults = FaultPlan()
    faults.add(verb="create", resource=LEDGERS, error=conflict_error("a"))
    replica = cluster.replica("r1", faults)
    cluster.create_pod(vgpu_pod("p", memory=1000))
    results = await replica.settle()
    assert results[0].conflicts == 1
    assert replica.metrics.conflicts._value.get() == 1
    cluster.plugin()
    assert cluster.bound() == {"p": "a"}


async def test_two_replicas_racing_never_overcommit() -> None:
    cluster = Cluster([gpu_node("a", 2), gpu_node("b", 1)])
    r1, r2 = cluster.replica("r1"), cluster.replica("r2")
    for i in range(8):
        cluster.create_pod(vgpu_pod(f"p{i}", memory=10000))
    for _ in range(12):
        await asyncio.gather(r1.run_once(), r2.run_once())
        assert cluster.violations() == []
        cluster.plugin()
    await cluster.converge(r1, r2)
    assert len(cluster.bound()) == 6
    assert cluster.violations() == []
    entries = [uid for led in cluster.ledgers().values() for uid in led.allocations]
    assert len(entries) == len(set(entries)) == 6


async def test_leader_election_takes_over_after_expiry() -> None:
    cluster = Cluster()
    clock = FakeClock()
    a = LeaderElector(
        MemoryClusterClient(cluster.store), name="l", namespace="default", identity="a", clock=clock
    )
    b = LeaderElector(
        MemoryClusterClient(cluster.store), name="l", namespace="default", identity="b", clock=clock
    )
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    clock.advance(10)
    assert await a.try_acquire_or_renew()
    clock.advance(14)
    assert not await b.try_acquire_or_renew()
    clock.advance(2)
    assert await b.try_acquire_or_renew()
    assert not await a.try_acquire_or_renew()
    await b.release()
    assert await a.try_acquire_or_renew()


async def test_run_controller_binds_a_new_pod() -> None:
    cluster = Cluster([gpu_node("a", 1)])
    client = MemoryClusterClient(cluster.store, bookmark_interval=0.05)
    task = asyncio.create_task(
        run_controller(
            client,
            cluster.config,
            identity="main",
            registry=CollectorRegistry(),
            lease_namespace="default",
            retry_seconds=0.05,
        )
    )
    try:
        await asyncio.sleep(0.05)
        cluster.create_pod(vgpu_pod("p", memory=1000))
        for _ in range(100):
            if cluster.bound():
                break
            await asyncio.sleep(0.02)
        assert cluster.bound() == {"p": "a"}
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_only_the_leader_exports_gpu_series_and_not_after_it_stops() -> None:
    cluster = Cluster([gpu_node("a", 1)])
    registries = {who: CollectorRegistry() for who in ("first", "second")}

    def used(who: str) -> float | None:
        return registries[who].get_sample_value(
            "vgpu_guard_gpu_memory_used_bytes", {"node": "a", "gpu": "GPU-a-0"}
        )

    def start(who: str) -> asyncio.Task[None]:
        client = MemoryClusterClient(cluster.store, bookmark_interval=0.05)
        return asyncio.create_task(
            run_controller(
                client,
                cluster.config,
                identity=who,
                registry=registries[who],
                lease_namespace="default",
                retry_seconds=0.05,
            )
        )

    first = start("first")
    await asyncio.sleep(0.1)  # first takes the Lease
    second = start("second")
    try:
        cluster.create_pod(vgpu_pod("p", memory=1000))
        for _ in range(100):
            if cluster.bound() and used("first") == 1000 * MIB:
                break
            await asyncio.sleep(0.02)
        assert used("first") == 1000 * MIB
        assert used("second") is None  # a standby exports no GPU series
    finally:
        for task in (first, second):
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    assert used("first") is None  # stopped: nothing stale left behind


async def test_replicas_with_different_pod_lists_cannot_both_bind() -> None:
    """r1 sees only z, a lagging r2 also sees x (older by name): both decide the one free GPU.

    Without the resourceVersion precondition both writes land and both pods run on one GPU
    (this test fails that way); with it, one replica's write is refused and it re-decides.
    """
    for lag in range(5):
        for turns in range(5):
            cluster = Cluster([gpu_node("a", 2)])
            cluster.create_pod(vgpu_pod("w", memory=16384))
            await cluster.converge(cluster.replica("r0"))
            cluster.create_pod(vgpu_pod("z", memory=16384))
            r1, r2 = cluster.replica("r1"), cluster.replica("r2")

            async def late(turns: int = turns, lag: int = lag, r2: AllocationController = r2) -> None:
                for _ in range(lag):
                    await asyncio.sleep(0)
                await r2.run_once()

            async def create_x(turns: int = turns, cluster: Cluster = cluster) -> None:
                for _ in range(turns):
                    await asyncio.sleep(0)
                cluster.create_pod(vgpu_pod("x", memory=16384))

            await asyncio.gather(r1.run_once(), late(), create_x())
            await cluster.converge(cluster.replica("r3"))
            assert cluster.violations() == [], (lag, turns)
            assert len(cluster.bound()) == 2, (lag, turns)


async def test_a_pod_bound_and_gone_between_two_passes_leaves_nothing_in_the_workloads() -> None:
    """A pod reserved and bound in one pass and deleted before the next was never seen placed by
    the controller's World; what the allocator counted for it must still go (found by the oracle:
    a stale pod refused a later pod's anti-affinity on a node kube-scheduler took it on)."""
    cluster = Cluster([gpu_node("a", 1)])
    controller = cluster.replica()
    first = vgpu_pod("first", memory=1000)
    first["metadata"]["labels"] = {"app": "x"}
    cluster.create_pod(first)
    await controller.run_once()
    assert cluster.bound() == {"first": "a"}
    cluster.delete_pod("first")
    away = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    cluster.create_pod(vgpu_pod("second", memory=1000, affinity=away))
    await cluster.converge(controller)
    assert cluster.bound().get("second") == "a"


def _overcommitted_cluster() -> Cluster:
    """Node a's first GPU holds 36,864 MiB of 24,576 (adopted as is); node b is free."""
    cluster = Cluster([gpu_node("a", 2), gpu_node("b", 1)])
    for i in range(3):
        cluster.bound_with_assignment(f"old-{i}", node="a", ids="GPU-a-0,NVIDIA,12288,0:", memory=12288)
    return cluster


async def test_a_pass_sends_its_bindings_before_it_checks_the_nodes_for_overcommit() -> None:
    """At a start the check covers every node (seconds at 5,000): the first bind must not wait."""
    cluster = _overcommitted_cluster()
    controller = cluster.replica()
    controller.background_events = True  # as run_controller runs it: bindings are tasks
    await controller.run_once()  # adopts the old pods (a pass that writes stops there)
    cluster.create_pod(vgpu_pod("new", memory=1000))
    sent: list[str] = []
    sent_when_checked: list[list[str]] = []
    bind, check = controller.client.bind, controller.reports.nodes.violations

    async def sending(namespace: str, name: str, **kwargs: Any) -> Any:
        sent.append(name)  # the request has left the pass: the client holds it
        return await bind(namespace, name, **kwargs)

    async def checking(*args: Any, **kwargs: Any) -> None:
        sent_when_checked.append(list(sent))
        await check(*args, **kwargs)

    controller.client.bind = sending  # type: ignore[method-assign]
    controller.reports.nodes.violations = checking  # type: ignore[method-assign]
    await controller.run_once()
    await controller.settle()
    assert sent_when_checked[0] == ["new"] and "new" in cluster.bound()
    assert cluster.events("GPUOvercommitted")


async def test_the_overcommit_check_runs_when_the_decision_fails() -> None:
    cluster = _overcommitted_cluster()
    controller = cluster.replica()
    await controller.run_once()  # adopts the old pods

    async def failing(*_: Any, **__: Any) -> None:
        raise unavailable_error("the API server is unavailable")

    controller.placer.decide = failing  # type: ignore[method-assign]
    result = await controller.run_once()
    assert result.errors and cluster.events("GPUOvercommitted")


async def test_a_node_deleted_with_allocations_is_reported_once_and_they_stay_held(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = Cluster([gpu_node("a", 1), gpu_node("b", 1)])
    controller = cluster.replica()
    for name in ("one", "two"):
        cluster.create_pod(
            vgpu_pod(name, memory=1000, annotations={"volcano.sh/vgpu-use-gpuuuid": "GPU-a-0"})
        )
    await cluster.converge(controller)
    assert cluster.bound() == {"one": "a", "two": "a"}
    cluster.store.delete(NODES, "a")
    with caplog.at_level(logging.INFO):
        await cluster.converge(controller)
        cluster.create_pod(vgpu_pod("three", memory=1000))  # another pass over the cluster
        await cluster.converge(controller)
    warnings = [r.getMessage() for r in caplog.records if "was deleted" in r.getMessage()]
    assert warnings == [
        "node a was deleted with 2 vGPU allocations in its ledger (pods default/one, default/two); "
        "each is held until its pod ends"
    ]
    audits = [r.__dict__["audit"] for r in caplog.records if hasattr(r, "audit")]
    assert [a for a in audits if a["event"] == "node-deleted-with-allocations"] == [
        {"event": "node-deleted-with-allocations", "node": "a", "allocations": 2, "by": "r1"}
    ]
    assert set(cluster.ledgers()["a"].allocations) == {p["metadata"]["uid"] for p in cluster.pods()
                                                       if p["metadata"]["name"] in ("one", "two")}  # fmt: skip
