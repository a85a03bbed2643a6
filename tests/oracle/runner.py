"""Run oracle cases on a real control plane: kube-scheduler places the plain twin, our controller
(in-process, ``run_controller`` as ``serve controller`` runs it: informers, leader Lease, binder)
the vGPU twin. Both run on their own; the oracle only creates pods and reads the verdicts.

Cases run in waves of ``slots`` at once. Each slot owns two fleets of ``MAX_NODES`` nodes (one
per side, never shared), created once and re-rendered for every wave's case: a node the case does
not use is parked (no label, so no pod selects or counts it). Every node carries a probe-only
NoSchedule taint whose value is its index. Step ``j`` creates the probe pod on both sides
tolerating only value ``j`` (so node ``j`` is the only candidate), and reads the verdicts from the
API: bound, or ``PodScheduled=False``. No node changes while a case runs, so kube-scheduler never
judges with a stale node cache (pods reach it in order on one watch stream). Probe pods are
deleted before the next step, so each node is judged against the fleet's existing pods alone.

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
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.bounded import gather_bounded
from vgpu_guard.kube.errors import AlreadyExists, NotFound
from vgpu_guard.kube.informer import Informer
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

Obj = dict[str, Any]
SIDES = ("kube", "ours")
ROLE_LABEL = "oracle.vgpu-guard.io/role"
NOT_READY = "node.kubernetes.io/not-ready"
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
        self._rendered: dict[str, tuple[Obj | None, Obj | None]] = {}  # name -> (node part, allocatable)
        self._alive: asyncio.Task[None] | None = None
        self._heartbeats: asyncio.Task[None] | None = None
        # The probes as both schedulers leave them, from one watch: polling with a LIST read every
        # pod of every namespace from etcd 20 times a second, a fifth of the API server's work.
        self._probe_cache = Informer(admin, PODS, label_selector=f"{ROLE_LABEL}=probe")
        self._watching: asyncio.Task[None] | None = None

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
        names = [namespace(s, side) for s in range(self.slots) for side in SIDES]
        await gather_bounded((self._namespace(name) for name in names), CONCURRENCY)
        await self._ledgers_served()
        await self._render_fleets([])
        await self._not_ready_lifted()
        self._heartbeats = asyncio.create_task(self._heartbeat())
        self._watching = asyncio.create_task(self._probe_cache.run())
        await asyncio.wait_for(self._probe_cache.wait_synced(), 30)

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

        It lifts it with a patch that writes the node's whole taint list as its cache last saw it,
        with no precondition: lifted after the first wave's render, it would put the parked taints
        back under one scheduler's feet. Nodes stay Ready from then on, so it never patches the
        taints again (a cordon's taint is added on the render's own update, seconds before any
        probe, and is tolerated alike by both schedulers)."""
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
        for task in (self._heartbeats, self._watching):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

        async def delete(name: str) -> None:
            for resource in (NODES, LEDGERS):
                with contextlib.suppress(NotFound):
                    await self.admin.delete(resource, name)

        await gather_bounded((delete(n) for n in self.nodes), CONCURRENCY)
        for slot in range(self.slots):
            for side in SIDES:
                with contextlib.suppress(NotFound):
                    await self.admin.delete(NAMESPACES, namespace(slot, side))

    # -- a wave ------------------------------------------------------------------------------------
    async def run_wave(self, cases: list[tuple[int, Case]], *, alive: asyncio.Task[None]) -> list[Row]:
        """Run ``cases`` at once; ``alive`` is our controller's task (its failure fails the wave)."""
        self.wave += 1
        self._alive = alive
        try:
            await self._render_fleets(cases)
            await self._populate(cases)
            rows: list[Row] = []
            for step in range(max(len(c.nodes) for _, c in cases)):
                active = [(slot, case) for slot, case in cases if len(case.nodes) > step]
                rows.extend(await self._step(active, step))
            return rows
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
        taints and cordon by a JSON patch (which replaces them whole, and so also drops a taint
        kube-controller-manager added for a cordon the new case does not have), the allocatable
        through nodes/status."""
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
                    await self.admin.create(NODES, node)
                    last = (part, None)
                except AlreadyExists:  # left by an earlier run on this control plane
                    last = (None, None)
            if part != last[0]:
                ops = [
                    {"op": "add", "path": "/metadata/labels", "value": part["labels"]},
                    {"op": "add", "path": "/spec/taints", "value": part["taints"]},
                    {"op": "add", "path": "/spec/unschedulable", "value": part["unschedulable"]},
                ]
                await self.admin.patch(NODES, name, ops, patch_type="json")
            if allocatable != last[1]:
                await self.admin.patch(NODES, name, status, subresource="status")
            self._rendered[name] = (part, allocatable)

        await gather_bounded(
            (render(s, side, i) for s in range(self.slots) for side in SIDES for i in range(MAX_NODES)),
            CONCURRENCY,
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

    async def _step(self, active: list[tuple[int, Case]], step: int) -> list[Row]:
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
        return [
            Row(case.seed, step, case.features, verdicts[(slot, "ours")], verdicts[(slot, "kube")])
            for slot, case in active
        ]

    def _probes(self) -> dict[tuple[int, str], Obj]:
        out = {}
        for pod in self._probe_cache.items.values():
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
