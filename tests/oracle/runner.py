"""Run oracle cases on a real control plane: kube-scheduler places the plain twin, our controller
(in-process, ``run_controller`` as ``serve controller`` runs it: informers, leader Lease, binder)
the vGPU twin. Both run on their own; the oracle only creates pods and reads the verdicts.

Cases run in waves of ``slots`` at once. Each slot owns two fleets of ``MAX_NODES`` nodes (one
per side, never shared), created once and re-rendered for every wave's case: a node the case does
not use is parked (no label, so no pod selects or counts it). Every node carries a probe-only
NoSchedule taint whose value is its index. Step ``j`` creates the probe pod on both sides
tolerating only value ``j`` (so node ``j`` is the only candidate), and reads the verdicts from the
API: bound, or ``PodScheduled=False``. Probe pods are deleted before the next step, so each node is
judged against the fleet's existing pods alone.

Both verdicts must be made on the same nodes: the render. A scheduler's nodes and pods come on two
watch streams, so a probe can be judged before the node cache has the wave's render: under
coverage our controller's (in this process) lagged up to a wave, and all 43 disagreements of such
an ORACLE_SEED=555014 run were its verdicts on nodes its cache still held from an earlier render.
And kube-controller-manager writes a node's taints too: its unschedulable taint follows the cordon,
by a patch of the node's whole taint list as the API server's cache gave it, with no precondition
(``PatchNodeTaints`` in 1.20's pkg/controller/controller_utils.go), which can put back an earlier
wave's taints. So before any probe the runner waits until our controller's node cache
(``ClusterCache``, which the test hands to our controller as ``serve`` does) shows every fleet node
as rendered, kube-controller-manager's taint agreeing with the cordon, writing again a node another
writer changed (``_settle``); then kube-scheduler binds a barrier pod that only the newest node
write made feasible, which proves its node cache has every earlier one (one watch stream, in
order). A later change of a fleet node away from its render is drift: a case whose nodes drifted
while it ran is run again on re-settled nodes, the rows of that run not recorded (``run_wave``).

Why fleets are kept rather than created per wave: a node created and deleted costs the control
plane about nine requests and two Events (the node lifecycle controller registers and removes it,
our ledger is deleted), and that churn was half of the oracle's API traffic.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.harness import until
from tests.oracle.cases import (
    MAX_NODES,
    OVERHEAD,
    RUNTIME_CLASS,
    Case,
    node_name,
    render_node,
    render_pod,
    render_volume,
)
from vgpu_guard.engine.objects import version_of
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.bounded import gather_bounded
from vgpu_guard.kube.errors import AlreadyExists, NotFound
from vgpu_guard.kube.informer import Informer, InformerEvent, key_of
from vgpu_guard.kube.resources import (
    CRDS,
    LEDGERS,
    NAMESPACES,
    NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    PODS,
    SERVICE_ACCOUNTS,
    Resource,
)
from vgpu_guard.kube.view_cache import ClusterCache

Obj = dict[str, Any]
SIDES = ("kube", "ours")
ROLE_LABEL = "oracle.vgpu-guard.io/role"
NOT_READY = "node.kubernetes.io/not-ready"
SYSTEM_TAINTS = "node.kubernetes.io/"  # kube-controller-manager's: from conditions and the cordon
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
BARRIER_NODE = "oracle-barrier"
BARRIER_LABEL = "oracle.vgpu-guard.io/barrier"
BARRIER_NAMESPACE = "oracle-barrier"
SETTLE_SECONDS = 120.0
RERUNS = 3  # a case whose nodes drift in more runs than this fails the test
HEARTBEAT_SECONDS = 100.0  # kube-controller-manager --node-monitor-grace-period=300s
DECIDE_SECONDS = 30.0
POLL_SECONDS = 0.05
CONCURRENCY = 32  # requests in flight at once
RUNTIME_CLASSES = Resource("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", namespaced=False)
OUR_CRDS = Path(__file__).resolve().parents[2] / "manifests" / "crds"


@dataclass(frozen=True)
class Verdict:
    fits: bool
    message: str = ""


@dataclass(frozen=True)
class Row:
    seed: int
    node: int
    features: tuple[str, ...]
    ours: Verdict
    kube: Verdict


def zone_key(slot: int) -> str:
    return f"oracle.vgpu-guard.io/zone-s{slot}"


def namespace(slot: int, side: str) -> str:
    return f"oracle-s{slot}-{side}"


def _condition(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    conditions: list[Mapping[str, Any]] = (pod.get("status") or {}).get("conditions") or []
    for c in conditions:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return c
    return None


def _taint_set(taints: Iterable[Mapping[str, Any]]) -> set[tuple[str, str, str]]:
    return {(str(t.get("key")), str(t.get("value") or ""), str(t.get("effect"))) for t in taints}


@dataclass
class Rendered:
    """A fleet node as the oracle last wrote it."""

    part: Obj  # labels, taints, unschedulable: one JSON patch writes them
    allocatable: Obj | None = None  # as rendered: written again only when it changes
    echoed: Obj | None = None  # as the API server answered it (quantities canonical: 1000 -> 1k)
    version: int = -1  # the resourceVersion of our last write


def differences(node: Mapping[str, Any], want: Rendered) -> list[str]:
    """What a scheduler would read on ``node`` that is not its render ``want``: labels, taints,
    cordon, allocatable. kube-controller-manager's own taints (``node.kubernetes.io/*``) are not
    the render's, but its unschedulable taint must agree with the cordon, and nothing else of its
    may be there (a not-ready taint, a node the lifecycle controller lost). Empty: as rendered."""
    out = []
    spec = node.get("spec") or {}
    taints = [t for t in spec.get("taints") or [] if isinstance(t, Mapping)]
    if ((node.get("metadata") or {}).get("labels") or {}) != want.part["labels"]:
        out.append("labels")
    if _taint_set(t for t in taints if not str(t.get("key")).startswith(SYSTEM_TAINTS)) != _taint_set(
        want.part["taints"]
    ):
        out.append("taints")
    if bool(spec.get("unschedulable")) != want.part["unschedulable"]:
        out.append("cordon")
    if want.echoed is not None and (node.get("status") or {}).get("allocatable") != want.echoed:
        out.append("allocatable")
    system = sorted(str(t.get("key")) for t in taints if str(t.get("key")).startswith(SYSTEM_TAINTS))
    if system != ([UNSCHEDULABLE] if want.part["unschedulable"] else []):
        out.append("system taints " + (",".join(system) or "none"))
    return out


def settle_action(node: Mapping[str, Any] | None, want: Rendered) -> str:
    """For a node as a cache holds it: ``ok`` (as rendered), ``wait`` (the cache has not shown our
    last write yet, or only kube-controller-manager's taint is still to follow the cordon) or
    ``write`` (a write newer than ours changed what we render: write the render again)."""
    if node is None or version_of(node) < want.version:
        return "wait"
    diff = differences(node, want)
    if not diff:
        return "ok"
    return "wait" if all(d.startswith("system taints") for d in diff) else "write"


class Oracle:
    def __init__(self, admin: AioClusterClient, slots: int) -> None:
        self.admin = admin
        self.slots = slots
        self.wave = 0
        self.nodes = [
            node_name(self.fleet(s, side), i)
            for s in range(slots)
            for side in SIDES
            for i in range(MAX_NODES)
        ]
        self._slot_of = {
            node_name(self.fleet(s, side), i): s
            for s in range(slots)
            for side in SIDES
            for i in range(MAX_NODES)
        }
        self.nodes.append(BARRIER_NODE)
        self._rendered: dict[str, Rendered] = {}
        self._alive: asyncio.Task[None] | None = None
        self._heartbeats: asyncio.Task[None] | None = None
        # The probes and barrier pods as the schedulers leave them, from one watch: polling with a
        # LIST read every pod of every namespace from etcd 20 times a second, a fifth of the API
        # server's work.
        self._probe_cache = Informer(admin, PODS, label_selector=f"{ROLE_LABEL} in (probe,barrier)")
        self._watching: asyncio.Task[None] | None = None
        # The node cache our controller decides from (the test passes it to run_controller), and
        # the runner's view of the nodes: every write reaches it, in order.
        self.cluster = ClusterCache(admin)
        self._caching: asyncio.Task[None] | None = None
        self._node_cache = self.cluster.nodes
        self._node_cache.add_handler(self._node_changed)
        self._unsettled: set[str] = set()  # fleet nodes changed since _settle last found them as rendered
        self._guarding = False  # after _settle: a fleet node's change away from its render is drift
        self._drifted: dict[int, str] = {}  # slot -> a node of its fleets that drifted
        self._barriers = 0
        self.rewrites = 0  # nodes written again because another writer changed them
        self.reruns = 0  # cases run again because their nodes drifted while they ran

    def fleet(self, slot: int, side: str) -> str:
        return f"s{slot}-{side}"

    # -- once ------------------------------------------------------------------------------------
    async def setup(self) -> None:
        for path in sorted(OUR_CRDS.glob("*.yaml")):
            crd = yaml.safe_load(path.read_text())
            with contextlib.suppress(AlreadyExists):
                await self.admin.create(CRDS, crd)
        runtime_class = {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": RUNTIME_CLASS},
            "handler": "runc",
            "overhead": {"podFixed": OVERHEAD},
        }
        with contextlib.suppress(AlreadyExists):
            await self.admin.create(RUNTIME_CLASSES, runtime_class)
        names = [namespace(s, side) for s in range(self.slots) for side in SIDES] + [BARRIER_NAMESPACE]
        await gather_bounded((self._namespace(name) for name in names), CONCURRENCY)
        await self._ledgers_served()
        self._caching = asyncio.create_task(self.cluster.run())
        await self._barrier_node()
        await self._render_fleets([])
        await self._not_ready_lifted()
        self._heartbeats = asyncio.create_task(self._heartbeat())
        self._watching = asyncio.create_task(self._probe_cache.run())
        await asyncio.wait_for(self._probe_cache.wait_synced(), 30)
        await asyncio.wait_for(self._node_cache.wait_synced(), 30)

    async def _barrier_node(self) -> None:
        """The node no case sees (no fleet label, no topology key) whose label ``_barrier`` moves."""
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": BARRIER_NODE, "labels": {BARRIER_LABEL: "b0"}},
            "spec": {},
        }
        with contextlib.suppress(AlreadyExists):
            await self.admin.create(NODES, node)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        capacity = {"cpu": "1", "memory": "1Gi", "pods": "110"}
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "oracle"}
        status = {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [{**ready, "lastHeartbeatTime": now, "lastTransitionTime": now}],
        }
        await self.admin.patch(NODES, BARRIER_NODE, {"status": status}, subresource="status")

    async def _namespace(self, name: str) -> None:
        """A fresh namespace ``name`` whose pods can be created. One left by an earlier run on the
        same control plane may still be terminating: wait it out. Its ServiceAccount ``default``
        (which the ServiceAccount admission plugin looks up for every pod) is created here rather
        than awaited from kube-controller-manager; the pods mount no token, so none is needed."""

        async def created() -> bool:
            try:
                await self.admin.create(
                    NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
                )
                return True
            except AlreadyExists:
                with contextlib.suppress(NotFound):
                    return not (await self.admin.get(NAMESPACES, name))["metadata"].get("deletionTimestamp")
                return False

        await until(f"namespace {name} (an earlier one still terminating)", created, within=60)
        account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
        with contextlib.suppress(AlreadyExists):
            await self.admin.create(SERVICE_ACCOUNTS, account, namespace=name)

    async def _not_ready_lifted(self) -> None:
        """Until kube-controller-manager has lifted the not-ready taint from every new node.

        It lifts it with a patch that writes the node's whole taint list as the API server's cache
        gave it, with no precondition: lifted after the first wave's render, it would put the
        parked taints back under one scheduler's feet. Nodes stay Ready from then on; its
        unschedulable taint, which follows each render's cordon, is awaited by ``_settle``."""
        names = set(self.nodes)

        async def lifted() -> bool:
            return not any(
                n["metadata"]["name"] in names
                and any(t.get("key") == NOT_READY for t in n.get("spec", {}).get("taints") or [])
                for n in (await self.admin.list(NODES)).items
            )

        await until("the not-ready taint lifted from every fleet node", lifted, within=120)

    async def _ledgers_served(self) -> None:
        async def served() -> bool:
            with contextlib.suppress(NotFound):
                await self.admin.list(LEDGERS, limit=1)
                return True
            return False

        await until("the GPULedger CRD served", served, within=30)

    async def teardown(self) -> None:
        for task in (self._heartbeats, self._watching, self._caching):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

        async def delete(name: str) -> None:
            for resource in (NODES, LEDGERS):
                with contextlib.suppress(NotFound):
                    await self.admin.delete(resource, name)

        await gather_bounded((delete(n) for n in self.nodes), CONCURRENCY)
        for name in [namespace(s, side) for s in range(self.slots) for side in SIDES] + [BARRIER_NAMESPACE]:
            with contextlib.suppress(NotFound):
                await self.admin.delete(NAMESPACES, name)

    # -- a wave ------------------------------------------------------------------------------------
    async def run_wave(self, cases: list[tuple[int, Case]], *, alive: asyncio.Task[None]) -> list[Row]:
        """Run ``cases`` at once; ``alive`` is our controller's task (its failure fails the wave)."""
        self.wave += 1
        self._alive = alive
        try:
            await self._render_fleets(cases)
            await asyncio.gather(self._settle(), self._populate(cases))
            rows: dict[int, list[Row]] = {}
            running = dict(cases)
            for attempt in range(RERUNS + 1):
                if attempt:
                    self.reruns += len(running)
                    await self._settle()
                for step in range(max(len(c.nodes) for c in running.values())):
                    active = [(slot, case) for slot, case in running.items() if len(case.nodes) > step]
                    for slot, row in (await self._step(active, step)).items():
                        rows.setdefault(slot, []).append(row)
                # Every node write made while the cases ran has reached the cache (and its drift
                # check) once the cache shows one made after them.
                await self._barrier(kube=False)
                drifted = {slot: self._drifted[slot] for slot in running if slot in self._drifted}
                if not drifted:
                    return [row for slot, _ in cases for row in rows[slot]]
                running = {slot: running[slot] for slot in drifted}
                for slot in drifted:
                    rows.pop(slot, None)
            raise AssertionError(
                f"wave {self.wave}: nodes kept drifting from their render in {RERUNS + 1} runs: "
                + ", ".join(sorted(drifted.values()))
            )
        finally:
            await self._clear(cases)

    async def _heartbeat(self) -> None:
        """The kubelets' stand-in: the fleets outlive the node lifecycle controller's grace period,
        and a node turning Unknown mid-case would change the answer under one scheduler only."""
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "oracle"}
            body = {
                "status": {"conditions": [{**ready, "lastHeartbeatTime": now, "lastTransitionTime": now}]}
            }
            await gather_bounded(
                (self.admin.patch(NODES, n, body, subresource="status") for n in self.nodes), CONCURRENCY
            )

    async def _render_fleets(self, cases: list[tuple[int, Case]]) -> None:
        """Every fleet node as this wave's cases need it (parked where no case uses it). The first
        call creates the nodes; later calls write only the nodes whose part changed: the labels,
        taints and cordon by a JSON patch (``_write``), the allocatable through nodes/status."""
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        specs = {slot: case.nodes for slot, case in cases}

        async def render(slot: int, side: str, index: int) -> None:
            nodes = specs.get(slot, [])
            spec = nodes[index] if index < len(nodes) else None
            node, status = render_node(
                spec, fleet=self.fleet(slot, side), side=side, index=index, zone_key=zone_key(slot), now=now
            )
            name = node["metadata"]["name"]
            part = {"labels": node["metadata"]["labels"], **node["spec"]}
            allocatable = status["status"]["allocatable"]
            last = self._rendered.get(name)
            if last is None:
                try:
                    created = await self.admin.create(NODES, node)
                    last = Rendered(part, version=version_of(created))
                except AlreadyExists:  # left by an earlier run on this control plane
                    last = Rendered({})
                self._rendered[name] = last
            if part != last.part:
                await self._write(name, part)
            if allocatable != last.allocatable:
                written = await self.admin.patch(NODES, name, status, subresource="status")
                last.allocatable, last.echoed = allocatable, written["status"]["allocatable"]
                last.version = version_of(written)

        self._guarding = False
        await gather_bounded(
            (render(s, side, i) for s in range(self.slots) for side in SIDES for i in range(MAX_NODES)),
            CONCURRENCY,
        )

    async def _write(self, name: str, part: Obj) -> None:
        """The node's labels, taints and cordon, replaced whole (which also drops a taint
        kube-controller-manager added for a cordon the render does not have)."""
        ops = [
            {"op": "add", "path": "/metadata/labels", "value": part["labels"]},
            {"op": "add", "path": "/spec/taints", "value": part["taints"]},
            {"op": "add", "path": "/spec/unschedulable", "value": part["unschedulable"]},
        ]
        written = await self.admin.patch(NODES, name, ops, patch_type="json")
        self._rendered[name].part = part
        self._rendered[name].version = version_of(written)

    async def _settle(self) -> None:
        """Until our controller's node cache shows every fleet node as rendered and
        kube-controller-manager's unschedulable taint agrees with every cordon (its work on the
        render done), writing again a node another writer changed after us; then the barrier, so
        that kube-scheduler's cache has it all too. From then on a change is drift."""
        self._guarding = False
        self._unsettled = set(self._rendered)
        deadline = time.monotonic() + SETTLE_SECONDS
        while True:
            actions = {
                name: settle_action(self._node_cache.items.get(("", name)), self._rendered[name])
                for name in self._unsettled
            }
            self._unsettled = {name for name, action in actions.items() if action != "ok"}
            if not self._unsettled:
                break
            rewrite = [name for name, action in actions.items() if action == "write"]
            self.rewrites += len(rewrite)
            await gather_bounded((self._write(n, self._rendered[n].part) for n in rewrite), CONCURRENCY)
            if time.monotonic() > deadline:
                pending = sorted(self._unsettled)
                raise AssertionError(
                    f"{len(pending)} fleet nodes not as rendered in {SETTLE_SECONDS:.0f} s, e.g. "
                    + "; ".join(
                        f"{name}: {differences(self._node_cache.items.get(('', name)) or {}, self._rendered[name])}"
                        for name in pending[:3]
                    )
                )
            await asyncio.sleep(POLL_SECONDS)
        self._drifted.clear()
        self._guarding = True
        await self._barrier(kube=True)

    def _node_changed(self, event: InformerEvent) -> None:
        """The node cache's handler. While ``_settle`` waits, a changed fleet node is looked at
        again; after it, a fleet node changed away from its render (a heartbeat changes nothing
        rendered) marks its slot drifted."""
        name = key_of(event.object)[1]
        want = self._rendered.get(name)
        if want is None:
            return
        if not self._guarding:
            self._unsettled.add(name)
        elif event.type == "DELETED" or differences(event.object, want):
            self._drifted.setdefault(self._slot_of[name], name)

    async def _barrier(self, *, kube: bool) -> None:
        """Move the barrier node's label; wait until our controller's node cache shows it and, with
        ``kube``, until kube-scheduler has bound a pod that selects the new label. Each reads the
        nodes from one watch, in order, so each has then seen every node write made before."""
        self._barriers += 1
        token = f"b{self._barriers}"
        written = await self.admin.patch(
            NODES, BARRIER_NODE, {"metadata": {"labels": {BARRIER_LABEL: token}}}
        )
        version = version_of(written)
        if kube:
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"barrier-{token}", "labels": {ROLE_LABEL: "barrier"}},
                "spec": {
                    "containers": [{"name": "c", "image": "busybox"}],
                    "nodeSelector": {BARRIER_LABEL: token},
                    "terminationGracePeriodSeconds": 0,
                    "automountServiceAccountToken": False,
                },
            }
            await self.admin.create(PODS, pod, namespace=BARRIER_NAMESPACE)
        deadline = time.monotonic() + DECIDE_SECONDS
        while True:
            cached = self._node_cache.items.get(("", BARRIER_NODE))
            seen = cached is not None and version_of(cached) >= version
            barrier = self._probe_cache.items.get((BARRIER_NAMESPACE, f"barrier-{token}"))
            if seen and (not kube or (barrier is not None and barrier["spec"].get("nodeName"))):
                break
            if time.monotonic() > deadline:
                who = "our controller's node cache" if not seen else "kube-scheduler"
                raise AssertionError(f"{who} did not pass barrier {token} in {DECIDE_SECONDS:.0f} s")
            await asyncio.sleep(POLL_SECONDS)
        if kube:
            with contextlib.suppress(NotFound):
                await self.admin.delete(
                    PODS, f"barrier-{token}", namespace=BARRIER_NAMESPACE, grace_period_seconds=0
                )

    def _volume_name(self, slot: int, side: str) -> str:
        # Per wave: a deleted volume lingers until the PV protection controller lets it go.
        return f"oracle-w{self.wave}-{self.fleet(slot, side)}-pv"

    @property
    def _claim(self) -> str:
        # Per wave too: a deleted claim lingers (409 "object is being deleted") until the PVC
        # protection controller has seen that no pod uses it, which took longer than the step
        # between two waves on a loaded CI machine.
        return f"data-w{self.wave}"

    async def _populate(self, cases: list[tuple[int, Case]]) -> None:
        """The cases' volumes and the pods already on their nodes (bound there directly)."""

        async def populate(slot: int, case: Case, side: str) -> None:
            fleet, ns = self.fleet(slot, side), namespace(slot, side)
            if case.volume is not None:
                pv, pvc = render_volume(
                    case.volume,
                    name=self._volume_name(slot, side),
                    claim=self._claim,
                    fleet=fleet,
                    namespace=ns,
                    zone_key=zone_key(slot),
                )
                await self.admin.create(PERSISTENT_VOLUMES, pv)
                await self.admin.create(PERSISTENT_VOLUME_CLAIMS, pvc, namespace=ns)
            for k, (i, pod) in enumerate(case.existing):
                obj = render_pod(pod, name=f"existing-{k}", fleet=fleet, side=side, node=node_name(fleet, i))
                await self.admin.create(PODS, obj, namespace=ns)

        await gather_bounded((populate(s, c, side) for s, c in cases for side in SIDES), CONCURRENCY)
        await self._claims_bound(sum(2 for _, c in cases if c.volume is not None))

    async def _claims_bound(self, expected: int) -> None:
        """Until kube-controller-manager's PV controller has completed every claim's binding (only
        then do kube-scheduler and we treat a claim as bound)."""
        deadline = time.monotonic() + 60
        bound = 0
        while time.monotonic() < deadline:
            claims = (await self.admin.list(PERSISTENT_VOLUME_CLAIMS)).items
            bound = sum(
                1
                for c in claims
                if c["metadata"]["namespace"].startswith("oracle-")
                and c["metadata"]["name"] == self._claim
                and (c.get("status") or {}).get("phase") == "Bound"
                and "pv.kubernetes.io/bind-completed" in (c["metadata"].get("annotations") or {})
            )
            if bound >= expected:
                return
            await asyncio.sleep(0.2)
        raise AssertionError(f"{bound} of {expected} claims were bound in time")

    async def _step(self, active: list[tuple[int, Case]], step: int) -> dict[int, Row]:
        name = f"probe-{step}"

        async def create(slot: int, case: Case, side: str) -> None:
            obj = render_pod(
                case.probe,
                name=name,
                fleet=self.fleet(slot, side),
                side=side,
                probe=step,
                claim=self._claim if case.volume is not None else None,
            )
            obj["metadata"]["labels"][ROLE_LABEL] = "probe"
            await self.admin.create(PODS, obj, namespace=namespace(slot, side))

        await gather_bounded((create(s, c, side) for s, c in active for side in SIDES), CONCURRENCY)
        verdicts = await self._verdicts(active, name)
        await self._delete_probes(active, name)
        return {
            slot: Row(case.seed, step, case.features, verdicts[(slot, "ours")], verdicts[(slot, "kube")])
            for slot, case in active
        }

    def _probes(self) -> dict[tuple[int, str], Obj]:
        out = {}
        for pod in self._probe_cache.items.values():
            if pod["metadata"]["labels"].get(ROLE_LABEL) != "probe":
                continue
            _, slot, side = pod["metadata"]["namespace"].split("-")
            out[(int(slot[1:]), side)] = pod
        return out

    async def _verdicts(self, active: list[tuple[int, Case]], name: str) -> dict[tuple[int, str], Verdict]:
        """Both sides' probes: bound, or PodScheduled=False, as each scheduler wrote it."""
        wanted = {(slot, side) for slot, _ in active for side in SIDES}
        verdicts: dict[tuple[int, str], Verdict] = {}
        deadline = time.monotonic() + DECIDE_SECONDS
        while time.monotonic() < deadline:
            if self._alive is not None and self._alive.done():
                self._alive.result()  # its exception, if it failed
                raise AssertionError("our controller stopped")
            for key, pod in self._probes().items():
                if key not in wanted or key in verdicts or pod["metadata"]["name"] != name:
                    continue
                if pod["spec"].get("nodeName"):
                    verdicts[key] = Verdict(True)
                elif (c := _condition(pod)) is not None:
                    verdicts[key] = Verdict(False, str(c.get("message")))
            if len(verdicts) == len(wanted):
                return verdicts
            await asyncio.sleep(POLL_SECONDS)
        late = Counter(side for _, side in wanted - verdicts.keys())
        who = {"ours": "our controller", "kube": "kube-scheduler"}
        raise AssertionError(
            "; ".join(f"{who[side]} left {n} probes undecided" for side, n in sorted(late.items()))
        )

    async def _delete_probes(self, active: Iterable[tuple[int, Case]], name: str) -> None:
        async def delete(slot: int, side: str) -> None:
            with contextlib.suppress(NotFound):
                await self.admin.delete(PODS, name, namespace=namespace(slot, side), grace_period_seconds=0)

        await gather_bounded((delete(slot, side) for slot, _ in active for side in SIDES), CONCURRENCY)
        deadline = time.monotonic() + 20
        while any(p["metadata"]["name"] == name for p in self._probes().values()):
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} pods were not deleted")
            await asyncio.sleep(0.05)

    async def _clear(self, cases: list[tuple[int, Case]]) -> None:
        """The wave's pods, claims and volumes; the nodes stay for the next wave."""

        async def clear(slot: int, case: Case, side: str) -> None:
            ns = namespace(slot, side)
            for pod in (await self.admin.list(PODS, namespace=ns)).items:
                with contextlib.suppress(NotFound):
                    await self.admin.delete(
                        PODS, pod["metadata"]["name"], namespace=ns, grace_period_seconds=0
                    )
            if case.volume is not None:
                with contextlib.suppress(NotFound):
                    await self.admin.delete(PERSISTENT_VOLUME_CLAIMS, self._claim, namespace=ns)
                with contextlib.suppress(NotFound):
                    await self.admin.delete(PERSISTENT_VOLUMES, self._volume_name(slot, side))

        await gather_bounded((clear(slot, case, side) for slot, case in cases for side in SIDES), CONCURRENCY)
