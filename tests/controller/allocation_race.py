"""The allocation race machine: a cluster on the API double, two controller replicas, and every
disturbance issue 9 asks for, applied one step at a time and counted.

Shared by the hypothesis property (``tests/controller/test_allocation_properties.py``: short
programs that shrink to a minimal counterexample) and the reliability run
(``tests/reliability/test_allocation_safety.py``: one seeded run of 100,000 operations).

What a step can be:

- cluster operations: pod create / delete / completion, a gang arriving (PodGroup + members),
  node add / remove / cordon / uncordon / NotReady / Ready, device registration changes (a card's
  memory grows or shrinks, a card is added or removed, the split count changes), the device
  plugin confirming allocations;
- controller passes: one replica, or both racing with the second started some event-loop turns
  late, optionally with a pod created while they run, and optionally disturbed by
  - an API fault at one call (``FaultPlan``: 503 before the call, or applied with the answer lost);
  - a **crash** at one step boundary: the replica's process dies before or after its k-th API
    call (``Crashing``: an exception nothing in the controller catches); the replica is replaced
    by a fresh one, as a restarted pod would be.

What is checked:

- every ledger version the store ever holds, at the moment it is written, against the nodes'
  registrations at that moment (``Observer``): no GPU over its memory, cores, split count or MIG
  slices;
- after convergence (``check_converged``): every entry belongs to a live pod, no pod holds entries
  on two nodes (no duplicate), every bound live pod with devices holds exactly one entry on its
  node (no leak, nothing lost), and the invariants hold.

Registration changes never take capacity away from entries that exist at that moment (a card
shrinks at most to what it holds, only an empty card is removed): the property is about what the
controller writes, and a GPU that physically vanished under running pods is reported, not fixed
(see docs/design/ledger.md).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Literal

from prometheus_client import CollectorRegistry

from tests.apidouble_support.faults import FaultPlan, Verb, unavailable_error
from tests.controller.allocation_testkit import Cluster, vgpu_pod
from tests.controller.listed_inputs import ListedInputs
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.controller.allocation import AllocationController
from vgpu_guard.engine.annotations import VGPU_IDS
from vgpu_guard.engine.cluster import ClusterView, NodeInfo
from vgpu_guard.engine.ledger import check_invariants, decode_ledger, gpu_usage
from vgpu_guard.kube.errors import NotFound
from vgpu_guard.kube.resources import LEDGERS, NODES, PODGROUPS, PODS, Resource

__all__ = ["Crash", "Crashing", "NodeState", "Observer", "RaceMachine"]

Obj = dict[str, Any]
When = Literal["before", "after"]

BASE_NODES = {"a": (24576, 24576, 24576, 24576), "b": (16384, 16384)}
SPARE_NODES = ("c", "d", "e")
SPLIT = 10
CARD = "NVIDIA-NVIDIA A10"
URGENT = "urgent"
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False)


class Crash(Exception):
    """The replica's process died here; nothing in the controller catches it."""


class Crashing:
    """A ``ClusterClient`` that kills its process at the ``at``-th call, before or after it."""

    VERBS = ("get", "list", "create", "replace", "replace_status", "patch", "delete", "bind")

    def __init__(self, inner: MemoryClusterClient, *, at: int | None, when: When = "before") -> None:
        self.inner = inner
        self.at = at
        self.when = when
        self.calls = 0
        self.crashed: tuple[int, When] | None = None

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.inner, name)
        if name not in self.VERBS:
            return target

        async def call(*args: Any, **kwargs: Any) -> Any:
            index = self.calls
            self.calls += 1
            if index == self.at and self.when == "before":
                self.crashed = (index, "before")
                raise Crash(f"crash before call {index} ({name})")
            out = await target(*args, **kwargs)
            if index == self.at and self.when == "after":
                self.crashed = (index, "after")
                raise Crash(f"crash after call {index} ({name}), which was applied")
            return out

        return call


class Observer:
    """Checks every ledger version the store writes against the nodes at that moment."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.seen = 0
        self.watch = cluster.store.watch(LEDGERS, resource_version=None)
        self.watch.wakeup = self.check

    def check(self) -> None:
        for etype, obj in self.watch.pop():
            if etype == "DELETED":
                continue
            self.seen += 1
            ledger = decode_ledger(obj)
            info = self._node(ledger.node)
            if info is not None:
                violations = check_invariants(ledger, info)
                assert violations == [], [v.message for v in violations]

    def _node(self, name: str) -> NodeInfo | None:
        """The ledger's node as stored now, parsed: one GET (listing and parsing every node for
        each ledger version was a sixth of the store's write time in the 100,000-operation run)."""
        try:
            node = self.cluster.store.get(NODES, name)
        except NotFound:
            return None
        return ClusterView.from_objects([node], self.cluster.config).nodes.get(name)


@dataclass
class NodeState:
    """A node as the test drives it: per-card memory, split count, flags."""

    memories: list[int]
    split: int = SPLIT
    cordoned: bool = False
    ready: bool = True

    def object(self, name: str) -> Obj:
        records = "".join(
            f"GPU-{name}-{i},{self.split},{mem},{CARD},true,hami-core:" for i, mem in enumerate(self.memories)
        )
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name},
                "annotations": {"volcano.sh/node-vgpu-register": records},
            },
            "spec": {"unschedulable": self.cordoned},
            "status": {
                "allocatable": self.allocatable(),
                "conditions": [{"type": "Ready", "status": "True" if self.ready else "False"}],
            },
        }

    def allocatable(self) -> dict[str, str]:
        return {
            "cpu": "64",
            "pods": "110",
            "volcano.sh/vgpu-number": str(self.split * len(self.memories)),
            "volcano.sh/vgpu-memory": str(sum(self.memories)),
            "volcano.sh/vgpu-cores": str(100 * len(self.memories)),
        }


def scrambled(serial: int) -> str:
    # Names sort unlike creation order (same creationTimestamp within a step): replicas that saw
    # different pod lists then pick different pods first, the race CAS must stop.
    return f"p{serial * 7919 % 100_003:05d}"


async def _turns(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


@dataclass
class RaceMachine:
    """One cluster, replicas r1 and r2, the nodes' state, and counters of everything done."""

    cluster: Cluster = field(default_factory=Cluster)
    nodes: dict[str, NodeState] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)
    groups: dict[str, set[str]] = field(default_factory=dict)  # PodGroup -> members not yet deleted
    replicas: dict[str, AllocationController] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    crash_points: set[tuple[int, When]] = field(default_factory=set)
    longest_pass: int = 0  # API calls of the longest pass that ran to its end
    pass_calls: int = 0  # API calls of the last pass that ran to its end
    serial: int = 0

    def __post_init__(self) -> None:
        for name, memories in BASE_NODES.items():
            self.nodes[name] = NodeState(list(memories))
            self.cluster.store.create(NODES, self.nodes[name].object(name))
        self.cluster.store.create(PRIORITY_CLASSES, {"metadata": {"name": URGENT}, "value": 1000})
        self.observer = Observer(self.cluster)
        self.replicas = {"r1": self.replica("r1"), "r2": self.replica("r2")}

    # --- cluster operations (each counts as one operation; a gang as 1 + members) ------------------

    def _next(self) -> str:
        self.serial += 1
        return scrambled(self.serial)

    def create(self, memory: int | None, number: int) -> None:
        name = self._next()
        self.cluster.create_pod(vgpu_pod(name, memory=memory, number=number))
        self.names.append(name)
        self.counts["op:pod-create"] += 1

    def gang(self, size: int, memory: int = 8192) -> None:
        self.serial += 1
        group = f"g{self.serial}"
        self.cluster.store.create(
            PODGROUPS,
            {
                "kind": "PodGroup",
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "metadata": {"name": group, "namespace": "default"},
                "spec": {"minMember": size},
            },
            namespace="default",
        )
        self.groups[group] = set()
        for i in range(size):
            name = f"{group}-{i}"
            self.cluster.create_pod(
                vgpu_pod(name, memory=memory, annotations={"scheduling.k8s.io/group-name": group})
            )
            self.names.append(name)
            self.groups[group].add(name)
        self.counts["op:gang-arrival"] += 1
        self.counts["op:gang-member-create"] += size

    def end(self, index: int, how: Literal["delete", "finish"]) -> None:
        if not self.names:
            return
        name = self.names[index % len(self.names)]
        try:
            if how == "delete":
                self.cluster.delete_pod(name)
                self._gone(name)
            else:
                self.cluster.finish_pod(name, phase="Succeeded" if index % 2 else "Failed")
        except NotFound:  # already gone: fine for a random program
            self._gone(name)
        self.counts[f"op:pod-{how}"] += 1

    def _gone(self, name: str) -> None:
        """Forget a deleted pod; a gang's PodGroup goes with its last member, as the owning Job's
        garbage collection deletes it (otherwise a long run lists thousands of dead PodGroups)."""
        if name in self.names:
            self.names.remove(name)
        group = name.rpartition("-")[0]
        members = self.groups.get(group)
        if members is None:
            return
        members.discard(name)
        if not members:
            del self.groups[group]
            self.cluster.store.delete(PODGROUPS, group, namespace="default")

    def _patch_node(self, name: str) -> None:
        state = self.nodes[name]
        obj = state.object(name)
        self.cluster.store.patch(
            NODES,
            name,
            {"metadata": {"annotations": obj["metadata"]["annotations"]}, "spec": obj["spec"]},
        )
        self.cluster.store.patch(NODES, name, {"status": obj["status"]}, subresource="status")

    def present(self) -> set[str]:
        return {n["metadata"]["name"] for n in self.cluster.store.list(NODES).items}

    def node(self, action: str, pick: int = 0) -> None:
        """cordon | uncordon | notready | ready | add | remove, on the ``pick``-th node."""
        present = sorted(self.present())
        if action == "add":
            absent = [n for n in (*BASE_NODES, *SPARE_NODES) if n not in present]
            if not absent:
                return
            name = absent[pick % len(absent)]
            state = self.nodes.setdefault(name, NodeState([24576]))
            state.cordoned, state.ready = False, True
            self.cluster.store.create(NODES, state.object(name))
        elif not present:
            return
        elif action == "remove":
            name = present[pick % len(present)]
            self.cluster.store.delete(NODES, name)
            if pick % 2:
                # The pod garbage collector deletes pods bound to a node that is gone.
                for pod in self.cluster.pods():
                    if pod["spec"].get("nodeName") == name:
                        self.cluster.delete_pod(pod["metadata"]["name"])
                        self._gone(pod["metadata"]["name"])
        else:
            name = present[pick % len(present)]
            state = self.nodes[name]
            if action in ("cordon", "uncordon"):
                state.cordoned = action == "cordon"
            else:
                state.ready = action == "ready"
            self._patch_node(name)
        self.counts[f"op:node-{action}"] += 1

    def _usage(self, name: str) -> dict[str, Any]:
        ledger = self.cluster.ledgers().get(name)
        return gpu_usage(ledger.allocations.values()) if ledger else {}

    def register(self, action: str, pick: int = 0) -> None:
        """A device registration change that leaves every existing entry within capacity:
        grow | shrink (a card, down to what it holds) | add-gpu | remove-gpu (an empty last card) |
        split (the split count, down to the most grants any card holds)."""
        present = sorted(self.present())
        if not present:
            return
        name = present[pick % len(present)]
        state = self.nodes[name]
        usage = self._usage(name)
        card = pick % len(state.memories)
        used = usage.get(f"GPU-{name}-{card}")
        if action == "grow":
            state.memories[card] = min(state.memories[card] + 4096, 49152)
        elif action == "shrink":
            state.memories[card] = max(used.memory if used else 0, state.memories[card] - 8192, 4096)
        elif action == "add-gpu":
            if len(state.memories) >= 4:
                return
            state.memories.append(24576)
        elif action == "remove-gpu":
            last = len(state.memories) - 1
            if last == 0 or f"GPU-{name}-{last}" in usage:
                return
            state.memories.pop()
        elif action == "split":
            most = max((u.grants for u in usage.values()), default=1)
            state.split = max(most, 1, (state.split + 3) % 11)
        self._patch_node(name)
        self.counts[f"op:register-{action}"] += 1

    def plugin(self) -> None:
        self.counts["op:plugin-confirm"] += self.cluster.plugin()

    # --- controller passes ----------------------------------------------------------------------------

    def replica(
        self, who: str, *, faults: FaultPlan | None = None, crash: tuple[int, When] | None = None
    ) -> AllocationController:
        """A replica process whose API calls are counted (and optionally killed at one of them)."""
        at: int | None
        when: When
        at, when = crash if crash is not None else (None, "before")
        client = Crashing(MemoryClusterClient(self.cluster.store, faults=faults), at=at, when=when)
        return AllocationController(
            client,
            self.cluster.config,
            identity=who,
            clock=self.cluster.clock,
            registry=CollectorRegistry(),
            inputs=ListedInputs(client),
        )

    async def _run(self, replica: AllocationController, lag: int) -> None:
        await _turns(lag)
        client = replica.client
        assert isinstance(client, Crashing)
        before = client.calls
        try:
            result = await replica.run_once()
        except Crash:
            assert client.crashed is not None
            self.crash_points.add(client.crashed)
            self.counts["crashes"] += 1
            return
        self.counts["passes"] += 1
        self.counts["conflicts"] += result.conflicts
        self.counts["bound"] += len(result.bound)
        self.pass_calls = client.calls - before
        self.longest_pass = max(self.longest_pass, self.pass_calls)

    async def run_pass(
        self,
        who: Literal["r1", "r2", "both"],
        *,
        lag: int = 0,
        fault: tuple[Verb, When, int] | None = None,
        crash: tuple[int, When] | None = None,
        inject: tuple[int | None, int, int] | None = None,
        urgent: bool = False,
    ) -> None:
        """One pass of ``who``; with both, the second starts ``lag`` loop turns late.

        ``fault``: (verb, when, skip) — a 503 on the first replica's (skip+1)-th call of that verb.
        ``crash``: (k, when) — the first replica's process dies at its k-th API call.
        ``inject``: (memory, number, turns) — a pod created ``turns`` loop turns into the pass;
        ``urgent`` gives it a PriorityClass above every other pod, so a replica that sees it
        places it first and the one that does not decides differently for the same card (the
        stale-decision race only the ledger CAS stops).
        """
        chosen = ["r1", "r2"] if who == "both" else [who]
        runs: list[Awaitable[None]] = []
        if inject is not None:
            memory, number, turns = inject
            name = self._next()
            self.names.append(name)
            pod = vgpu_pod(name, memory=memory, number=number)
            if urgent:
                pod["spec"]["priorityClassName"] = URGENT
            runs.append(self._create_later(pod, turns))
        if crash is not None:
            runs.append(self._run(self.replica(chosen[0], crash=crash), 0))
        elif fault is not None:
            verb, when, skip = fault
            plan = FaultPlan()
            plan.add(verb=verb, when=when, error=unavailable_error(), skip=skip)
            runs.append(self._run(self.replica(chosen[0], faults=plan), 0))
            self.counts["api-faults-armed"] += 1
        else:
            runs.append(self._run(self.replicas[chosen[0]], 0))
        runs.extend(self._run(self.replicas[w], lag) for w in chosen[1:])
        await asyncio.gather(*runs)
        if crash is not None or fault is not None:
            self.replicas[chosen[0]] = self.replica(chosen[0])  # the restarted process
        self.cluster.clock.advance(5)

    async def _create_later(self, pod: Obj, turns: int) -> None:
        await _turns(turns)
        self.cluster.create_pod(pod)
        self.counts["op:pod-create-during-pass"] += 1

    # --- convergence --------------------------------------------------------------------------------------

    async def converge_and_check(self, *, heal: bool = True) -> None:
        """Heal the nodes (optional), let fresh replicas settle, and check nothing leaked or doubled."""
        if heal:
            present = self.present()
            for name in BASE_NODES:
                state = self.nodes[name]
                state.cordoned, state.ready = False, True
                if name in present:
                    self._patch_node(name)
                else:
                    self.cluster.store.create(NODES, state.object(name))
        await self.cluster.converge(self.replica("r1"), self.replica("r2"), rounds=80)
        self.observer.check()
        self.check_converged()
        self.counts["convergence-checks"] += 1

    def check_converged(self) -> None:
        pods = {p["metadata"]["uid"]: p for p in self.cluster.store.list(PODS).items}
        entries: dict[str, list[str]] = {}
        for node, ledger in self.cluster.ledgers().items():
            for uid in ledger.allocations:
                entries.setdefault(uid, []).append(node)
        for uid, nodes in entries.items():
            pod = pods.get(uid)
            assert pod is not None, f"leaked entry: {uid} on {nodes} has no pod"
            assert pod["status"].get("phase") not in ("Succeeded", "Failed"), f"entry of ended pod {uid}"
            assert len(nodes) == 1, f"duplicated entry: pod {uid} holds entries on {nodes}"
        for uid, pod in pods.items():
            node = pod["spec"].get("nodeName")
            live = pod["status"].get("phase") not in ("Succeeded", "Failed")
            if node and live and (pod["metadata"].get("annotations") or {}).get(VGPU_IDS):
                assert entries.get(uid) == [node], (
                    f"lost entry: bound pod {pod['metadata']['name']} has entries {entries.get(uid)}"
                )
        assert self.cluster.violations() == []
        self.counts["entries-at-last-check"] = sum(len(v) for v in entries.values())

    # --- reporting ----------------------------------------------------------------------------------------

    @property
    def operations(self) -> int:
        return sum(v for k, v in self.counts.items() if k.startswith("op:"))

    def summary(self) -> str:
        counts = self.counts
        return (
            f"{self.operations} operations, {counts['passes']} controller passes "
            f"({counts['crashes']} crashed at {len(self.crash_points)} distinct step boundaries, "
            f"{counts['api-faults-armed']} with an API fault), {counts['conflicts']} CAS conflicts, "
            f"{counts['bound']} bindings, {self.observer.seen} ledger versions checked, "
            f"{counts['convergence-checks']} convergence checks: 0 overcommitted GPUs, "
            "0 leaked or duplicated entries"
        )
