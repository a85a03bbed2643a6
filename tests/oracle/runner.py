"""Run oracle cases on a real control plane: kube-scheduler places the plain twin, our controller
(in-process, ``run_controller`` as ``serve controller`` runs it: informers, leader Lease, binder)
the vGPU twin. Both run on their own; the oracle only creates pods and reads the verdicts.

Cases run in waves of ``slots`` at once. Each case gets two fleets (one per side, never shared),
every node tainted with a probe-only NoSchedule taint whose value is its index. Step ``j`` creates
the probe pod on both sides tolerating only value ``j`` (so node ``j`` is the only candidate), and
reads the verdicts from the API: bound, or ``PodScheduled=False``. No node changes while a case
runs, so kube-scheduler never judges with a stale node cache (pods reach it in order on one watch
stream). Probe pods are deleted before the next step, so each node is judged against the fleet's
existing pods alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from tests.oracle.cases import (
    CLAIM,
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
from vgpu_guard.kube.resources import (
    CRDS,
    LEDGERS,
    NAMESPACES,
    NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    PODS,
    Resource,
)

Obj = dict[str, Any]
SIDES = ("kube", "ours")
ROLE_LABEL = "oracle.vgpu-guard.io/role"
HEARTBEAT_SECONDS = 15.0
DECIDE_SECONDS = 30.0
POLL_SECONDS = 0.05
CONCURRENCY = 32  # requests in flight at once
RUNTIME_CLASSES = Resource("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", namespaced=False)
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount", namespaced=True)
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
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return c
    return None


class Oracle:
    def __init__(self, admin: AioClusterClient, slots: int) -> None:
        self.admin = admin
        self.slots = slots
        # Fleets are named per wave: a node name the node lifecycle controller saw deleted a moment
        # ago would come back with that node's stale health record.
        self.wave = 0
        self._alive: asyncio.Task[None] | None = None

    def fleet(self, slot: int, side: str) -> str:
        return f"w{self.wave}-s{slot}-{side}"

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
        for name in names:
            with contextlib.suppress(AlreadyExists):
                await self.admin.create(
                    NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
                )
        for name in names:
            await self._account_ready(name)
        await self._ledgers_served()

    async def _account_ready(self, ns: str) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(NotFound):
                account = await self.admin.get(SERVICE_ACCOUNTS, "default", namespace=ns)
                if account.get("secrets"):
                    return
            await asyncio.sleep(0.2)
        raise AssertionError(f"ServiceAccount {ns}/default got no token")

    async def _ledgers_served(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(NotFound):
                await self.admin.list(LEDGERS, limit=1)
                return
            await asyncio.sleep(0.2)
        raise AssertionError("the GPULedger CRD is not served")

    async def teardown(self) -> None:
        for slot in range(self.slots):
            for side in SIDES:
                with contextlib.suppress(NotFound):
                    await self.admin.delete(NAMESPACES, namespace(slot, side))

    # -- a wave ------------------------------------------------------------------------------------
    async def run_wave(self, cases: list[tuple[int, Case]], *, alive: asyncio.Task[None]) -> list[Row]:
        """Run ``cases`` at once; ``alive`` is our controller's task (its failure fails the wave)."""
        self.wave += 1
        self._alive = alive
        nodes = [
            node_name(self.fleet(s, side), i) for s, c in cases for side in SIDES for i in range(len(c.nodes))
        ]
        try:
            await self._create_fleets(cases)
            async with _background(self._heartbeat(nodes)):
                rows: list[Row] = []
                for step in range(max(len(c.nodes) for _, c in cases)):
                    active = [(slot, case) for slot, case in cases if len(case.nodes) > step]
                    rows.extend(await self._step(active, step))
                return rows
        finally:
            await self._delete_fleets(cases)

    async def _heartbeat(self, nodes: list[str]) -> None:
        """The kubelets' stand-in: a wave outlasts the node lifecycle controller's grace period,
        and a node turning Unknown mid-case would change the answer under one scheduler only."""
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "oracle"}
            body = {
                "status": {"conditions": [{**ready, "lastHeartbeatTime": now, "lastTransitionTime": now}]}
            }
            await gather_bounded(
                (self.admin.patch(NODES, n, body, subresource="status") for n in nodes), CONCURRENCY
            )

    async def _create_fleets(self, cases: list[tuple[int, Case]]) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

        async def create(slot: int, case: Case, side: str) -> None:
            fleet = self.fleet(slot, side)
            for i, spec in enumerate(case.nodes):
                node, status = render_node(
                    spec, fleet=fleet, side=side, index=i, zone_key=zone_key(slot), now=now
                )
                await self.admin.create(NODES, node)
                await self.admin.patch(NODES, node["metadata"]["name"], status, subresource="status")
            if case.volume is not None:
                pv, pvc = render_volume(
                    case.volume, fleet=fleet, namespace=namespace(slot, side), zone_key=zone_key(slot)
                )
                await self.admin.create(PERSISTENT_VOLUMES, pv)
                await self.admin.create(PERSISTENT_VOLUME_CLAIMS, pvc, namespace=namespace(slot, side))
            for k, (i, pod) in enumerate(case.existing):
                obj = render_pod(pod, name=f"existing-{k}", fleet=fleet, side=side, node=node_name(fleet, i))
                await self.admin.create(PODS, obj, namespace=namespace(slot, side))

        await gather_bounded((create(s, c, side) for s, c in cases for side in SIDES), CONCURRENCY)
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
                claim=case.volume is not None,
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

    async def _probes(self) -> dict[tuple[int, str], Obj]:
        pods = (await self.admin.list(PODS, label_selector=f"{ROLE_LABEL}=probe")).items
        out = {}
        for pod in pods:
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
            for key, pod in (await self._probes()).items():
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
        while any(p["metadata"]["name"] == name for p in (await self._probes()).values()):
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} pods were not deleted")
            await asyncio.sleep(0.05)

    async def _delete_fleets(self, cases: list[tuple[int, Case]]) -> None:
        async def delete(slot: int, case: Case, side: str) -> None:
            ns = namespace(slot, side)
            for pod in (await self.admin.list(PODS, namespace=ns)).items:
                with contextlib.suppress(NotFound):
                    await self.admin.delete(
                        PODS, pod["metadata"]["name"], namespace=ns, grace_period_seconds=0
                    )
            if case.volume is not None:
                with contextlib.suppress(NotFound):
                    await self.admin.delete(PERSISTENT_VOLUME_CLAIMS, CLAIM, namespace=ns)
                with contextlib.suppress(NotFound):
                    await self.admin.delete(PERSISTENT_VOLUMES, f"oracle-{self.fleet(slot, side)}-pv")
            for i in range(len(case.nodes)):
                name = node_name(self.fleet(slot, side), i)
                with contextlib.suppress(NotFound):
                    await self.admin.delete(NODES, name)
                with contextlib.suppress(NotFound):
                    await self.admin.delete(LEDGERS, name)

        await gather_bounded(
            (delete(slot, case, side) for slot, case in cases for side in SIDES), CONCURRENCY
        )


@contextlib.asynccontextmanager
async def _background(coro: Awaitable[None]) -> AsyncIterator[None]:
    task = asyncio.ensure_future(coro)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
