"""Property: whatever the interleaving, crash or race, no ledger state ever overcommits a GPU, and
the ledger converges to exactly the live bound pods.

Two controller replicas share one API double. Hypothesis draws a program of steps: pod creates,
deletes and completions, node changes (cordon, NotReady, a new node), the plugin confirming
allocations, and passes of either or both replicas concurrently, each possibly crashing at one
API call (the call fails before reaching the server, or after it was applied with the answer
lost; the replica is then replaced by a fresh one, as a restarted process would be). Every
ledger version the store ever holds is checked as it is written (a watch on the store).
``VGPU_GUARD_LONG=1`` runs many more programs.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.controller.allocation_testkit import Cluster, gpu_node, vgpu_pod
from vgpu_guard.controller.allocation import AllocationController
from vgpu_guard.engine.annotations import VGPU_IDS
from vgpu_guard.engine.ledger import check_invariants, decode_ledger
from vgpu_guard.kube.errors import NotFound
from vgpu_guard.kube.memory import FaultPlan, unavailable_error
from vgpu_guard.kube.resources import LEDGERS, NODES, PODGROUPS, PODS

LONG = bool(os.environ.get("VGPU_GUARD_LONG"))

pod_specs = st.tuples(st.sampled_from([4096, 8192, 12288, 24576]), st.sampled_from([1, 1, 1, 2]))
crash = st.one_of(
    st.none(),
    st.tuples(
        st.sampled_from(["bind", "replace", "create", "patch", "list"]),
        st.sampled_from(["before", "after"]),
        st.integers(0, 3),
    ),
)
step = st.one_of(
    st.tuples(st.just("create"), pod_specs),
    st.tuples(st.just("gang"), st.integers(2, 3)),
    st.tuples(st.just("delete"), st.integers(0, 30)),
    st.tuples(st.just("finish"), st.integers(0, 30)),
    st.tuples(st.just("node"), st.sampled_from(["cordon", "uncordon", "notready", "ready", "add"])),
    st.tuples(st.just("plugin"), st.none()),
    st.tuples(
        st.just("pass"),
        st.tuples(
            st.sampled_from(["r1", "r2", "both"]),
            crash,
            st.integers(0, 25),
            st.one_of(st.none(), st.tuples(pod_specs, st.integers(0, 12))),
        ),
    ),
)


class Observer:
    """Checks every ledger version the store writes against the nodes at that moment."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.seen = 0
        self.watch = cluster.store.watch(LEDGERS, resource_version=None)
        self.watch.wakeup = self.check

    def check(self) -> None:
        view = self.cluster.view()
        for etype, obj in self.watch.pop():
            if etype == "DELETED":
                continue
            self.seen += 1
            ledger = decode_ledger(obj)
            info = view.nodes.get(ledger.node)
            if info is not None:
                violations = check_invariants(ledger, info)
                assert violations == [], [v.message for v in violations]


def scrambled(serial: int) -> str:
    # Names sort unlike creation order (same creationTimestamp within a step): replicas that saw
    # different pod lists then pick different pods first, the race CAS must stop.
    return f"p{serial * 7919 % 1009:04d}"


async def create_later(cluster: Cluster, pod: dict[str, Any], turns: int) -> None:
    for _ in range(turns):
        await asyncio.sleep(0)
    cluster.create_pod(pod)


async def lagging(replica: AllocationController, turns: int) -> None:
    for _ in range(turns):
        await asyncio.sleep(0)
    await replica.run_once()


async def run_program(steps: list[tuple[str, Any]]) -> None:
    cluster = Cluster([gpu_node("a", [24576, 24576]), gpu_node("b", 1, memory=16384)])
    observer = Observer(cluster)
    replicas: dict[str, AllocationController] = {"r1": cluster.replica("r1"), "r2": cluster.replica("r2")}
    names: list[str] = []
    for serial, (kind, arg) in enumerate(steps, start=1):
        if kind == "create":
            memory, number = arg
            name = scrambled(serial)
            cluster.create_pod(vgpu_pod(name, memory=memory, number=number))
            names.append(name)
        elif kind == "gang":
            group = f"g{serial}"
            cluster.store.create(
                PODGROUPS,
                {
                    "kind": "PodGroup",
                    "apiVersion": "scheduling.volcano.sh/v1beta1",
                    "metadata": {"name": group, "namespace": "default"},
                    "spec": {"minMember": arg},
                },
                namespace="default",
            )
            for i in range(arg):
                name = f"{group}-{i}"
                cluster.create_pod(
                    vgpu_pod(name, memory=8192, annotations={"scheduling.k8s.io/group-name": group})
                )
                names.append(name)
        elif kind in ("delete", "finish") and names:
            name = names[arg % len(names)]
            try:
                if kind == "delete":
                    cluster.delete_pod(name)
                    names.remove(name)
                else:
                    cluster.finish_pod(name)
            except NotFound:  # already gone: fine for a random program
                names.remove(name)
        elif kind == "node":
            if arg == "add":
                if "c" not in {n["metadata"]["name"] for n in cluster.store.list(NODES).items}:
                    cluster.store.create(NODES, gpu_node("c", 1))
            elif arg in ("cordon", "uncordon"):
                cluster.store.patch(NODES, "a", {"spec": {"unschedulable": arg == "cordon"}})
            else:
                status = "False" if arg == "notready" else "True"
                cluster.store.patch(
                    NODES,
                    "b",
                    {"status": {"conditions": [{"type": "Ready", "status": status}]}},
                    subresource="status",
                )
        elif kind == "plugin":
            cluster.plugin()
        elif kind == "pass":
            who, fault, lag, inject = arg
            extra = []
            if inject is not None:
                # A pod created while the passes run: replicas read different pod lists.
                (memory, number), turns = inject
                name = scrambled(serial)
                names.append(name)
                extra.append(create_later(cluster, vgpu_pod(name, memory=memory, number=number), turns))
            chosen = ["r1", "r2"] if who == "both" else [who]
            if fault is not None:
                verb, when, skip = fault
                plan = FaultPlan()
                plan.add(verb=verb, when=when, error=unavailable_error(), skip=skip)
                crashing = cluster.replica(chosen[0], plan)
                runs = [crashing.run_once()] + [lagging(replicas[w], lag) for w in chosen[1:]]
                await asyncio.gather(*runs, *extra)
                replicas[chosen[0]] = cluster.replica(chosen[0])  # restarted process
            else:
                # The second replica starts `lag` event-loop turns late: its reads fall between
                # the first one's reads and writes, which is where stale decisions come from.
                await asyncio.gather(
                    replicas[chosen[0]].run_once(), *(lagging(replicas[w], lag) for w in chosen[1:]), *extra
                )
        cluster.clock.advance(5)
    # Converge: heal the nodes, let fresh replicas settle with the plugin confirming.
    cluster.store.patch(NODES, "a", {"spec": {"unschedulable": False}})
    cluster.store.patch(
        NODES, "b", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, subresource="status"
    )
    await cluster.converge(cluster.replica("r1"), cluster.replica("r2"))
    observer.check()

    pods = {p["metadata"]["uid"]: p for p in cluster.store.list(PODS).items}
    entries: dict[str, list[str]] = {}
    for node, ledger in cluster.ledgers().items():
        for uid in ledger.allocations:
            entries.setdefault(uid, []).append(node)
    for uid, nodes in entries.items():
        pod = pods.get(uid)
        assert pod is not None, f"entry {uid} on {nodes} has no pod"
        assert pod["status"].get("phase") not in ("Succeeded", "Failed"), f"entry of ended pod {uid}"
        assert len(nodes) == 1, f"pod {uid} holds entries on {nodes}"
    for uid, pod in pods.items():
        node = pod["spec"].get("nodeName")
        live = pod["status"].get("phase") not in ("Succeeded", "Failed")
        if node and live and (pod["metadata"].get("annotations") or {}).get(VGPU_IDS):
            assert entries.get(uid) == [node], (
                f"bound pod {pod['metadata']['name']} has entries {entries.get(uid)}"
            )
    assert cluster.violations() == []


@settings(
    max_examples=400 if LONG else 25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(step, min_size=1, max_size=60 if LONG else 25))
def test_no_interleaving_crash_or_race_overcommits(steps: list[tuple[str, Any]]) -> None:
    asyncio.run(run_program(steps))
