"""Binds per second and pod -> bound latency: our controller against kube-scheduler, same control plane.

    .venv/bin/python bench/scheduler_throughput_bench.py [--nodes 100] [--pods 2000] [--rate 300]
        [--qps 500,0,50] [--latency-rates 50,200] [--latency-sides floor,ledger,ours] [--smoke]
        [--heartbeats spread|burst]

For each client rate limit (``--qps``; 0 = unthrottled, given to kube-scheduler as 100,000) a fresh
real control plane (kube-apiserver, kube-controller-manager, kube-scheduler 1.20.2 built by
``scripts/control-plane build``) gets N fake Ready nodes (heartbeated every 10 s, all in one burst
unless ``--heartbeats spread``; each registers 8 vGPU cards with the device plugin's annotation)
and, one after the other in the same run:

* ``kube-scheduler``: a stream of plain pods (10m CPU) into its own namespace;
* ``protocol floor``: the same vGPU pods as ours, bound by this process as each create returns
  (next node in turn, our Binding's annotations, one Event) and confirmed by the stand-in: no
  decision, no ledger. What the device plugin's handshake alone costs the shared cores, so the
  best any vGPU scheduler could reach here (``ProtocolFloor``);
* ``protocol floor + a CAS ledger write per pod``: the same, plus the node's GPULedger written with
  the pod's entry (compare-and-swap, encoded as our controller encodes it) before each Binding:
  what issue 19 requires before every bind, and nothing else;
* ``vgpu-guard``: ``vgpu-guard serve controller`` as a subprocess with the same QPS/burst, and a
  stream of vGPU pods (1 vGPU, 1024 MiB) with ``schedulerName: vgpu-guard``; a device-plugin stand-in
  in this process confirms each assignment at once (``bind-phase=success``), as the real plugin does
  after the kubelet's Allocate.

Measured from one watch per side: pod created (the create request returned) -> first event showing
``spec.nodeName``; p50/p99 latency, and sustained binds/s = pods / (last bind - first create).
Requests per bind: the API server's own ``apiserver_request_total`` delta over the run, minus the
requests this bench sent itself (pod creates, stand-in patches, heartbeats), split into Events and
the rest. The ratio row is ours / kube-scheduler's in the same run.

``--latency-rates``: at the first QPS, pods at a fixed rate for 60 s (``--latency-seconds``) for both
floors and our side: p50/p99 and whether a backlog grew (pods still unbound at the end). Each
latency row says which share of all waits, and of the slowest 1 %, overlapped a heartbeat PATCH,
and when the slowest were created (``waits_overlapping_heartbeats``). Session 17, bursts: 27-60 % of
our slowest 1 % and 90 % of the protocol floor's overlapped one, against 2 % of all waits; so part
of every side's tail is the API server busy with 100 status PATCHes at once, not a scheduler's work.
(Spread, most waits overlap some PATCH and the shares say little.)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from vgpu_guard.controlplane.build import cached_binaries, ensure_built
from vgpu_guard.controlplane.launch import ControlPlane, free_port
from vgpu_guard.engine.assignment import allocation_annotations
from vgpu_guard.engine.cluster import NodeInfo, node_info
from vgpu_guard.engine.ledger import Allocation, ContainerGrant, DeviceGrant, NodeLedger, decode_ledger
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.bounded import gather_bounded
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.errors import AlreadyExists, Conflict, KubeError, NotFound
from vgpu_guard.kube.ledger_writer import LedgerWriter
from vgpu_guard.kube.ratelimit import RateLimitedClient, bucket
from vgpu_guard.kube.resources import CRDS, EVENTS, LEDGERS, NAMESPACES, NODES, PODS, SERVICE_ACCOUNTS

Obj = dict[str, Any]
ROOT = Path(__file__).resolve().parents[1]
CRD_DIR = ROOT / "vgpu_guard" / "data" / "crds"
GPUS = 8
HEARTBEAT_SECONDS = 10
UNTHROTTLED = 100_000


@dataclass
class Settle:
    """Fixed waits of each side, s: for its watch to open before its first pod, and for its last
    confirmations to land before its requests are counted. ``--smoke`` shortens them: a smoke run
    proves the script runs and reports, its numbers are not read."""

    watch: float = 0.5
    confirmations: float = 1.0


SETTLE = Settle()


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_objects(name: str) -> tuple[Obj, Obj]:
    # 30 slices a card (24 GiB at 1 GiB a pod): a 60 s run at 200 pods/s fits a 100-node fleet.
    records = "".join(f"GPU-{name}-{i},30,24576,NVIDIA-NVIDIA A10,true,hami-core:" for i in range(GPUS))
    allocatable = {
        "cpu": "64",
        "memory": "512Gi",
        "pods": "250",
        "volcano.sh/vgpu-number": str(30 * GPUS),
        "volcano.sh/vgpu-memory": str(24576 * GPUS),
        "volcano.sh/vgpu-cores": str(100 * GPUS),
    }
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name},
            "annotations": {"volcano.sh/node-vgpu-register": records},
        },
        "spec": {},
    }
    now = _now()
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "bench"}
    status = {
        "status": {
            "capacity": allocatable,
            "allocatable": allocatable,
            "conditions": [{**ready, "lastHeartbeatTime": now, "lastTransitionTime": now}],
        }
    }
    return node, status


def pod_object(name: str, *, ours: bool, scheduler_name: str = "vgpu-guard") -> Obj:
    container: Obj = {"name": "main", "image": "registry.k8s.io/pause:3.9"}
    if ours:
        container["resources"] = {
            "limits": {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "1024"},
            "requests": {"cpu": "10m"},
        }
    else:
        container["resources"] = {"requests": {"cpu": "10m"}}
    spec: Obj = {"containers": [container]}
    if ours:
        spec["schedulerName"] = scheduler_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@contextlib.asynccontextmanager
async def background(coro: Awaitable[None]) -> AsyncIterator[None]:
    task = asyncio.ensure_future(coro)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


# -- the fleet ------------------------------------------------------------------------------------


class Fleet:
    def __init__(self, admin: AioClusterClient, count: int) -> None:
        self.admin = admin
        self.names = [f"node-{i:04d}" for i in range(count)]
        self.requests = 0
        # (start, end) of each heartbeat burst (or PATCH, spread), monotonic: what the slowest
        # pods waited beside.
        self.bursts: list[tuple[float, float]] = []

    async def create(self) -> None:
        async def one(name: str) -> None:
            node, status = node_objects(name)
            await self.admin.create(NODES, node)
            await self.admin.patch(NODES, name, status, subresource="status")

        await gather_bounded((one(n) for n in self.names), 32)
        # New nodes carry node.kubernetes.io/not-ready until the lifecycle controller saw them Ready.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            page = await self.admin.list(NODES)
            tainted = [n for n in page.items if (n.get("spec") or {}).get("taints")]
            if not tainted:
                return
            await asyncio.sleep(1)
        raise RuntimeError("nodes kept their not-ready taint for 120 s")

    async def heartbeat(self, *, spread: bool = False) -> None:
        """Every node's Ready condition renewed every ``HEARTBEAT_SECONDS``. ``spread``: each node
        at its own moment of the period, as kubelets, started at different times, do; else all in
        one burst (32 at a time), the herd earlier sessions' numbers were measured beside."""
        if not spread:
            while True:
                await asyncio.sleep(HEARTBEAT_SECONDS)
                started = time.monotonic()
                await gather_bounded((self._beat(n) for n in self.names), 32)
                self.bursts.append((started, time.monotonic()))
        step = HEARTBEAT_SECONDS / max(1, len(self.names))
        beats: set[asyncio.Task[None]] = set()
        due = time.monotonic()
        while True:
            for name in self.names:
                due += step
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                beat = asyncio.ensure_future(self._timed_beat(name))
                beats.add(beat)
                beat.add_done_callback(beats.discard)

    async def _timed_beat(self, name: str) -> None:
        started = time.monotonic()
        await self._beat(name)
        self.bursts.append((started, time.monotonic()))

    async def _beat(self, name: str) -> None:
        now = _now()
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "bench"}
        body = {"status": {"conditions": [{**ready, "lastHeartbeatTime": now, "lastTransitionTime": now}]}}
        self.requests += 1
        await self.admin.patch(NODES, name, body, subresource="status")


# -- the protocol floor -----------------------------------------------------------------------------


class ProtocolFloor:
    """What any vGPU scheduler must send per pod under the device plugin's handshake, and no more.

    Each vGPU pod is bound as its create returns, to the next node in turn, with the same
    assignment annotations our controller writes on its Binding, and gets one Event; the stand-in
    confirms it as it confirms ours. No decision, no ledger, no informer: the machine's cost per
    bind here is what the handshake itself costs the shared cores (the API server's work on the
    larger pods and the plugin's PATCH). kube-scheduler's plain pods need neither, so its binds/s
    above this floor's is a bound no vGPU scheduler on the same two cores can pass.
    """

    def __init__(
        self, admin: AioClusterClient, nodes: list[str], *, qps: int, burst: int, ledgers: bool = False
    ) -> None:
        # Binds and Events on buckets of their own, as our controller and kube-scheduler split them.
        self.client = RateLimitedClient(
            admin, bucket(qps, burst), events=bucket(qps, burst)
        ) if qps else admin  # fmt: skip
        self.nodes = nodes
        self.sent = 0
        # With ``ledgers``: before each Binding, the node's GPULedger gets the pod's entry in one
        # compare-and-swap write through the product's ledger writer (summary included), one write
        # at a time per node: the write issue 19 requires before every bind, and nothing else.
        self.ledgers: dict[str, NodeLedger] | None = {} if ledgers else None
        self._locks: dict[str, asyncio.Lock] = {}
        self._infos = _node_infos(nodes) if ledgers else {}
        self._writer = LedgerWriter(self.client, memory_factor=1, writer="bench")

    async def bind(self, pod: Obj) -> None:
        meta = pod["metadata"]
        turn, self.sent = self.sent, self.sent + 1
        node = self.nodes[turn % len(self.nodes)]
        card = f"GPU-{node}-{(turn // len(self.nodes)) % GPUS}"
        entry = Allocation(
            pod_uid=meta["uid"],
            namespace=meta["namespace"],
            name=meta["name"],
            queue="default",
            containers=(ContainerGrant(0, "main", (DeviceGrant(card, 1024, 0),)),),
        )
        notes = allocation_annotations(entry, node=node, now=int(time.time()))
        client: ClusterClient = self.client
        if self.ledgers is not None:
            held = replace(entry, committed=True, reserved_at=int(time.time()))
            await self._write_ledger(node, held)
        await client.bind(meta["namespace"], meta["name"], node=node, annotations=notes, uid=meta["uid"])
        await client.create(EVENTS, _scheduled_event(pod, node), namespace=meta["namespace"])

    async def _write_ledger(self, node: str, entry: Allocation) -> None:
        assert self.ledgers is not None
        async with self._locks.setdefault(node, asyncio.Lock()):
            old = self.ledgers.get(node) or NodeLedger(node=node)
            new = old.with_allocation(entry)
            written = await self._writer.write(old, new, self._infos[node])
            assert written is not None  # the ledger holds an entry: the writer always sends it
            self.ledgers[node] = replace(new, resource_version=written["metadata"]["resourceVersion"])


def _node_infos(names: list[str]) -> dict[str, NodeInfo]:
    """The fleet's nodes parsed as the controller parses them (for the ledger summaries)."""
    from vgpu_guard.configfile import load_config

    config = load_config(env={})
    infos = {}
    for name in names:
        node, status = node_objects(name)
        infos[name] = node_info({**node, **status}, config)
    return infos


async def delete_ledgers(admin: AioClusterClient) -> None:
    """Remove the ledgers a floor run wrote: our controller must start on an empty fleet."""
    listed = await admin.list(LEDGERS)

    async def delete(name: str) -> None:
        with contextlib.suppress(NotFound):
            await admin.delete(LEDGERS, name)

    await gather_bounded((delete(o["metadata"]["name"]) for o in listed.items), 32)


def _scheduled_event(pod: Obj, node: str) -> Obj:
    meta = pod["metadata"]
    now = _now()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
        },
        "reason": "Scheduled",
        "message": f"Successfully assigned {meta['namespace']}/{meta['name']} to {node}",
        "type": "Normal",
        "count": 1,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "source": {"component": "protocol-floor"},
    }


# -- measuring ------------------------------------------------------------------------------------


@dataclass
class Side:
    namespace: str
    created: dict[str, float] = field(default_factory=dict)
    bound: dict[str, float] = field(default_factory=dict)
    confirmations: int = 0
    all_bound: asyncio.Event = field(default_factory=asyncio.Event)
    expected: int = 0
    # Requests the overloaded API server refused or timed out (a run goes on and reports them).
    failed: dict[str, int] = field(default_factory=dict)

    def failure(self, what: str) -> None:
        self.failed[what] = self.failed.get(what, 0) + 1

    def latencies_ms(self) -> list[float]:
        return sorted((self.bound[n] - self.created[n]) * 1000 for n in self.bound if n in self.created)


async def watch_binds(admin: AioClusterClient, side: Side, *, confirm: bool) -> None:
    """Record when each pod is first seen bound; as the plugin stand-in, confirm ours at once."""
    listed = await admin.list(PODS, namespace=side.namespace, limit=1)
    rv = listed.resource_version
    pending_confirms: set[asyncio.Task[None]] = set()
    while True:
        try:
            async for event in admin.watch(
                PODS, namespace=side.namespace, resource_version=rv, timeout_seconds=600
            ):
                obj = event.object
                meta = obj.get("metadata") or {}
                rv = meta.get("resourceVersion") or rv
                name = meta.get("name")
                if event.type == "BOOKMARK" or not name:
                    continue
                node = (obj.get("spec") or {}).get("nodeName")
                if node and name not in side.bound:
                    side.bound[name] = time.monotonic()
                    if len(side.bound) >= side.expected > 0:
                        side.all_bound.set()
                notes = meta.get("annotations") or {}
                if confirm and node and notes.get("volcano.sh/bind-phase") == "allocating":
                    task = asyncio.ensure_future(_confirm(admin, side, name))
                    pending_confirms.add(task)
                    task.add_done_callback(pending_confirms.discard)
        except (NotFound, Conflict):
            return


async def _confirm(admin: AioClusterClient, side: Side, name: str) -> None:
    body = {"metadata": {"annotations": {"volcano.sh/bind-phase": "success"}}}
    try:
        await admin.patch(PODS, name, body, namespace=side.namespace)
        side.confirmations += 1
    except NotFound:
        pass
    except KubeError:
        side.failure("confirmations")


async def stream(
    admin: AioClusterClient,
    side: Side,
    *,
    count: int,
    rate: float,
    ours: bool,
    prefix: str,
    scheduler_name: str = "vgpu-guard",
    on_created: Callable[[Obj], Awaitable[None]] | None = None,
) -> None:
    """Create ``count`` pods at ``rate``/s (each create may overlap the next; the schedule is kept).
    ``on_created``: called with each created pod (the protocol floor binds it there)."""
    start = time.monotonic()
    tasks = []

    async def create(name: str) -> None:
        body = pod_object(name, ours=ours, scheduler_name=scheduler_name)
        try:
            created = await admin.create(PODS, body, namespace=side.namespace)
        except KubeError:
            side.failure("creates")  # never created: not waited for, not counted
            side.expected -= 1
            if len(side.bound) >= side.expected > 0:
                side.all_bound.set()
            return
        side.created[name] = time.monotonic()
        if on_created is not None:
            try:
                await on_created(created)
            except KubeError:
                side.failure("floor binds")

    for i in range(count):
        due = start + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(create(f"{prefix}-{i:05d}")))
    await asyncio.gather(*tasks)


def cpu_seconds(pid: int) -> float:
    """User + system CPU a process has used so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_by_process(plane: ControlPlane, scheduler_pid: int | None) -> dict[str, float]:
    """CPU seconds so far of each process a side's binds cost: the control plane's, this bench's
    own (creates, the watch, the plugin stand-in), and our controller's when it runs."""
    out = {name: cpu_seconds(pid) for name, pid in plane.pids().items()}
    out["bench"] = time.process_time()
    if scheduler_pid is not None:
        out["vgpu-guard"] = cpu_seconds(scheduler_pid)
    return out


def apiserver_requests(plane: ControlPlane) -> dict[str, float]:
    """``apiserver_request_total`` summed: all mutating requests and Event creates; and each
    (verb, resource) apart, to see what a side's binds cost the API server."""
    ctx = ssl.create_default_context(cafile=str(plane.ca_file))
    req = urllib.request.Request(
        plane.server + "/metrics", headers={"Authorization": f"Bearer {plane.admin_token}"}
    )
    text = urllib.request.urlopen(req, context=ctx, timeout=30).read().decode()
    out: dict[str, float] = {"total": 0.0, "events": 0.0}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels, value = line.rsplit(" ", 1)
        inner = labels[len("apiserver_request_total{") : -1]
        fields = dict(part.split("=", 1) for part in inner.split(",") if "=" in part)
        kind = f"{fields.get('verb', '').strip(chr(34))} {fields.get('resource', '').strip(chr(34))}"
        subresource = fields.get("subresource", "").strip(chr(34))
        kind += f"/{subresource}" if subresource else ""
        out[kind] = out.get(kind, 0.0) + float(value)
        if 'verb="WATCH"' in labels or 'verb="LIST"' in labels:
            continue
        out["total"] += float(value)
        if 'resource="events"' in labels and 'verb="POST"' in labels:
            out["events"] += float(value)
    return out


def during_bursts(side: Side, bursts: list[tuple[float, float]]) -> dict[str, Any] | None:
    """Share of all pods, and of the slowest 1 %, whose wait (created -> bound) overlapped a
    heartbeat burst: when the tail's share is far above the base rate, the tail is the API server
    busy with the fleet's status PATCHes, not the scheduler's own work."""
    waits = [(side.created[n], side.bound[n]) for n in side.bound if n in side.created]
    if not waits or not bursts:
        return None
    waits.sort(key=lambda w: w[1] - w[0])
    tail = waits[-max(1, len(waits) // 100) :]
    # Only this side's bursts: the fleet's list spans the whole run (10 a second when spread).
    first, last = min(c for c, _ in waits), max(b for _, b in waits)
    bursts = [(s, e) for s, e in bursts if s <= last and first <= e]

    def share(group: list[tuple[float, float]]) -> float:
        hit = sum(1 for c, b in group if any(s <= b and c <= e for s, e in bursts))
        return round(hit / len(group), 3)

    # When the slowest were created (s from the first create), sorted: one stall shows as a run of
    # neighbours, scattered ones as a spread.
    at = sorted(round(c - first, 1) for c, _ in tail)
    return {"all": share(waits), "slowest_1pct": share(tail), "slowest_created_s": at}


def summarize(
    side: Side,
    requests: dict[str, float],
    own_requests: int,
    cpu: dict[str, float],
    bursts: list[tuple[float, float]] | None = None,
) -> dict[str, Any]:
    lat = side.latencies_ms()
    binds = len(side.bound)
    first_create = min(side.created.values()) if side.created else 0.0
    last_bind = max(side.bound.values()) if side.bound else first_create
    span = max(last_bind - first_create, 1e-9)
    others = requests["total"] - requests["events"] - own_requests
    return {
        "pods": len(side.created),
        "bound": binds,
        "seconds": round(span, 2),
        "binds_per_s": round(binds / span, 1),
        "p50_ms": round(statistics.median(lat), 1) if lat else None,
        "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 1) if lat else None,
        "requests_per_bind": round(others / binds, 2) if binds else None,
        "events_per_bind": round(requests["events"] / binds, 2) if binds else None,
        # CPU milliseconds per bind of every process on the machine's cores (the API server and
        # etcd serve both sides; "bench" is this process: creates, the watch, the stand-in).
        "cpu_ms_per_bind": {k: round(v * 1000 / binds, 2) for k, v in cpu.items()} if binds else None,
        "requests": {k: v for k, v in sorted(requests.items()) if v and k not in ("total", "events")},
        "failed": dict(side.failed),
        "waits_overlapping_heartbeats": during_bursts(side, bursts or []),
    }


# -- the two schedulers -----------------------------------------------------------------------------


async def clear(admin: AioClusterClient, side: Side, *, controller: bool) -> None:
    """Force-delete the run's pods (no kubelet would ever confirm a graceful delete), so the next
    run starts on an empty fleet. With our controller running (``controller``), until its ledgers
    hold none of them: it releases them as it sees them go (a side without it has no ledger entry
    to wait for: the floor's ledgers are deleted after it)."""

    async def delete(name: str) -> None:
        with contextlib.suppress(NotFound):
            await admin.delete(PODS, name, namespace=side.namespace, grace_period_seconds=0)

    await gather_bounded((delete(n) for n in side.created), 32)
    if controller:
        await ledgers_released(admin, side.namespace)


async def ledgers_released(admin: AioClusterClient, namespace: str, *, within: float = 30.0) -> None:
    """Until no GPULedger holds an entry of a pod in ``namespace``, or ``within`` s have passed
    (the next side then starts beside the leftovers, as it did after the fixed 2 s this replaced)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        listed = await admin.list(LEDGERS)
        held = [
            a
            for obj in listed.items
            for a in decode_ledger(obj).allocations.values()
            if a.namespace == namespace
        ]
        if not held:
            return
        await asyncio.sleep(0.1)


async def namespace_ready(admin: AioClusterClient, name: str) -> None:
    with contextlib.suppress(AlreadyExists):
        await admin.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(NotFound):
            account = await admin.get(SERVICE_ACCOUNTS, "default", namespace=name)
            if account.get("secrets"):
                return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"no default ServiceAccount token in {name}")


async def run_side(
    plane: ControlPlane,
    admin: AioClusterClient,
    fleet: Fleet,
    *,
    ours: bool,
    pods: int,
    rate: float,
    tag: str,
    scheduler_pid: int | None = None,
    floor: ProtocolFloor | None = None,
) -> dict[str, Any]:
    """One side's stream, measured; ``floor``: vGPU pods bound by the protocol floor instead of a
    scheduler (``ours`` must be True: the stand-in confirms them)."""
    label = "floor" if floor is not None else "ours" if ours else "kube"
    side = Side(namespace=f"{tag}-{label}", expected=pods)
    await namespace_ready(admin, side.namespace)
    before = apiserver_requests(plane)
    cpu_before = cpu_by_process(plane, scheduler_pid)
    heartbeats_before = fleet.requests
    async with background(watch_binds(admin, side, confirm=ours)):
        await asyncio.sleep(SETTLE.watch)  # the watch is open before the first pod
        await stream(
            admin, side, count=pods, rate=rate, ours=ours, prefix="p",
            scheduler_name="protocol-floor" if floor is not None else "vgpu-guard",
            on_created=floor.bind if floor is not None else None,
        )  # fmt: skip
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(120.0, pods / 20)):
                await side.all_bound.wait()
        await asyncio.sleep(SETTLE.confirmations)  # let the last confirmations land before counting requests
    after = apiserver_requests(plane)
    cpu = {k: v - cpu_before.get(k, 0.0) for k, v in cpu_by_process(plane, scheduler_pid).items()}
    delta = {k: after[k] - before.get(k, 0.0) for k in after}
    await clear(admin, side, controller=scheduler_pid is not None)
    own = pods + side.confirmations + (fleet.requests - heartbeats_before)
    return summarize(side, delta, own, cpu, fleet.bursts)


@contextlib.contextmanager
def controller_process(
    plane: ControlPlane,
    *,
    qps: int,
    burst: int,
    namespace: str,
    workdir: Path,
    policy: str,
    identity: str = "bench-controller",
) -> Any:
    env = dict(os.environ)
    env |= {
        "VGPU_GUARD_KUBE_API_QPS": str(qps),
        "VGPU_GUARD_KUBE_API_BURST": str(burst),
        "VGPU_GUARD_EVENTS_QPS": str(qps),
        "VGPU_GUARD_EVENTS_BURST": str(burst),
        "POD_NAMESPACE": namespace,
        "POD_NAME": identity,
    }
    config = workdir / f"config-{policy}.yaml"
    config.write_text(yaml.safe_dump({"scheduling": {"policy": policy}}))
    log = (workdir / f"controller-{qps}-{identity}.log").open("wb")
    argv = [
        sys.executable, "-m", "vgpu_guard.cli.main", "serve", "controller",
        "--kubeconfig", str(plane.kubeconfig), "--config", str(config),
        "--metrics-port", str(free_port()), "--log-level", "warning",
    ]  # fmt: skip
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


async def wait_leading(admin: AioClusterClient, namespace: str) -> None:
    from vgpu_guard.kube.resources import LEASES

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(NotFound):
            lease = await admin.get(LEASES, "vgpu-guard-controller", namespace=namespace)
            if (lease.get("spec") or {}).get("holderIdentity") == "bench-controller":
                return
        await asyncio.sleep(0.2)
    raise RuntimeError("the controller did not take its Lease within 60 s")


async def install_crds(admin: AioClusterClient) -> None:
    for path in sorted(CRD_DIR.glob("*.yaml")):
        with contextlib.suppress(AlreadyExists):
            await admin.create(CRDS, yaml.safe_load(path.read_text()))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(NotFound):
            await admin.list(LEDGERS, limit=1)
            return
        await asyncio.sleep(0.2)
    raise RuntimeError("GPULedger CRD not served")


async def one_qps(args: argparse.Namespace, qps: int, workdir: Path) -> dict[str, Any]:
    binaries = cached_binaries() or ensure_built(
        lambda line: print(f"control-plane: {line}", file=sys.stderr)
    )
    limit, burst = (qps, 2 * qps) if qps > 0 else (UNTHROTTLED, UNTHROTTLED)
    plane = ControlPlane(
        binaries,
        workdir / f"plane-{qps}",
        scheduler_args=[f"--kube-api-qps={limit}", f"--kube-api-burst={burst}"],
    )
    with plane:
        admin = await AioClusterClient.from_kubeconfig(str(plane.kubeconfig))
        try:
            await install_crds(admin)
            fleet = Fleet(admin, args.nodes)
            await fleet.create()
            async with background(fleet.heartbeat(spread=args.heartbeats == "spread")):
                kube = await run_side(
                    plane, admin, fleet, ours=False, pods=args.pods, rate=args.rate, tag="t"
                )
                # Before our controller starts: it would adopt the floor's bound pods into ledgers.
                floor = await run_side(
                    plane, admin, fleet, ours=True, pods=args.pods, rate=args.rate, tag="t",
                    floor=ProtocolFloor(admin, fleet.names, qps=qps, burst=2 * qps),
                )  # fmt: skip
                floor_ledger = await run_side(
                    plane, admin, fleet, ours=True, pods=args.pods, rate=args.rate, tag="tw",
                    floor=ProtocolFloor(admin, fleet.names, qps=qps, burst=2 * qps, ledgers=True),
                )  # fmt: skip
                await delete_ledgers(admin)
                floor_latency = []
                if qps == args.qps[0]:
                    for i, rate in enumerate(args.latency_rates):
                        for ledgers in (False, True):
                            if ("ledger" if ledgers else "floor") not in args.latency_sides:
                                continue
                            row = await run_side(
                                plane, admin, fleet, ours=True, pods=int(rate * args.latency_seconds),
                                rate=rate, tag=f"l{i}{'w' if ledgers else ''}",
                                floor=ProtocolFloor(
                                    admin, fleet.names, qps=qps, burst=2 * qps, ledgers=ledgers
                                ),
                            )  # fmt: skip
                            row["rate"], row["ledgers"] = rate, ledgers
                            floor_latency.append(row)
                            await delete_ledgers(admin)
                await namespace_ready(admin, "vgpu-guard")
                with controller_process(
                    plane,
                    qps=qps,
                    burst=2 * qps if qps else 1,
                    namespace="vgpu-guard",
                    workdir=workdir,
                    policy=args.policy,
                ) as proc:
                    await wait_leading(admin, "vgpu-guard")
                    ours = await run_side(
                        plane, admin, fleet, ours=True, pods=args.pods, rate=args.rate, tag="t",
                        scheduler_pid=proc.pid,
                    )  # fmt: skip
                    latency = []
                    if qps == args.qps[0] and "ours" in args.latency_sides:
                        for i, rate in enumerate(args.latency_rates):
                            pods = int(rate * args.latency_seconds)
                            row = await run_side(
                                plane, admin, fleet, ours=True, pods=pods, rate=rate, tag=f"l{i}",
                                scheduler_pid=proc.pid,
                            )  # fmt: skip
                            row["rate"] = rate
                            latency.append(row)
        finally:
            await admin.close()

    def to_kube(side: dict[str, Any]) -> float | None:
        return round(side["binds_per_s"] / kube["binds_per_s"], 2) if kube["binds_per_s"] else None

    return {
        "qps": qps,
        "kube_scheduler": kube,
        "protocol_floor": floor,
        "floor_with_ledger": floor_ledger,
        "vgpu_guard": ours,
        "ratio": to_kube(ours),
        "floor_ratio": to_kube(floor),
        "floor_with_ledger_ratio": to_kube(floor_ledger),
        "latency": latency,
        "floor_latency": floor_latency,
    }


def machine() -> str:
    cpu = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    system = f"{platform.system()} {platform.machine()}"
    return f"{system}, {os.cpu_count()} cores ({cpu}), Python {platform.python_version()}"


def table(results: list[dict[str, Any]]) -> str:
    head = (
        "| client QPS/burst | scheduler | binds/s | p50 ms | p99 ms | requests/bind | events/bind | ratio |"
    )
    rows = [head, "|---|---|---|---|---|---|---|---|"]
    floor = "protocol floor (bind + Event + plugin confirmation, no decision, no ledger)"
    sides = (
        ("kube-scheduler", "kube_scheduler", None),
        (floor, "protocol_floor", "floor_ratio"),
        ("protocol floor + a CAS ledger write per pod", "floor_with_ledger", "floor_with_ledger_ratio"),
        ("vgpu-guard", "vgpu_guard", "ratio"),
    )
    for r in results:
        label = f"{r['qps']}/{2 * r['qps']}" if r["qps"] else "unthrottled"
        for name, key, ratio_key in sides:
            s = r[key]
            ratio = f"**{r[ratio_key]}×**" if ratio_key else "1.0×"
            rows.append(f"| {label} | {name} | {s['binds_per_s']} | {s['p50_ms']} | {s['p99_ms']} | "
                        f"{s['requests_per_bind']} | {s['events_per_bind']} | {ratio} |")  # fmt: skip
    for r in results:
        for side, key in (("protocol floor", "floor_latency"), ("vgpu-guard", "latency")):
            for row in r[key]:
                name = "protocol floor + a CAS ledger write per pod" if row.get("ledgers") else side
                rows.append(f"| {r['qps']}/{2 * r['qps']} | {name} at {row['rate']} pods/s for "
                            f"{row['pods'] / row['rate']:.0f} s | {row['binds_per_s']} | {row['p50_ms']} | "
                            f"{row['p99_ms']} | {row['requests_per_bind']} | {row['events_per_bind']} | "
                            f"unbound at end: {row['pods'] - row['bound']}{_failed(row)} |")  # fmt: skip
    return "\n".join(rows)


def _failed(row: dict[str, Any]) -> str:
    failed = row.get("failed") or {}
    return "".join(f"; {n} {what} failed" for what, n in sorted(failed.items()))


async def main_async(args: argparse.Namespace) -> int:
    results = []
    with tempfile.TemporaryDirectory(prefix="vgpu-bench-") as tmp:
        for qps in args.qps:
            print(f"== QPS {qps or 'unthrottled'}", file=sys.stderr, flush=True)
            results.append(await one_qps(args, qps, Path(tmp)))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    print(f"machine: {machine()}\nnodes {args.nodes}, pods {args.pods} created at {args.rate}/s\n")
    print(table(results))
    return results_written(args.json, results)


def results_written(path: str | None, results: list[dict[str, Any]]) -> int:
    if path:
        Path(path).write_text(json.dumps({"machine": machine(), "results": results}, indent=2))
    return 0


LATENCY_SIDES = ("floor", "ledger", "ours")


def _sides(text: str) -> tuple[str, ...]:
    sides = tuple(x for x in text.split(",") if x)
    unknown = sorted(set(sides) - set(LATENCY_SIDES))
    if unknown:
        known = ",".join(LATENCY_SIDES)
        raise argparse.ArgumentTypeError(f"unknown side {', '.join(unknown)}: choose from {known}")
    return sides


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=300.0, help="pods created per second")
    parser.add_argument("--qps", type=lambda s: [int(x) for x in s.split(",")], default=[500, 0, 50])
    parser.add_argument(
        "--latency-rates", type=lambda s: [float(x) for x in s.split(",") if x], default=[50.0, 200.0]
    )
    parser.add_argument("--latency-seconds", type=float, default=60.0)
    parser.add_argument(
        "--heartbeats", choices=("burst", "spread"), default="burst",
        help="all nodes' status PATCHes in one burst every 10 s (every session's numbers), or each"
        " node at its own moment of the period, as kubelets started at different times do",
    )  # fmt: skip
    parser.add_argument(
        "--latency-sides",
        type=_sides,
        default=LATENCY_SIDES,
        help="which sides run the fixed-rate rows (default: floor,ledger,ours); the floor with a "
        "ledger write per pod cannot keep up with 200 pods/s on 2 cores and then waits its full timeout",
    )
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument(
        "--policy",
        choices=("spread", "binpack"),
        default="spread",
        help="our GPU policy; spread compares like with like (kube-scheduler's LeastAllocated spreads); "
        "binpack puts a burst on one node, whose plugin handshake then serialises it",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="5 nodes, 50 pods, one QPS, a short latency run, short settling waits",
    )
    args = parser.parse_args()
    if args.smoke:
        SETTLE.watch, SETTLE.confirmations = 0.1, 0.2
        args.nodes, args.pods, args.qps, args.latency_rates, args.latency_seconds = (
            5,
            50,
            [500],
            [20.0],
            2.0,
        )
    socket.setdefaulttimeout(60)
    # `timeout` and CI runners stop a run with SIGTERM: leave through the context managers, so the
    # control plane (its processes each in a session of their own) is stopped, not orphaned.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
