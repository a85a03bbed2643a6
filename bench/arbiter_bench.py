"""A Binding's latency with and without the ledger arbiter, on the real control plane (issue 35).

    .venv/bin/python bench/arbiter_bench.py [--nodes 100] [--rate 100] [--seconds 10] [--segments 3]
        [--gang 64] [--gang-nodes 8] [--rounds 5] [--smoke] [--json FILE] [--keep DIR]
    .venv/bin/python bench/arbiter_bench.py --ledger-puts 1000 [--put-sizes 1,10,30,80]
        [--put-encodings product,typed,preserve,strings-entries,spec-preserve,one-string,floor]
        [--put-managed-fields tracked|none|both]
    .venv/bin/python bench/arbiter_bench.py --pending-memory 10000

One real control plane (kube-apiserver, kube-controller-manager, kube-scheduler 1.20.2 built by
``scripts/control-plane build``) with N heartbeated GPU nodes (8 cards each, registered with the
device plugin's ``volcano.sh/node-vgpu-register``). vgpu-guard is installed as the e2e suite
installs it (tests/e2e/harness.py ``Guard``: the Helm chart rendered for the server's version and
applied through the API, ``vgpu-guard serve webhook`` run as the chart's Deployment runs it) in the
mode a Volcano user runs (``scheduling.routing`` off). The binder is Volcano's (tests/e2e/volcano.py:
the >= 1.16 annotated ``pods/binding``, ``vgpu-ids-new`` and the rest on the Binding), authenticated
as ``system:serviceaccount:volcano-system:volcano-scheduler``; every pod is created before the
measurement (through the webhooks, as on a cluster that runs vgpu-guard).

Two sides, the same binds, in the same run:

* ``with the arbiter``: the chart's webhook configurations installed; every Binding is reserved in
  the node's GPULedger (compare-and-swap, coalesced per node) before the API server stores it;
* ``without the arbiter`` (the baseline): the webhook configurations deleted, nothing else changed.

Cases: (a) an open loop at ``--rate`` binds/s spread over every node (node i % N, card in turn),
``--segments`` x ``--seconds`` a side; (b) a ``--gang``-pod gang bound at once onto ``--gang-nodes``
nodes (every Binding sent concurrently, as Volcano's binder sends a session's), ``--rounds`` times a
side, each gang on nodes of its own. The sides alternate (A B B A A B ...) so drift over the run
(etcd's size, compactions, other load) falls on both. After each switch of the configurations the
API server's view is confirmed by a probe Binding (a ledger entry appears, or does not), then
``--warmup`` binds at the rate are sent and not counted.

Measured: each Binding's latency as the binder sees it (request sent -> response), p50/p99/max a
side and the difference; from the webhook's ``/metrics`` over each measured window: ledger writes,
CAS conflicts and decisions ("attempts") per binding, bindings per write (coalescing), and the
webhook's own time for ``/validate/pod-allocations``. At the end every measured binding of the
arbiter's side must hold a ledger entry on its node and none of the baseline's (the chart's entry
before 1.28 fails open: a timed-out review would pass unreserved, and is caught here; the API
server's log says how many calls it let pass so, warm-ups included).

The added latency's baseline (issue 44: the arbiter's added p50 at most 1.3x one ledger PUT's):
after each rate segment of the arbiter's side, as many compare-and-swap PUTs of one GPULedger at
the same pace, the ledger holding the entries a fleet's ledger holds on average at that moment,
timed as a client sees them (the webhook's own write is such a PUT).

``--ledger-puts N`` measures instead what one GPULedger write costs the API server by the ledger's
size (``--put-sizes``): N compare-and-swap PUTs one at a time on an otherwise idle control plane,
CPU ms a PUT of kube-apiserver and etcd (less their idle rate), and the PUT's p50, beside a
ConfigMap holding the same JSON PUT in alternating blocks; ``--put-encodings`` prices the shipped
encoding (``product``) beside the candidates of bench/ledger_encodings.py (issue 44 item 3), and
``--put-managed-fields none`` sends ``managedFields: []`` (no field tracking). ``--pending-memory
N`` measures what the webhook's cache of unbound pods (webhook/pending_pods.py) holds for N pods,
beside whole pods.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import math
import os
import signal
import socket
import ssl
import statistics
import sys
import tempfile
import time
import tracemalloc
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The e2e suite's installation (tests/e2e/harness.py) and Volcano binder (tests/e2e/volcano.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ledger_encodings import CANDIDATES
from prometheus_client.parser import text_string_to_metric_families
from scheduler_throughput_bench import (
    GPUS,
    Fleet,
    _node_infos,
    background,
    cpu_by_process,
    install_crds,
    machine,
)

from tests.builders import default_config
from tests.e2e.harness import OPT_IN_LABEL, ClusterBackend, Guard, ServeProcess, service_account_ready
from tests.e2e.volcano import USER, Binder, Device, volcano_client
from vgpu_guard.controlplane.build import cached_binaries, ensure_built
from vgpu_guard.controlplane.launch import ControlPlane
from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.ledger import (
    Allocation,
    ContainerGrant,
    DeviceGrant,
    NodeLedger,
    decode_ledger,
    encode_ledger,
)
from vgpu_guard.engine.ledger_summary import ledger_summary
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.bounded import gather_bounded
from vgpu_guard.kube.errors import AlreadyExists, KubeError, NotFound
from vgpu_guard.kube.informer import Informer
from vgpu_guard.kube.resources import (
    CRDS,
    LEDGERS,
    MUTATING_WEBHOOKS,
    NAMESPACES,
    PODS,
    VALIDATING_WEBHOOKS,
    Resource,
)
from vgpu_guard.webhook.pending_pods import UNBOUND, PendingPods

Obj = dict[str, Any]
NAMESPACE = "bench-arbiter"
WEBHOOK_ID = "bench-webhook"
RELEASE = "vgpu-guard"
RATE_MIB = 1024
GANG_MIB = 4096
ROUTE = "/validate/pod-allocations"
WEBHOOK_SECONDS = "apiserver_admission_webhook_admission_duration_seconds"
WITH, WITHOUT = "with", "without"
SIDE_LABEL = {WITHOUT: "without the arbiter (baseline)", WITH: "with the arbiter"}
PROBES = 200
# Processes this run started, stopped again however the run ends (SIGTERM included).
STARTED: list[ServeProcess] = []


class BenchGuard(Guard):
    """The e2e installation with the chart's defaults: Volcano schedules (``scheduling.routing``
    off), no suite-specific queue or topology settings."""

    def values(self, *, in_cluster: bool = False) -> Obj:
        values = super().values(in_cluster=in_cluster)
        values["config"] = {"scheduling": {"routing": False}}
        return values


def pod_object(name: str, memory: int) -> Obj:
    limits = {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": str(memory)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "volcano",
            "containers": [
                {"name": "main", "image": "registry.k8s.io/pause:3.9", "resources": {"limits": limits}}
            ],
        },
    }


# -- the pods, created before anything is measured ------------------------------------------------


@dataclass
class Pool:
    """Pre-created pods by purpose, handed out in order."""

    pods: dict[str, list[Obj]] = field(default_factory=dict)
    _next: dict[str, int] = field(default_factory=dict)

    async def create(self, admin: AioClusterClient, plan: dict[str, tuple[int, int]]) -> None:
        async def one(kind: str, i: int, memory: int) -> None:
            pod = await admin.create(PODS, pod_object(f"{kind}-{i:05d}", memory), namespace=NAMESPACE)
            self.pods[kind][i] = pod

        for kind, (count, _) in plan.items():
            self.pods[kind] = [{} for _ in range(count)]
        calls = (one(kind, i, memory) for kind, (count, memory) in plan.items() for i in range(count))
        await gather_bounded(calls, 16)
        self._next = dict.fromkeys(plan, 0)

    def take(self, kind: str, count: int) -> list[Obj]:
        start = self._next[kind]
        if start + count > len(self.pods[kind]):
            raise RuntimeError(f"the run needs more {kind} pods than were created ({len(self.pods[kind])})")
        self._next[kind] = start + count
        return self.pods[kind][start : start + count]


# -- the webhook's metrics --------------------------------------------------------------------------

Sample = tuple[str, tuple[tuple[str, str], ...]]


async def scrape(proc: ServeProcess) -> dict[Sample, float]:
    text = await proc.metrics()
    out: dict[Sample, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def delta(before: dict[Sample, float], after: dict[Sample, float]) -> dict[Sample, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def total(samples: dict[Sample, float], name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls))


def quantile(samples: dict[Sample, float], family: str, q: float, **labels: str) -> float | None:
    """Prometheus' histogram_quantile over the summed buckets of ``family`` (linear within a bucket)."""
    buckets: dict[float, float] = {}
    for (n, ls), v in samples.items():
        found = dict(ls)
        if n != f"{family}_bucket" or any(found.get(k) != x for k, x in labels.items()):
            continue
        bound = float(found["le"])
        buckets[bound] = buckets.get(bound, 0.0) + v
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = q * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for bound in bounds:
        if buckets[bound] >= rank:
            if math.isinf(bound):
                return lower
            inside = buckets[bound] - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, buckets[bound]
    return lower


# -- binding and measuring ------------------------------------------------------------------------


@dataclass
class Side:
    """One side's measured bindings and the webhook's counters over its measured windows."""

    name: str
    latencies: list[float] = field(default_factory=list)  # seconds
    failed: dict[str, int] = field(default_factory=dict)
    bound_uids: dict[str, str] = field(default_factory=dict)  # pod uid -> node
    metrics: dict[Sample, float] = field(default_factory=dict)
    makespans: list[float] = field(default_factory=list)  # a gang's first send -> last answer
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds by process over the windows
    apiserver: dict[Sample, float] = field(default_factory=dict)  # its own metrics over the windows
    wall: float = 0.0  # seconds in the measured windows

    def add_metrics(self, window: dict[Sample, float]) -> None:
        for k, v in window.items():
            self.metrics[k] = self.metrics.get(k, 0.0) + v


@dataclass
class OnePut:
    """The baseline of the arbiter's added latency (issue 44): one GPULedger compare-and-swap PUT,
    timed as a client sees it, on the same control plane in the same run, at the rate's pace and
    the ledger size the arbiter's writes met."""

    latencies: list[float] = field(default_factory=list)  # seconds
    entries: list[int] = field(default_factory=list)  # the ledger's entries in each segment


@dataclass
class Bench:
    admin: AioClusterClient
    binder: Binder
    nodes: list[str]
    pool: Pool
    webhook: ServeProcess
    guard: Guard
    plane: ControlPlane
    installed: bool = True
    _turn: int = 0  # the binder's round-robin over the fleet's cards (rate, warm-up, probe pods)

    def next_place(self) -> tuple[str, int]:
        turn, self._turn = self._turn, self._turn + 1
        return self.nodes[turn % len(self.nodes)], (turn // len(self.nodes)) % GPUS

    async def bind(self, pod: Obj, node: str, card: int, memory: int, side: Side | None) -> None:
        started = time.perf_counter()
        try:
            await self.binder.bind(pod, node, [Device(f"GPU-{node}-{card}", memory)])
        except KubeError as e:
            if side is not None:
                what = f"{e.code} {e.reason}" if e.code else type(e).__name__
                side.failed[what] = side.failed.get(what, 0) + 1
            return
        if side is not None:
            side.latencies.append(time.perf_counter() - started)
            side.bound_uids[pod["metadata"]["uid"]] = node

    async def open_loop(self, pods: list[Obj], rate: float, side: Side | None) -> None:
        """``pods`` bound at ``rate`` a second, each sent on time whatever the earlier ones do."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        tasks = []
        for i, pod in enumerate(pods):
            wait = start + i / rate - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            node, card = self.next_place()
            tasks.append(asyncio.ensure_future(self.bind(pod, node, card, RATE_MIB, side)))
        await asyncio.gather(*tasks)

    async def gang(self, pods: list[Obj], nodes: list[str], side: Side) -> None:
        """Every member's Binding sent at once; member j on node j % len(nodes), its own card."""
        started = time.perf_counter()
        await asyncio.gather(
            *(
                self.bind(pod, nodes[j % len(nodes)], (j // len(nodes)) % GPUS, GANG_MIB, side)
                for j, pod in enumerate(pods)
            )
        )
        side.makespans.append(time.perf_counter() - started)

    async def put_segment(self, count: int, rate: float, into: OnePut) -> None:
        """``count`` compare-and-swap PUTs of one GPULedger at ``rate`` a second (each waits for the
        one before: the same object), an entry added and removed in turn, encoded as the webhook's
        LedgerWriter encodes them; the ledger holds the entries the fleet's ledgers hold on average
        now, so the PUT is the size the arbiter's writes are."""
        held = await ledger_entries(self.admin)
        size = max(1, round(len(held) / len(self.nodes)))
        node = f"one-put-{len(into.entries)}"
        info = _node_infos([node])[node]
        base = NodeLedger(node=node).with_allocations([_entry(i, node) for i in range(size)])
        grown = base.with_allocation(_entry(size, node))
        body = encode_ledger(base, ledger_summary(base, info))
        version = (await self.admin.create(LEDGERS, body))["metadata"]["resourceVersion"]
        loop = asyncio.get_running_loop()
        start = loop.time()
        for k in range(count):
            wait = start + k / rate - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            ledger = grown if k % 2 == 0 else base
            body = encode_ledger(ledger, ledger_summary(ledger, info))
            body["metadata"]["resourceVersion"] = version
            started = time.perf_counter()
            written = await self.admin.replace(LEDGERS, body)
            into.latencies.append(time.perf_counter() - started)
            version = written["metadata"]["resourceVersion"]
        into.entries.append(size)
        await self.admin.delete(LEDGERS, node)

    @contextlib.asynccontextmanager
    async def window(self, side: Side) -> AsyncIterator[None]:
        before = await scrape(self.webhook)
        server = await asyncio.to_thread(apiserver_metrics, self.plane)
        cpu, busy, started = self.cpu(), machine_busy(), time.monotonic()
        yield
        side.wall += time.monotonic() - started
        for name, seconds in self.cpu().items():
            side.cpu[name] = side.cpu.get(name, 0.0) + seconds - cpu.get(name, 0.0)
        side.cpu["machine"] = side.cpu.get("machine", 0.0) + machine_busy() - busy
        side.add_metrics(delta(before, await scrape(self.webhook)))
        for k, v in delta(server, await asyncio.to_thread(apiserver_metrics, self.plane)).items():
            side.apiserver[k] = side.apiserver.get(k, 0.0) + v

    def cpu(self) -> dict[str, float]:
        pid = self.webhook.process.pid if self.webhook.process is not None else None
        return cpu_by_process(self.plane, pid)

    # -- the webhook configurations: present or absent, as the API server sees them ----------------

    async def switch(self, want: str, *, warmup: int, rate: float) -> None:
        """Install (``with``) or delete (``without``) the chart's webhook configurations, wait until
        a probe Binding shows the API server acting on it, then send ``warmup`` binds not counted."""
        installed = want == WITH
        if installed != self.installed:
            for kind, resource in (
                ("MutatingWebhookConfiguration", MUTATING_WEBHOOKS),
                ("ValidatingWebhookConfiguration", VALIDATING_WEBHOOKS),
            ):
                if installed:
                    await self.guard.apply(self.guard.rendered(kind, RELEASE))
                else:
                    with contextlib.suppress(NotFound):
                        await self.admin.delete(resource, RELEASE)
            self.installed = installed
            await self.probe(installed)
        if warmup:
            await self.open_loop(self.pool.take("warmup", warmup), rate, None)

    async def probe(self, installed: bool) -> None:
        """Bind probe pods one at a time until one's ledger entry says the arbiter saw it (or not)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            (pod,) = self.pool.take("probe", 1)
            node, card = self.next_place()
            await self.bind(pod, node, card, RATE_MIB, None)
            if (pod["metadata"]["uid"] in await ledger_entries(self.admin, [node])) == installed:
                await asyncio.sleep(0.5)  # the mutating configuration follows its own informer
                return
            await asyncio.sleep(0.1)
        state = "installed" if installed else "deleted"
        raise RuntimeError(f"the API server did not act on the {state} webhook configurations within 60 s")


async def ledger_entries(admin: AioClusterClient, nodes: list[str] | None = None) -> dict[str, str]:
    """Pod uid -> node of every ledger entry (of ``nodes``' ledgers, or of all)."""
    if nodes is None:
        ledgers = (await admin.list(LEDGERS)).items
    else:
        ledgers = []
        for node in nodes:
            with contextlib.suppress(NotFound):
                ledgers.append(await admin.get(LEDGERS, node))
    return {uid: ledger["metadata"]["name"]
            for ledger in ledgers for uid in decode_ledger(ledger).allocations}  # fmt: skip


APISERVER_FAMILIES = ("apiserver_request_total", "apiserver_admission_webhook_admission_duration_seconds")


def apiserver_metrics(plane: ControlPlane) -> dict[Sample, float]:
    """The API server's requests by verb and resource, and its view of each webhook call's time."""
    ctx = ssl.create_default_context(cafile=str(plane.ca_file))
    request = urllib.request.Request(
        plane.server + "/metrics", headers={"Authorization": f"Bearer {plane.admin_token}"}
    )
    with urllib.request.urlopen(request, context=ctx, timeout=30) as response:
        text = response.read().decode()
    wanted = "\n".join(line for line in text.splitlines() if line.startswith(APISERVER_FAMILIES))
    out: dict[Sample, float] = {}
    for family in text_string_to_metric_families(wanted):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def requests_per_binding(side: Side) -> dict[str, float]:
    """The API server's requests a measured binding, by verb and resource (those above 0.05)."""
    binds = len(side.latencies)
    counts: dict[str, float] = {}
    for (name, labels), value in side.apiserver.items():
        if name != "apiserver_request_total" or not binds:
            continue
        found = dict(labels)
        kind = f"{found.get('verb')} {found.get('resource')}"
        kind += f"/{found['subresource']}" if found.get("subresource") else ""
        counts[kind] = counts.get(kind, 0.0) + value
    return {k: round(v / binds, 2) for k, v in sorted(counts.items()) if v / binds >= 0.05}


def machine_busy() -> float:
    """CPU seconds every core of the machine has spent busy so far (/proc/stat: all but idle, iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def alternating(count: int, first: str) -> Iterator[str]:
    """A B B A A B ...: each side as often first as second, one switch between neighbours."""
    other = WITHOUT if first == WITH else WITH
    for i in range(count):
        yield from (first, other) if i % 2 == 0 else (other, first)


# -- the run --------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def side_summary(side: Side, entry: str) -> dict[str, Any]:
    """``entry``: the name of the webhook entry that takes Bindings (the API server's label)."""
    ms = [x * 1000 for x in side.latencies]
    m = side.metrics
    binds = len(side.latencies)
    writes = {r: total(m, "vgpu_guard_ledger_writes_total", writer="arbiter", result=r)
              for r in ("written", "conflict", "error")}  # fmt: skip
    answered = total(m, "vgpu_guard_arbiter_write_attempts_count")
    decisions = total(m, "vgpu_guard_arbiter_write_attempts_sum")
    batches = total(m, "vgpu_guard_arbiter_batch_requests_count")
    batched = total(m, "vgpu_guard_arbiter_batch_requests_sum")
    reviews = total(m, "vgpu_guard_admission_duration_seconds_count", webhook=ROUTE)
    review_p50 = quantile(m, "vgpu_guard_admission_duration_seconds", 0.5, webhook=ROUTE)
    review_p99 = quantile(m, "vgpu_guard_admission_duration_seconds", 0.99, webhook=ROUTE)
    return {
        "side": side.name,
        "binds": binds,
        "failed": dict(side.failed),
        "p50_ms": round(percentile(ms, 0.50), 2) if ms else None,
        "p99_ms": round(percentile(ms, 0.99), 2) if ms else None,
        "max_ms": round(max(ms), 2) if ms else None,
        "mean_ms": round(statistics.fmean(ms), 2) if ms else None,
        "gang_makespan_ms": [round(x * 1000, 1) for x in side.makespans],
        "reviews": int(reviews),
        "review_p50_ms": round(review_p50 * 1000, 2) if review_p50 is not None else None,
        "review_p99_ms": round(review_p99 * 1000, 2) if review_p99 is not None else None,
        "ledger_writes": {k: int(v) for k, v in writes.items()},
        "writes_per_binding": round(sum(writes.values()) / binds, 3) if binds else None,
        "conflicts_per_binding": round(writes["conflict"] / binds, 3) if binds else None,
        "attempts_per_binding": round(decisions / answered, 3) if answered else None,
        "answered": int(answered),
        "bindings_per_write": round(batched / batches, 2) if batches else None,
        "cpu_ms_per_binding": cpu_per_binding(side) if binds else {},
        "apiserver_requests_per_binding": requests_per_binding(side),
        "apiserver_webhook_p50_ms": _ms(quantile(side.apiserver, WEBHOOK_SECONDS, 0.5, name=entry)),
        "apiserver_webhook_p99_ms": _ms(quantile(side.apiserver, WEBHOOK_SECONDS, 0.99, name=entry)),
        "cores_busy": round(side.cpu.get("machine", 0.0) / side.wall, 2) if side.wall else None,
    }


def _ms(seconds: float | None) -> float | None:
    return round(seconds * 1000, 2) if seconds is not None else None


def cpu_per_binding(side: Side) -> dict[str, float]:
    """CPU ms a measured binding, by process; ``other``: the machine's busy time no process of this
    run accounts for (other work on a shared machine, the kernel's softirqs)."""
    binds = len(side.latencies)
    ours = {"webhook" if k == "vgpu-guard" else k: v for k, v in side.cpu.items() if k != "machine"}
    out = {k: round(v * 1000 / binds, 2) for k, v in sorted(ours.items())}
    out["other"] = round((side.cpu.get("machine", 0.0) - sum(ours.values())) * 1000 / binds, 2)
    out["machine"] = round(side.cpu.get("machine", 0.0) * 1000 / binds, 2)
    return out


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    load_start = os.getloadavg()[0]
    binaries = cached_binaries() or ensure_built(
        lambda line: print(f"control-plane: {line}", file=sys.stderr)
    )
    rate_binds = round(args.rate * args.seconds)
    toggles = 2 * (args.segments + args.rounds)
    plan = {
        "rate": (2 * args.segments * rate_binds, RATE_MIB),
        "gang": (2 * args.rounds * args.gang, GANG_MIB),
        "warmup": (toggles * args.warmup, RATE_MIB),
        "probe": (args.probes, RATE_MIB),
    }
    sides = {WITH: Side(SIDE_LABEL[WITH]), WITHOUT: Side(SIDE_LABEL[WITHOUT])}
    gang_sides = {WITH: Side(SIDE_LABEL[WITH]), WITHOUT: Side(SIDE_LABEL[WITHOUT])}
    one_put = OnePut()
    with ControlPlane(binaries, workdir / "plane") as plane:
        admin = await AioClusterClient.from_kubeconfig(str(plane.kubeconfig))
        try:
            log("installing vgpu-guard as the chart renders it for the server")
            backend = ClusterBackend(workdir, str(plane.kubeconfig))
            await backend.start()
            guard = BenchGuard(backend, workdir, admin)
            await guard.install()
            validating = guard.rendered("ValidatingWebhookConfiguration", RELEASE)
            fleet = Fleet(admin, args.nodes)
            await fleet.create()
            labels = {OPT_IN_LABEL: "enabled"} if guard.opt_in else {}
            with contextlib.suppress(AlreadyExists):
                namespace = {"apiVersion": "v1", "kind": "Namespace",
                             "metadata": {"name": NAMESPACE, "labels": labels}}  # fmt: skip
                await admin.create(NAMESPACES, namespace)
            await service_account_ready(admin, NAMESPACE)
            webhook = await guard.process("webhook", WEBHOOK_ID)
            if args.profile:
                # cProfile writes its file when the process exits (the SIGTERM at the end of the run).
                webhook.argv = [sys.executable, "-m", "cProfile", "-o", args.profile, *webhook.argv]
            STARTED.append(webhook)
            await guard.ensure("webhook", WEBHOOK_ID)
            async with background(fleet.heartbeat()), volcano_client(backend, admin) as volcano:
                pool = Pool()
                log(f"creating {sum(n for n, _ in plan.values())} pods through the webhooks")
                t = time.monotonic()
                await pool.create(admin, plan)
                created_s = time.monotonic() - t
                bench = Bench(admin, Binder(volcano, "1.16"), fleet.names, pool, webhook, guard, plane)
                async with asyncio.timeout(args.max_seconds):
                    for i, want in enumerate(alternating(args.segments, WITH)):
                        log(f"rate segment {i // 2 + 1}/{args.segments}: {SIDE_LABEL[want]}")
                        await bench.switch(want, warmup=args.warmup, rate=args.rate)
                        async with bench.window(sides[want]):
                            await bench.open_loop(pool.take("rate", rate_binds), args.rate, sides[want])
                        if want == WITH:
                            log("one GPULedger PUT at the same pace, the arbiter's configurations installed")
                            await bench.put_segment(rate_binds, args.rate, one_put)
                    # The gangs go on with the rate test's last side: A B B A | A B B A ...
                    last = WITH if args.segments % 2 == 0 else WITHOUT
                    for k, want in enumerate(alternating(args.rounds, last)):
                        log(f"gang {k // 2 + 1}/{args.rounds}: {SIDE_LABEL[want]}")
                        await bench.switch(want, warmup=args.warmup, rate=args.rate)
                        first = (k * args.gang_nodes) % len(fleet.names)
                        nodes = [fleet.names[(first + j) % len(fleet.names)] for j in range(args.gang_nodes)]
                        async with bench.window(gang_sides[want]):
                            await bench.gang(pool.take("gang", args.gang), nodes, gang_sides[want])
                entries = await ledger_entries(admin)
                stored = (await admin.list(PODS, namespace=NAMESPACE)).items
        finally:
            for proc in STARTED:
                await proc.stop()
            await admin.close()
    failed_open = failing_open(workdir / "plane" / "logs" / "kube-apiserver.log")
    bound = {p["metadata"]["uid"]: p["spec"].get("nodeName") for p in stored}

    def check(side: Side) -> dict[str, int]:
        return {
            "bound": sum(1 for uid, node in side.bound_uids.items() if bound.get(uid) == node),
            "reserved": sum(1 for uid, node in side.bound_uids.items() if entries.get(uid) == node),
        }

    allocations = next(w for w in validating["webhooks"] if _binds(w))
    cases = []
    for case, pair in (("rate", sides), ("gang", gang_sides)):
        row = {want: {**side_summary(s, allocations["name"]), **check(s)} for want, s in pair.items()}
        with_, without = row[WITH], row[WITHOUT]
        added = {
            q: round(with_[q] - without[q], 2) if with_[q] is not None and without[q] is not None else None
            for q in ("p50_ms", "p99_ms")
        }
        cases.append({"case": case, WITHOUT: without, WITH: with_, "added": added})
    put_ms = [x * 1000 for x in one_put.latencies]
    cases[0]["one_put"] = {
        "puts": len(put_ms),
        "entries": one_put.entries,
        "p50_ms": round(percentile(put_ms, 0.5), 2) if put_ms else None,
        "p99_ms": round(percentile(put_ms, 0.99), 2) if put_ms else None,
    }
    return {
        "machine": machine(),
        "load_average": [round(load_start, 2), round(os.getloadavg()[0], 2)],
        "server": backend.kube_version,
        "arbiter_entry": {
            "name": allocations["name"],
            "failurePolicy": allocations.get("failurePolicy"),
            "timeoutSeconds": allocations.get("timeoutSeconds"),
            "matchConditions": bool(allocations.get("matchConditions")),
            "opt_in": guard.opt_in,
        },
        "binder": USER,
        "pods_created": sum(n for n, _ in plan.values()),
        "pods_created_seconds": round(created_s, 1),
        "failed_open": failed_open,
        "ledger_entries_at_end": _per_node(entries, len(fleet.names)),
        "args": {k: v for k, v in vars(args).items() if k != "json"},
        "cases": cases,
    }


def _per_node(entries: dict[str, str], nodes: int) -> dict[str, float]:
    counts: dict[str, int] = {}
    for node in entries.values():
        counts[node] = counts.get(node, 0) + 1
    return {"mean": round(len(entries) / nodes, 1), "max": max(counts.values(), default=0)}


def failing_open(log_file: Path) -> dict[str, int]:
    """Webhook calls the API server gave up on and let pass (failurePolicy Ignore), by entry, from
    its log (1.20 has no metric for them): a binding let through so is not reserved."""
    found: dict[str, int] = {}
    with contextlib.suppress(OSError), log_file.open(errors="replace") as lines:
        for line in lines:
            if "Failed calling webhook, failing open " in line:
                name = line.split("failing open ", 1)[1].split(":", 1)[0]
                found[name] = found.get(name, 0) + 1
    return found


def _binds(webhook: Obj) -> bool:
    return any("pods/binding" in (rule.get("resources") or []) for rule in webhook.get("rules") or [])


def log(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


# -- the report -----------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def _failed(row: dict[str, Any]) -> str:
    failed = row["failed"]
    return ", ".join(f"{n} x {what}" for what, n in sorted(failed.items())) if failed else "0"


def report(result: dict[str, Any]) -> str:
    a = result["args"]
    entry = result["arbiter_entry"]
    scope = "matchConditions" if entry["matchConditions"] else "namespace opt-in scope (no matchConditions)"
    lines = [
        f"machine: {result['machine']}; 1-minute load average {result['load_average'][0]} at the start, "
        f"{result['load_average'][1]} at the end (other work on the machine shows here)",
        f"control plane: kube-apiserver {result['server']} (scripts/control-plane), loopback; the chart "
        f"rendered for it: {scope}, the arbiter's entry {entry['name']} (failurePolicy "
        f"{entry['failurePolicy']}, timeoutSeconds {entry['timeoutSeconds']})",
        f"binder: Volcano >= 1.16's annotated Binding as {result['binder']}; "
        f"{result['pods_created']} pods created first ({result['pods_created_seconds']} s)",
        "",
        "| case | side | binds | failed | p50 ms | p99 ms | max ms | bound | reserved in a ledger |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    names = {
        "rate": f"{a['rate']:g} binds/s over {a['nodes']} nodes "
        f"({a['segments']} x {a['seconds']:g} s a side)",
        "gang": f"{a['gang']}-pod gang on {a['gang_nodes']} nodes "
        f"({a['rounds']} gang{'s' if a['rounds'] != 1 else ''} a side)",
    }
    for case in result["cases"]:
        name = names[case["case"]]
        for want in (WITHOUT, WITH):
            r = case[want]
            lines.append(
                f"| {name} | {r['side']} | {r['binds']} | {_failed(r)} | {_cell(r['p50_ms'])} | "
                f"{_cell(r['p99_ms'])} | {_cell(r['max_ms'])} | {r['bound']} | {r['reserved']} |"
            )
        added = case["added"]
        lines.append(
            f"| {name} | added by the arbiter | | | **{_cell(added['p50_ms'])}** | "
            f"**{_cell(added['p99_ms'])}** | | | |"
        )
        put = case.get("one_put")
        if put is not None:
            sizes = ", ".join(str(n) for n in put["entries"])
            lines.append(
                f"| {name} | one GPULedger PUT, same pace ({sizes} entries) | {put['puts']} | | "
                f"{_cell(put['p50_ms'])} | {_cell(put['p99_ms'])} | | | |"
            )
    lines += [
        "",
        "The arbiter's side, from the webhook's /metrics over the measured windows:",
        "",
        "| case | reviews | ledger writes / binding | CAS conflicts / binding | decisions (attempts) / "
        "binding | bindings / write | webhook p50 / p99 ms | gang: all answered, ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for case in result["cases"]:
        r = case[WITH]
        spans = case[WITHOUT]["gang_makespan_ms"], r["gang_makespan_ms"]
        gang = (
            f"median {statistics.median(spans[1]):g} (baseline {statistics.median(spans[0]):g})"
            if spans[0] and spans[1]
            else "-"
        )
        lines.append(
            f"| {names[case['case']]} | {r['reviews']} | {_cell(r['writes_per_binding'])} | "
            f"{_cell(r['conflicts_per_binding'])} | {_cell(r['attempts_per_binding'])} | "
            f"{_cell(r['bindings_per_write'])} | {_cell(r['review_p50_ms'])} / {_cell(r['review_p99_ms'])} "
            f"| {gang} |"
        )
    lines += [
        "",
        "CPU ms a measured binding, by process, over the measured windows (other: the rest of the "
        "machine's busy time, work this run did not start):",
        "",
        "| case | side | kube-apiserver | etcd | webhook | binder (this process) | controller-manager + "
        "scheduler | other | machine | cores busy |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for case in result["cases"]:
        for want in (WITHOUT, WITH):
            r = case[want]
            c = r["cpu_ms_per_binding"]
            rest = round(c.get("kube-controller-manager", 0.0) + c.get("kube-scheduler", 0.0), 2)
            lines.append(
                f"| {names[case['case']]} | {r['side']} | {_cell(c.get('kube-apiserver'))} | "
                f"{_cell(c.get('etcd'))} | {_cell(c.get('webhook'))} | {_cell(c.get('bench'))} | {rest} | "
                f"{_cell(c.get('other'))} | {_cell(c.get('machine'))} | {_cell(r['cores_busy'])} |"
            )
    lines += ["", "The API server's requests a measured binding (verb resource, 0.05 and above):", ""]
    for case in result["cases"]:
        for want in (WITHOUT, WITH):
            r = case[want]
            counts = ", ".join(f"{k} {v:g}" for k, v in r["apiserver_requests_per_binding"].items())
            lines.append(f"- {names[case['case']]}, {r['side']}: {counts or '-'}")
        r = case[WITH]
        lines.append(
            f"- {names[case['case']]}: the API server's call of {result['arbiter_entry']['name']} "
            f"p50 {_cell(r['apiserver_webhook_p50_ms'])} ms, p99 {_cell(r['apiserver_webhook_p99_ms'])} ms "
            "(apiserver_admission_webhook_admission_duration_seconds)"
        )
    opened = ", ".join(f"{n} x {name}" for name, n in sorted(result["failed_open"].items())) or "none"
    lines += [
        "",
        f"webhook calls the API server gave up on and let pass (its log, the whole run, warm-ups "
        f"included): {opened}",
        f"ledger entries a node at the end: mean {result['ledger_entries_at_end']['mean']}, "
        f"max {result['ledger_entries_at_end']['max']}",
        "",
        *targets(result),
    ]
    return "\n".join(lines)


def targets(result: dict[str, Any]) -> list[str]:
    out = []
    for case in result["cases"]:
        added = case["added"]
        for q, limit in (("p50_ms", 5.0), ("p99_ms", 25.0)):
            value = added[q]
            verdict = "not measured" if value is None else "met" if value <= limit else "NOT met"
            out.append(f"target {case['case']}: added {q[:3]} <= {limit:g} ms: {verdict} ({_cell(value)} ms)")
        put = case.get("one_put")
        if put is not None:
            ratio = added["p50_ms"] / put["p50_ms"] if added["p50_ms"] is not None and put["p50_ms"] else None
            verdict = "not measured" if ratio is None else "met" if ratio <= 1.3 else "NOT met"
            out.append(
                f"target {case['case']}: added p50 <= 1.3 x one GPULedger PUT's p50 (issue 44): {verdict} "
                f"({_cell(added['p50_ms'])} / {_cell(put['p50_ms'])} ms = "
                f"{'-' if ratio is None else f'{ratio:.2f}'}x)"
            )
        r = case[WITH]
        complete = r["reserved"] == r["binds"] == r["bound"] and case[WITHOUT]["reserved"] == 0
        out.append(
            f"check {case['case']}: every binding of the arbiter's side reserved, none of the baseline's: "
            f"{'yes' if complete else 'NO'}"
        )
    return out


# -- what one GPULedger write costs the API server (--ledger-puts) --------------------------------


def _entry(i: int, node: str) -> Allocation:
    grant = DeviceGrant(f"GPU-{node}-{i % GPUS}", RATE_MIB, 0)
    return Allocation(
        pod_uid=str(uuid.uuid4()),
        namespace=NAMESPACE,
        name=f"rate-{i:05d}",
        queue="default",
        containers=(ContainerGrant(0, "main", (grant,)),),
        admitted=True,
        reserved_at=int(time.time()),
    )


# A built-in object of the same bytes, for comparison: what any object of that size costs to write.
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap", True)
PRODUCT = "product"


@dataclass
class PutStream:
    """One object PUT over and over (compare-and-swap): its bodies in turn, its CPU and latencies."""

    resource: Resource
    first: Obj
    bodies: list[Obj]
    version: str = ""
    sent: int = 0
    latencies: list[float] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0  # wall time of its PUTs


async def idle_cpu(plane: ControlPlane, seconds: float) -> dict[str, float]:
    """CPU seconds per second kube-apiserver and etcd spend with no request of ours (their own
    controllers, leases, the controller manager's and scheduler's polls): subtracted from each
    stream over its wall time, so a slower PUT is not also charged more background work."""
    before, started = cpu_by_process(plane, None), time.perf_counter()
    await asyncio.sleep(seconds)
    after, elapsed = cpu_by_process(plane, None), time.perf_counter() - started
    return {k: (after[k] - before[k]) / elapsed for k in ("kube-apiserver", "etcd")}


async def timed_puts(
    admin: AioClusterClient, plane: ControlPlane, streams: list[PutStream], blocks: int = 4
) -> None:
    """Each stream's first body created, then its bodies PUT one at a time (each over the one
    before), the streams taking turns in ``blocks`` blocks (A B B A ...), so drift and other work
    on the machine fall on each alike: CPU ms a PUT of kube-apiserver and etcd, and the PUT's p50."""
    for stream in streams:
        stream.version = (await admin.create(stream.resource, stream.first))["metadata"]["resourceVersion"]
    per_block = max(1, len(streams[0].bodies) // blocks)
    for block in range(blocks):
        order = streams if block % 2 == 0 else streams[::-1]
        for stream in order:
            chunk = stream.bodies[stream.sent : stream.sent + per_block]
            before, busy, started_chunk = cpu_by_process(plane, None), machine_busy(), time.perf_counter()
            for body in chunk:
                body["metadata"]["resourceVersion"] = stream.version
                started = time.perf_counter()
                written = await admin.replace(stream.resource, body)
                stream.latencies.append((time.perf_counter() - started) * 1000)
                stream.version = written["metadata"]["resourceVersion"]
            after, busy = cpu_by_process(plane, None), machine_busy() - busy
            stream.seconds += time.perf_counter() - started_chunk
            stream.sent += len(chunk)
            for k in ("kube-apiserver", "etcd"):
                stream.cpu[k] = stream.cpu.get(k, 0.0) + after[k] - before[k]
            # The machine's busy time no process of this run accounts for: other work on a shared machine.
            stream.cpu["other"] = (
                stream.cpu.get("other", 0.0) + busy - sum(after[k] - before[k] for k in after)
            )


def put_result(stream: PutStream, idle: dict[str, float]) -> dict[str, Any]:
    """CPU ms a PUT as measured (``raw_cpu_ms``) and less the processes' idle rate over the PUTs'
    wall time (``cpu_ms``: what the PUTs caused), the PUT's p50."""
    sent = max(1, stream.sent)
    raw = {k: round(v * 1000 / sent, 2) for k, v in stream.cpu.items()}
    net = {k: round((stream.cpu[k] - idle[k] * stream.seconds) * 1000 / sent, 2) for k in idle}
    net["other"] = raw["other"]
    return {
        "cpu_ms": net,
        "raw_cpu_ms": raw,
        "p50_ms": round(percentile(stream.latencies, 0.5), 2),
        "puts": sent,
    }


def _config_map(name: str, ledger: Obj) -> Obj:
    """The ledger's JSON as a ConfigMap's one value: the same bytes, a built-in object."""
    data = {"ledger": json.dumps({k: v for k, v in ledger.items() if k != "metadata"})}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"},
            "data": data}  # fmt: skip


async def _served(admin: AioClusterClient, resource: Resource) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(NotFound):
            await admin.list(resource, limit=1)
            return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{resource.kind} not served")


def _encoding(name: str) -> tuple[Resource, Callable[[NodeLedger, NodeInfo | None], Obj]]:
    """Where an encoding is written and how: what ships (``product``: the LedgerWriter's body, summary
    included) or a candidate of bench/ledger_encodings.py."""
    if name == PRODUCT:
        return LEDGERS, lambda ledger, info: encode_ledger(ledger, ledger_summary(ledger, info))
    return CANDIDATES[name].resource, CANDIDATES[name].encode


def _without_managed_fields(body: Obj) -> Obj:
    """``managedFields: []``: kube-apiserver 1.20 resets the field ownership, and then tracks none."""
    body["metadata"]["managedFields"] = []
    return body


async def ledger_put_cost(
    puts: int,
    sizes: list[int],
    workdir: Path,
    encodings: list[str],
    managed_fields: list[bool],
    *,
    settle: float = 30.0,
) -> list[dict[str, Any]]:
    """Per ledger size and encoding: ``puts`` compare-and-swap PUTs of one ledger, one at a time, an
    entry added and removed in turn (encoded as a LedgerWriter encodes them, summary included), on
    a control plane with nothing else to do; CPU ms a PUT by process and the PUT's p50 latency; and
    the same for a ConfigMap carrying the same JSON (a built-in object of the same size).
    ``encodings``: ``product`` (the shipped CRD and encoder) and candidates (bench/ledger_encodings.py),
    each served under a CRD of its own; ``managed_fields``: with field tracking, without (each PUT
    resets it), or both."""
    binaries = cached_binaries() or ensure_built(lambda line: print(line, file=sys.stderr))
    rows = []
    with ControlPlane(binaries, workdir / "plane") as plane:
        admin = await AioClusterClient.from_kubeconfig(str(plane.kubeconfig))
        try:
            await install_crds(admin)
            for name in encodings:
                if name != PRODUCT:
                    await admin.create(CRDS, CANDIDATES[name].definition())
                    await _served(admin, CANDIDATES[name].resource)
            await asyncio.sleep(settle)  # the API server's OpenAPI aggregation after a CRD, off the clock
            idle = await idle_cpu(plane, min(settle, 15.0))
            log(f"idle CPU, cores: {idle}")
            for size in sizes:
                for name in encodings:
                    for tracked in managed_fields:
                        node = f"node-{size:04d}-{name}-{'mf' if tracked else 'nomf'}"
                        info = _node_infos([node])[node]
                        base = NodeLedger(node=node).with_allocations([_entry(i, node) for i in range(size)])
                        ledgers = [base.with_allocation(_entry(size + k, node)) if k % 2 == 0 else base
                                   for k in range(puts)]  # fmt: skip
                        resource, encode = _encoding(name)
                        body = encode(base, info)
                        bodies = [encode(new, info) for new in ledgers]
                        if not tracked:
                            bodies = [_without_managed_fields(b) for b in bodies]
                        ledger = PutStream(resource, body, bodies)
                        maps = [_config_map(node, b) for b in bodies]
                        config_map = PutStream(CONFIGMAPS, _config_map(node, body), maps)
                        await timed_puts(admin, plane, [ledger, config_map], blocks=max(2, puts // 50))
                        row = {"entries": size, "encoding": name, "managed_fields": tracked,
                               "bytes": len(json.dumps(body)), **put_result(ledger, idle),
                               "config_map": put_result(config_map, idle)}  # fmt: skip
                        rows.append(row)
                        log(f"ledger of {size} entries, {name}, managedFields {tracked}: {row}")
        finally:
            await admin.close()
    return rows


def put_report(rows: list[dict[str, Any]], puts: int) -> str:
    lines = [
        f"machine: {machine()}",
        f"one GPULedger PUT (compare-and-swap, {puts} a size, one at a time, nothing else running on the "
        "control plane but its own components), beside a ConfigMap holding the same JSON (managedFields "
        "tracked, as any object's), the two in alternating blocks; CPU less each process's idle rate over "
        "the PUTs' wall time (raw in the JSON)",
        "",
        "| entries | encoding | managedFields | object bytes | kube-apiserver CPU ms a PUT | "
        "etcd CPU ms a PUT | PUT p50 ms | ConfigMap: kube-apiserver CPU ms | ConfigMap: PUT p50 ms | "
        "CPU ratio (raw) | other work, CPU ms a PUT |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        m = r["config_map"]
        ratio = r["cpu_ms"]["kube-apiserver"] / max(m["cpu_ms"]["kube-apiserver"], 0.01)
        raw = r["raw_cpu_ms"]["kube-apiserver"] / max(m["raw_cpu_ms"]["kube-apiserver"], 0.01)
        lines.append(
            f"| {r['entries']} | {r['encoding']} | {'tracked' if r['managed_fields'] else 'none'} | "
            f"{r['bytes']} | {r['cpu_ms']['kube-apiserver']} | {r['cpu_ms']['etcd']} | "
            f"{r['p50_ms']} | {m['cpu_ms']['kube-apiserver']} | {m['p50_ms']} | {ratio:.2f} ({raw:.2f}) | "
            f"{r['cpu_ms']['other']} / {m['cpu_ms']['other']} |"
        )
    return "\n".join(lines)


# -- what the arbiter's cache of unbound pods holds (--pending-memory) -------------------------------


async def pending_memory(count: int, workdir: Path) -> list[dict[str, Any]]:
    """``count`` unbound vGPU pods created on the real control plane, then listed and watched by the
    webhook's cache (the projection it keeps) and, for comparison, by a cache of the whole pods:
    Python heap held once each has synced (tracemalloc, after a full collection; the informer's
    open watch and its buffers included)."""
    binaries = cached_binaries() or ensure_built(lambda line: print(line, file=sys.stderr))
    rows = []
    with ControlPlane(binaries, workdir / "plane") as plane:
        admin = await AioClusterClient.from_kubeconfig(str(plane.kubeconfig))
        try:
            namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
            await admin.create(NAMESPACES, namespace)
            await service_account_ready(admin, NAMESPACE)
            log(f"creating {count} unbound pods")
            pods = (admin.create(PODS, pod_object(f"pending-{i:05d}", RATE_MIB), namespace=NAMESPACE)
                    for i in range(count))  # fmt: skip
            await gather_bounded(pods, 16)
            nvidia = default_config().nvidia
            for kept in ("the arbiter's projection", "whole pods"):
                gc.collect()
                tracemalloc.start()
                before = tracemalloc.get_traced_memory()[0]
                informer = (
                    PendingPods.watching(admin, nvidia).informer  # as the webhook runs it
                    if kept != "whole pods"
                    else Informer(admin, PODS, field_selector=UNBOUND)
                )
                task = asyncio.create_task(informer.run())
                await informer.wait_synced()
                gc.collect()
                held = tracemalloc.get_traced_memory()[0] - before
                tracemalloc.stop()
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                cached = len(informer.items)
                rows.append({"kept": kept, "pods": cached, "bytes": held, "per_pod": round(held / cached)})
                log(f"{kept}: {rows[-1]}")
        finally:
            await admin.close()
    return rows


def memory_report(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"machine: {machine()}",
        "unbound pods cached by a watch (field selector spec.nodeName=), Python heap held after sync:",
        "",
        "| kept | pods | MiB | bytes a pod |",
        "|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['kept']} | {r['pods']} | {r['bytes'] / 2**20:.1f} | {r['per_pod']} |")
    return "\n".join(lines)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    def go(workdir: Path) -> dict[str, Any]:
        if args.ledger_puts:
            tracking = {"tracked": [True], "none": [False], "both": [True, False]}[args.put_managed_fields]
            settle = 1.0 if args.smoke else 30.0
            cost = ledger_put_cost(
                args.ledger_puts, args.put_sizes, workdir, args.put_encodings, tracking, settle=settle
            )
            return {"ledger_puts": asyncio.run(cost)}
        if args.pending_memory:
            return {"pending_memory": asyncio.run(pending_memory(args.pending_memory, workdir))}
        return asyncio.run(run(args, workdir))

    if args.keep:
        workdir = Path(args.keep).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        return go(workdir)
    with tempfile.TemporaryDirectory(prefix="vgpu-arbiter-bench-") as tmp:
        return go(Path(tmp))


def _stop_started() -> None:
    """The webhook process, if the run left before stopping it (it runs in this session)."""
    for proc in STARTED:
        if proc.process is not None and proc.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.process.pid, signal.SIGKILL)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--rate", type=float, default=100.0, help="binds a second in the open loop")
    parser.add_argument("--seconds", type=float, default=10.0, help="one open-loop segment")
    parser.add_argument("--segments", type=int, default=3, help="open-loop segments a side")
    parser.add_argument("--gang", type=int, default=64, help="members of a gang")
    parser.add_argument("--gang-nodes", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5, help="gangs a side")
    parser.add_argument("--warmup", type=int, default=50, help="binds after each switch, not counted")
    parser.add_argument("--probes", type=int, default=PROBES, help="probe pods for the switches")
    parser.add_argument("--max-seconds", type=float, default=900.0, help="cap on the measured part")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (the webhook's log)")
    parser.add_argument(
        "--ledger-puts",
        type=int,
        default=0,
        metavar="N",
        help="instead: what one GPULedger PUT costs the API server, N PUTs for each --put-sizes",
    )
    parser.add_argument(
        "--put-sizes", type=lambda s: [int(x) for x in s.split(",") if x], default=[1, 10, 30, 80]
    )
    parser.add_argument(
        "--put-encodings",
        type=lambda s: [x for x in s.split(",") if x],
        default=[PRODUCT],
        help=f"with --ledger-puts: {PRODUCT} (the shipped CRD) and/or candidates: {', '.join(CANDIDATES)}",
    )
    parser.add_argument(
        "--put-managed-fields",
        choices=("tracked", "none", "both"),
        default="tracked",
        help="with --ledger-puts: PUTs as sent (tracked), with managedFields: [] (none), or both",
    )
    parser.add_argument(
        "--pending-memory",
        type=int,
        default=0,
        metavar="N",
        help="instead: the memory the webhook's cache of unbound pods holds for N pods (and whole pods')",
    )
    parser.add_argument(
        "--profile",
        metavar="FILE",
        help="run the webhook under cProfile and write its profile to FILE (read with pstats); "
        "profiling slows the webhook, so its latencies are not the product's",
    )
    parser.add_argument("--smoke", action="store_true", help="10 nodes, 20 binds/s for 1 s, a 16-pod gang")
    args = parser.parse_args()
    if args.smoke:
        args.nodes, args.rate, args.seconds, args.segments = 10, 20.0, 1.0, 1
        args.gang, args.gang_nodes, args.rounds, args.warmup, args.probes = 16, 2, 1, 5, 40
    if args.profile:
        args.profile = str(Path(args.profile).resolve())  # the webhook runs in another directory
    if args.gang > args.gang_nodes * GPUS:
        parser.error(f"--gang: at most {GPUS} members a node (one card each)")
    socket.setdefaulttimeout(60)
    # `timeout` and CI runners stop a run with SIGTERM: leave through the context managers, so the
    # webhook and the control plane (its processes each in a session of their own) are stopped.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    try:
        result = measure(args)
    finally:
        _stop_started()
    if args.ledger_puts:
        print(put_report(result["ledger_puts"], args.ledger_puts), flush=True)
    elif args.pending_memory:
        print(memory_report(result["pending_memory"]), flush=True)
    else:
        print(report(result), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
