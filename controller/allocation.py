"""The allocation controller: one pass = read -> release/adopt -> decide -> CAS ledgers -> bind.

Every pass starts from fresh reads, ledgers FIRST and pods second: an entry read at t1 belongs to
a pod created before t1, so if the pod list (t2 > t1) lacks it the pod is really gone; and a pod
bound by another replica after t1 had its entry written after t1, so our CAS on that ledger
fails. Every ledger write carries the resourceVersion it was decided on; on 409 the pass stops
and the next pass re-reads and decides again (``settle`` loops). A pod is bound only after a
successful write that marks its entry ``committed``; committed entries are released only when
the pod ends (deleted, Succeeded, Failed) or is found bound elsewhere. docs/design/ledger.md
walks through every crash window.

Per pass:
1. release entries of ended pods, adopt bound pods that carry an assignment but have no entry,
   report invariant violations found in the ledgers (Event, metric, audit line; never evict);
2. place pending pods (ours: ``spec.schedulerName``) in priority/creation order, gangs as one
   decision; reserve, and commit when the node has no pod in ``bind-phase=allocating``;
3. write the changed ledgers (CAS), then bind committed entries, one per node, with the device
   annotations on the Binding; Events and audit lines; ``PodScheduled=False`` with the reason for
   pods that cannot be placed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry

from vgpu_guard.controller.binder import Binder, Waiting
from vgpu_guard.controller.inputs import InputSource, ListedInputs, list_all
from vgpu_guard.controller.metrics import AllocationMetrics, LedgerSnapshot
from vgpu_guard.controller.unplaceable import UnplaceableMemo
from vgpu_guard.engine.allocator import Allocator, Unplaceable, pod_queue
from vgpu_guard.engine.annotations import BIND_PHASE, BIND_TIME, VGPU_IDS, VGPU_NODE
from vgpu_guard.engine.assignment import (
    AssignmentError,
    adopted_allocation,
    allocation_annotations,
    decode_assignment_entries,
    encode_assignment,
    hold_larger,
)
from vgpu_guard.engine.cluster import ClusterView, NodeInfo
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.ledger import (
    Allocation,
    GpuUsage,
    LedgerError,
    NodeLedger,
    check_invariants,
    check_write,
    decode_ledger,
    encode_ledger,
    gpu_usage,
)
from vgpu_guard.engine.ledger_summary import ledger_summary
from vgpu_guard.engine.pod_request import (
    GROUP_ANNOTATIONS,
    PodRequest,
    PodRequestError,
    pod_request,
    whole_card_gpus,
)
from vgpu_guard.engine.scheduling import PodFacts, Workloads, pod_facts
from vgpu_guard.engine.untrusted import plain_int
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.errors import Conflict, KubeError, NotFound
from vgpu_guard.kube.resources import (
    EVENTS,
    LEDGERS,
    NAMESPACES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    PODS,
    Resource,
)
from vgpu_guard.logs import audit

__all__ = ["AllocationController", "Clock", "PassResult"]

log = logging.getLogger("vgpu_guard.controller.allocation")

Obj = dict[str, Any]
Clock = Callable[[], float]
_COMPONENT = "vgpu-guard"
_EVENT_MESSAGE_LIMIT = 1024
_FINDINGS_SHOWN = 5


@dataclass
class PassResult:
    """What one pass did; ``changed`` is False when the cluster was already settled."""

    bound: list[str] = field(default_factory=list)
    reserved: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    # Ledger entries raised to what their bound pod's assignment annotation says (verify pass).
    repaired: list[str] = field(default_factory=list)
    unschedulable: list[str] = field(default_factory=list)
    conflicts: int = 0
    errors: list[str] = field(default_factory=list)
    pending: int = 0

    @property
    def changed(self) -> bool:
        return bool(
            self.bound or self.reserved or self.released or self.adopted or self.repaired or self.conflicts
        )


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    a = _meta(obj).get("annotations")
    return a if isinstance(a, Mapping) else {}


def _phase(pod: Mapping[str, Any]) -> str:
    status = pod.get("status")
    return str(status.get("phase") or "") if isinstance(status, Mapping) else ""


def _node_name(pod: Mapping[str, Any]) -> str:
    spec = pod.get("spec")
    return str(spec.get("nodeName") or "") if isinstance(spec, Mapping) else ""


def _terminal(pod: Mapping[str, Any]) -> bool:
    return _phase(pod) in ("Succeeded", "Failed")


# Requests of one pass sent at once (ledger writes of different nodes, bindings, reports): enough to
# keep the API server busy while this process decides nothing meanwhile, few enough that a pass over a
# flood of unplaceable pods does not swamp it.
WRITE_CONCURRENCY = 16


async def _concurrently(calls: Iterable[Awaitable[None]], limit: int = WRITE_CONCURRENCY) -> None:
    """Await ``calls`` with at most ``limit`` in flight; after all have ended, raise the first error."""
    gate = asyncio.Semaphore(limit)

    async def gated(call: Awaitable[None]) -> None:
        async with gate:
            await call

    outcomes = await asyncio.gather(*(gated(c) for c in calls), return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome


class AllocationController:
    """The allocation loop's state across passes: metrics, what was already reported."""

    def __init__(
        self,
        client: ClusterClient,
        config: GuardConfig,
        *,
        identity: str,
        clock: Clock = time.time,
        registry: CollectorRegistry = REGISTRY,
        metrics: AllocationMetrics | None = None,
        inputs: InputSource | None = None,
        write_concurrency: int = WRITE_CONCURRENCY,
    ) -> None:
        self.client = client
        # Fresh LISTs every pass unless told otherwise (run_controller passes its informers).
        self.inputs: InputSource = inputs or ListedInputs(client)
        self.write_concurrency = write_concurrency
        # Events leave in the background when set (the run loop); settle() waits for them.
        self.background_events = False
        self._events: set[asyncio.Task[None]] = set()
        # Decoded ledgers and parsed pod facts by resourceVersion: a pass re-parses only what changed.
        self._decoded: dict[str, tuple[str, NodeLedger]] = {}
        self._facts: dict[str, tuple[tuple[str, str], PodFacts]] = {}
        self._requests: dict[str, tuple[str, PodRequest | PodRequestError | None]] = {}
        self._unplaceable = UnplaceableMemo()
        self.binder = Binder(self._bind, concurrency=write_concurrency)
        self._bound_keys: list[str] = []  # every binding made, in order (passes report their share)
        self._placed_count = 0
        self.config = config
        self.identity = identity
        self.clock = clock
        self.metrics = metrics or AllocationMetrics(registry)
        self._reported_violations: dict[str, frozenset[str]] = {}
        self._reported_pods: set[tuple[str, str]] = set()
        self._reported_findings: set[tuple[str, str, str]] = set()
        self._bad_ledgers: set[str] = set()
        self._last_error: str | None = None

    # --- reads ---------------------------------------------------------------------------------

    async def _list(self, resource: Resource, *, optional: bool = False) -> list[Obj]:
        return await list_all(self.client, resource, optional=optional)

    def _pod_facts(self, pod: Obj) -> PodFacts:
        """``pod_facts`` once per pod version (a steady pass re-reads every bound pod)."""
        meta = _meta(pod)
        uid = str(meta.get("uid"))
        key = (str(meta.get("resourceVersion") or ""), _node_name(pod))
        cached = self._facts.get(uid)
        if cached is not None and cached[0] == key and key[0]:
            return cached[1]
        facts = pod_facts(pod)
        self._facts[uid] = (key, facts)
        return facts

    def _pod_request(self, pod: Obj) -> PodRequest | None:
        """``pod_request`` (with its facts) once per pending pod version; raises as it does."""
        meta = _meta(pod)
        uid, rv = str(meta.get("uid")), str(meta.get("resourceVersion") or "")
        cached = self._requests.get(uid)
        if cached is not None and rv and cached[0] == rv:
            if isinstance(cached[1], PodRequestError):
                raise cached[1]
            return cached[1]
        try:
            request = pod_request(pod, self.config.nvidia)
        except PodRequestError as e:
            self._requests[uid] = (rv, e)
            raise
        if request is not None:
            request = replace(request, facts=self._pod_facts(pod))
        self._requests[uid] = (rv, request)
        return request

    def _forget_gone(self, pods: Mapping[str, Obj]) -> None:
        """Drop parse caches of pods that are gone, when they have grown well past the cluster."""
        if len(self._facts) > 2 * len(pods) + 1000:
            self._facts = {u: v for u, v in self._facts.items() if u in pods}
        if len(self._requests) > 2 * len(pods) + 1000:
            self._requests = {u: v for u, v in self._requests.items() if u in pods}

    def _decode(self, obj: Obj) -> NodeLedger:
        """``decode_ledger`` once per ledger version; raises LedgerError as it does."""
        meta = _meta(obj)
        name, rv = str(meta.get("name")), str(meta.get("resourceVersion") or "")
        cached = self._decoded.get(name)
        if cached is not None and rv and cached[0] == rv:
            return cached[1]
        ledger = decode_ledger(obj)
        self._unplaceable.epoch.ledger_changed(cached[1] if cached is not None else None, ledger)
        self._decoded[name] = (rv, ledger)
        return ledger

    # --- writes --------------------------------------------------------------------------------

    async def _write_ledger(self, old: NodeLedger, new: NodeLedger, info: NodeInfo | None = None) -> None:
        # The summary (kubectl columns) rides in the same CAS write; ``info``: the node's registration.
        summary = ledger_summary(new, info, self.config.nvidia.gpu_memory_factor)
        body = encode_ledger(new, summary)
        if old.resource_version is None:
            if not new.allocations:
                return
            written = await self.client.create(LEDGERS, body)
        else:
            written = await self.client.replace(LEDGERS, body)
        if isinstance(written, dict) and written.get("metadata"):
            self.inputs.wrote_ledger(written)

    async def _event(
        self, obj: Mapping[str, Any], *, reason: str, message: str, type_: str = "Normal"
    ) -> None:
        meta = _meta(obj)
        kind = str(obj.get("kind") or "Pod")
        namespace = str(meta.get("namespace") or "default")
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock()))
        if len(message) > _EVENT_MESSAGE_LIMIT:
            message = message[: _EVENT_MESSAGE_LIMIT - 15] + "... (truncated)"
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name')}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": str(obj.get("apiVersion") or "v1"),
                "kind": kind,
                "name": meta.get("name"),
                "namespace": meta.get("namespace") or "",
                "uid": meta.get("uid"),
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": _COMPONENT},
            "reportingComponent": _COMPONENT,
            "reportingInstance": self.identity,
        }
        try:
            await self.client.create(EVENTS, event, namespace=namespace)
        except KubeError as e:
            log.warning("cannot record event %s on %s/%s: %s", reason, namespace, meta.get("name"), e)

    async def _workloads(
        self, pods: Sequence[Obj], ledgers: Mapping[str, NodeLedger], pending: Sequence[PodFacts]
    ) -> Workloads:
        """The pods each node runs, as kube-scheduler's filters count them: bound and not terminal,
        plus those our ledgers reserve a node for before their binding (so that two replicas,
        which serialise on the node's ledger, never promise its CPU or ports twice). Claims,
        volumes and namespace labels are read only when a pending pod needs them."""
        reserved = {uid: node for node, ledger in ledgers.items() for uid in ledger.allocations}
        placed = []
        for pod in pods:
            if _terminal(pod):
                continue
            node = _node_name(pod) or reserved.get(str(_meta(pod).get("uid")))
            if node:
                placed.append((self._pod_facts(pod), node))
        self._unplaceable.epoch.placed_pods(f.uid for f, _ in placed)
        self._placed_count = len(placed)
        needs_volumes = any(f.claims for f in pending)
        needs_namespaces = any(
            t.namespace_selector is not None for f in pending for t in (*f.affinity, *f.anti_affinity)
        ) or any(t.namespace_selector is not None for f, _ in placed for t in f.anti_affinity)
        return Workloads(
            placed,
            claims=await self._list(PERSISTENT_VOLUME_CLAIMS, optional=True) if needs_volumes else (),
            volumes=await self._list(PERSISTENT_VOLUMES, optional=True) if needs_volumes else (),
            namespaces=await self._list(NAMESPACES) if needs_namespaces else (),
        )

    async def _unschedulable(self, pod: Obj, message: str, result: PassResult) -> None:
        """PodScheduled=False/Unschedulable with the message, and an Event, when the message is new."""
        meta = _meta(pod)
        status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
        assert isinstance(status, Mapping)
        conditions = [c for c in status.get("conditions") or [] if isinstance(c, Mapping)]
        current = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        result.unschedulable.append(f"{meta.get('namespace')}/{meta.get('name')}")
        if current is not None and current.get("status") == "False" and current.get("message") == message:
            return
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock()))
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": now,
        }
        others = [dict(c) for c in conditions if c.get("type") != "PodScheduled"]
        try:
            await self.client.patch(
                PODS,
                str(meta.get("name")),
                {"status": {"conditions": [*others, condition]}},
                namespace=str(meta.get("namespace")),
                subresource="status",
            )
        except NotFound:
            return
        except KubeError as e:
            result.errors.append(f"pods/status {meta.get('namespace')}/{meta.get('name')}: {e}")
            return
        self.metrics.unschedulable.inc()
        self._emit(self._event(pod, reason="FailedScheduling", message=message, type_="Warning"))

    async def _confirm_missing(self, ledgers: Mapping[str, NodeLedger], by_uid: dict[str, Obj]) -> None:
        """Ask the server about ledger entries whose pod the cache does not hold (yet).

        A cache may lag the ledgers it is compared with: a pod created and reserved moments ago
        can be missing from it. Releasing such an entry would free capacity a bound pod may use,
        so before a release for "deleted" the pod is read; a pod with the same UID is kept.
        """
        missing = [
            entry
            for ledger in ledgers.values()
            for uid, entry in ledger.allocations.items()
            if uid not in by_uid
        ]

        async def confirm(entry: Allocation) -> None:
            try:
                pod = await self.client.get(PODS, entry.name, namespace=entry.namespace)
            except NotFound:
                return
            if str(_meta(pod).get("uid")) == entry.pod_uid:
                by_uid[entry.pod_uid] = pod

        await _concurrently((confirm(e) for e in missing), self.write_concurrency)

    # --- the pass ------------------------------------------------------------------------------

    async def run_once(self) -> PassResult:
        """One deterministic pass (see the module docstring); never raises for API errors."""
        result = PassResult()
        started = time.monotonic()
        try:
            await self._pass(result)
            log.debug(
                "pass: %.1f ms, %d pending, %d reserved, %d bound",
                (time.monotonic() - started) * 1000,
                result.pending,
                len(result.reserved),
                len(result.bound),
            )
            if not self.background_events:
                await self.flush_events()
        except Conflict as e:
            self.metrics.conflicts.inc()
            result.conflicts += 1
            log.info("ledger write lost a race, re-deciding on the next pass: %s", e)
        except KubeError as e:
            result.errors.append(str(e))
            if str(e) != self._last_error:
                log.warning(
                    "allocation pass failed, retrying with backoff (logged again if the error changes): %s", e
                )
            self._last_error = str(e)
            return result
        if self._last_error is not None:
            log.info("allocation passes succeed again")
        self._last_error = None
        return result

    async def settle(self, *, max_passes: int = 100) -> list[PassResult]:
        """Run passes until one changes nothing (or ``max_passes``): what ``simulate`` calls."""
        results = []
        for _ in range(max_passes):
            outcome = await self.run_once()
            results.append(outcome)
            # Settled, or failing: a failing pass is not retried here (the caller backs off).
            if not outcome.changed or outcome.errors:
                break
        return results

    async def _pass(self, result: PassResult) -> None:
        now = int(self.clock())
        nvidia = self.config.nvidia
        # Ledgers first, then pods: see the module docstring for why the order matters.
        inputs = await self.inputs.read(self.config)
        ledger_objs, pods, node_objs = inputs.ledgers, inputs.pods, inputs.nodes

        ledgers: dict[str, NodeLedger] = {}
        bad: set[str] = set()
        while ledger_objs:
            # Popped, so each raw object is freed once decoded: at 100,000 entries the raw JSON
            # is ~130 MB the rest of the pass does not need.
            obj = ledger_objs.pop()
            try:
                ledger = self._decode(obj)
            except LedgerError as e:
                name = str(_meta(obj).get("name"))
                bad.add(name)
                if name not in self._bad_ledgers:
                    log.error("GPULedger %s is malformed, its node is left alone: %s", name, e)
                continue
            ledgers[ledger.node] = ledger
        self._bad_ledgers = bad
        view = inputs.view
        if bad:
            view = replace(view, nodes={n: i for n, i in view.nodes.items() if n not in bad})
        by_uid = {str(_meta(p).get("uid")): p for p in pods}
        self._forget_gone(by_uid)
        if not inputs.fresh:
            await self._confirm_missing(ledgers, by_uid)

        # 1. release, verify and adopt ---------------------------------------------------------
        updated = dict(ledgers)
        released: list[tuple[Allocation, str, str]] = []
        repaired: list[tuple[Allocation, str, list[str]]] = []
        invalid: list[tuple[Obj, list[str]]] = []
        held: set[str] = set()
        factor = nvidia.gpu_memory_factor
        for name, ledger in ledgers.items():
            for uid, entry in ledger.allocations.items():
                pod = by_uid.get(uid)
                reason = None
                if pod is None:
                    reason = "deleted"
                elif _terminal(pod):
                    reason = _phase(pod).lower()
                elif _node_name(pod) and _node_name(pod) != name:
                    reason = "moved"
                elif not _node_name(pod) and _meta(pod).get("deletionTimestamp"):
                    reason = "deleted"
                if reason is None:
                    held.add(uid)
                    assert pod is not None
                    raw = _annotations(pod).get(VGPU_IDS)
                    # Verify before trusting: a bound pod's annotation is what the plugin hands out.
                    # Our own bindings match the entry exactly (one string compare); anything else
                    # is decoded and the entry raised to the larger of the two, never lowered.
                    if (
                        raw
                        and _node_name(pod) == name
                        and raw != encode_assignment(entry.containers, memory_factor=factor)
                    ):
                        decoded = decode_assignment_entries(raw)
                        if decoded.invalid:
                            invalid.append((pod, decoded.invalid))
                        fixed, findings = hold_larger(entry, decoded.containers, memory_factor=factor)
                        if findings:
                            updated[name] = updated[name].without(uid).with_allocation(fixed)
                            repaired.append((fixed, name, findings))
                    continue
                updated[name] = updated[name].without(uid)
                released.append((entry, name, reason))
        adopted: list[tuple[Allocation, str]] = []
        for uid, pod in by_uid.items():
            node = _node_name(pod)
            raw = _annotations(pod).get(VGPU_IDS)
            if uid in held or not node or not raw or _terminal(pod) or node in bad:
                continue
            try:
                request = pod_request(pod, nvidia)
                if request is None:
                    continue
                queue, _ = pod_queue(request, view)
                adoption = adopted_allocation(
                    request, raw, queue=queue, node=view.nodes.get(node), nvidia=nvidia
                )
            except (PodRequestError, AssignmentError) as e:
                result.errors.append(
                    f"cannot adopt {_meta(pod).get('namespace')}/{_meta(pod).get('name')}: {e}"
                )
                continue
            if adoption.invalid:
                invalid.append((pod, adoption.invalid))
            if adoption.allocation.containers:  # nothing valid: nothing the plugin hands out
                adopted.append((adoption.allocation, node))
        by_node: dict[str, list[Allocation]] = {}
        for entry, node in adopted:
            by_node.setdefault(node, []).append(entry)
        for node, entries in by_node.items():
            updated[node] = (updated.get(node) or NodeLedger(node=node)).with_allocations(entries)
        for name, new in updated.items():
            old = ledgers.get(name) or NodeLedger(node=name)
            if new.allocations != old.allocations:
                await self._write_ledger(old, new, view.nodes.get(name))
        for entry, name, reason in released:
            self.metrics.releases.labels(reason).inc()
            result.released.append(entry.key)
            audit("release", pod=entry.key, uid=entry.pod_uid, node=name, reason=reason, by=self.identity)
        result.adopted.extend(entry.key for entry, _ in adopted)
        self.metrics.adoptions.inc(len(adopted))
        # One audit line per node: adoption is one ledger write per node, and at a first start on
        # a busy cluster per-pod lines would be 100,000 lines (~3 s of JSON logging) for one pass.
        for name, entries in by_node.items():
            audit(
                "adoption",
                node=name,
                pods=[e.key for e in entries],
                uids=[e.pod_uid for e in entries],
                by=self.identity,
            )
        if self._reported_findings:  # forget pods that are gone
            self._reported_findings = {k for k in self._reported_findings if k[0] in by_uid}
        for pod, skipped in invalid:
            await self._report_invalid_assignment(pod, skipped)
        for entry, name, findings in repaired:
            await self._report_repair(by_uid[entry.pod_uid], entry, name, findings)
        await self._report_adopted_over_capacity(adopted, updated, view)
        result.repaired.extend(entry.key for entry, _, _ in repaired)
        if released or adopted or repaired:
            return  # the next pass starts from what we just wrote (fresh resourceVersions)

        await self._report_violations(view, ledgers, node_objs)

        # 2. decide -----------------------------------------------------------------------------
        whole: dict[str, int] = {}
        busy: dict[str, str] = {}  # node -> the pod in bind-phase=allocating it waits for
        timeout = self.config.scheduling.allocating_timeout_seconds
        for pod in pods:
            node = _node_name(pod)
            if not node or _terminal(pod):
                continue
            whole[node] = whole.get(node, 0) + whole_card_gpus(pod)
            notes = _annotations(pod)
            if notes.get(BIND_PHASE) == "allocating" and notes.get(VGPU_NODE) == node:
                started = plain_int(str(notes.get(BIND_TIME, "0"))) or 0
                if now - started < timeout:
                    busy[node] = str(_meta(pod).get("uid"))
                else:
                    await self._once(
                        pod,
                        "AllocationTimeout",
                        (
                            f"the device plugin has not confirmed the GPU assignment within {timeout}s "
                            f"(bind-phase still allocating); node {node} is released for the next pod; check "
                            "the volcano-vgpu-device-plugin logs on that node"
                        ),
                    )
            elif notes.get(BIND_PHASE) == "failed":
                await self._once(
                    pod,
                    "DeviceAllocationFailed",
                    (
                        f"the device plugin reported bind-phase=failed on node {node}; the pod keeps its GPU "
                        "reservation until it ends; delete it so its controller recreates it"
                    ),
                )
        scheduler = self.config.scheduling.scheduler_name
        pending: list[tuple[PodRequest, Obj]] = []
        reports: list[
            tuple[Obj, str, str]
        ] = []  # (pod, message, PENDING_REASONS entry)  # PodScheduled=False + Event, sent together below
        for pod in pods:
            spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
            assert isinstance(spec, Mapping)
            if spec.get("schedulerName") != scheduler or _node_name(pod) or _terminal(pod):
                continue
            if _meta(pod).get("deletionTimestamp"):
                continue
            try:
                request = self._pod_request(pod)
            except PodRequestError as e:
                reports.append((pod, f"cannot read the vGPU request: {e}", "invalid-request"))
                continue
            if request is None:
                reports.append(
                    (
                        pod,
                        f"{scheduler} places only pods that request vGPU; remove spec.schedulerName "
                        "or add a volcano.sh/vgpu-number limit",
                        "invalid-request",
                    )
                )
                continue
            pending.append((request, pod))
        workloads = await self._workloads(pods, ledgers, [req.facts for req, _ in pending if req.facts])
        allocator = Allocator(view, ledgers, config=self.config, whole_card=whole, workloads=workloads)
        result.pending = len(pending)
        self.metrics.pending.set(len(pending))
        objects = {req.uid: pod for req, pod in pending}
        running: dict[tuple[str, str], int] = {}
        for pod in pods:
            group = next((g for k, g in _annotations(pod).items() if k in GROUP_ANNOTATIONS and g), "")
            if group and _node_name(pod) and not _terminal(pod):
                key = (str(_meta(pod).get("namespace") or "default"), group)
                running[key] = running.get(key, 0) + 1
        units = self._units(pending, view, running)
        reserved_before = {req.uid for req, _ in pending if allocator.allocation_of(req.uid) is not None}
        to_commit: list[str] = []
        memo = self._unplaceable.signature(inputs.generation, placed_pods=self._placed_count)
        self._unplaceable.forget_others(objects)
        for members, min_member, already in units:
            if min_member <= 1 and len(members) == 1:
                single = members[0]
                version = str(_meta(objects[single.uid]).get("resourceVersion") or "")
                known = self._unplaceable.known(single, version, memo)
                if known is not None:  # nothing that could change the answer changed
                    reports.append((objects[single.uid], known[0], known[1]))
                    continue
                placed = allocator.place(single, now=now)
                if isinstance(placed, Unplaceable):
                    self._unplaceable.remember(single, version, memo, (placed.message, placed.cause))
                    reports.append((objects[single.uid], placed.message, placed.cause))
                    continue
                allocator.commit(placed)
                if single.uid not in reserved_before:
                    result.reserved.append(single.key)
                # A single pod's reservation is never released because a decision changed (only
                # when it ends), so it is committed in the write that reserves it: all the pods
                # decided on a node share one ledger write, and are bound one by one as the
                # plugin's handshake allows (``_bindable``).
                if not placed.allocation.committed:
                    to_commit.append(single.uid)
                continue
            outcome = allocator.place_gang(members, min_member=min_member, running=already, now=now)
            for uid in outcome.released:
                meta = _meta(objects[uid])
                result.released.append(f"{meta.get('namespace')}/{meta.get('name')}")
                self.metrics.releases.labels("gang").inc()
            if not outcome.ok:
                for failure in outcome.failures:
                    reports.append((objects[failure.pod.uid], failure.message, failure.cause))
                continue
            for failure in outcome.failures:
                reports.append((objects[failure.pod.uid], failure.message, failure.cause))
            fresh = [p for p in outcome.placements if p.pod.uid not in reserved_before]
            result.reserved.extend(p.pod.key for p in fresh)
            if not fresh:
                # Every member was already reserved when this pass read the ledgers: commit them all.
                to_commit.extend(p.pod.uid for p in outcome.placements if not p.allocation.committed)
        for uid in to_commit:
            allocator.mark_committed(uid)

        # 3. write, then bind -------------------------------------------------------------------
        # Writes for different nodes, and bindings of different pods, are independent: they go out
        # together (bounded); every binding still waits for every ledger write of the pass.
        writes = []
        for name in sorted({*view.nodes, *ledgers}):
            old = ledgers.get(name) or NodeLedger(node=name)
            new = allocator.ledger(name)
            if new.allocations == old.allocations:
                continue
            info = view.nodes.get(name)
            if info is not None:
                problems = check_write(old, new, info, memory_factor=nvidia.gpu_memory_factor)
                if problems:
                    # The allocator never decides this; refusing the write keeps the invariant anyway.
                    log.error("refusing a ledger write for node %s: %s", name, [p.message for p in problems])
                    result.errors.append(f"ledger write for {name} refused: {problems[0].message}")
                    return
            writes.append(self._write_ledger(old, new, info))
        await _concurrently(writes, self.write_concurrency)
        before = len(self._bound_keys)
        self.binder.failures.clear()
        self.binder.offer(self._waiting(allocator, view, objects), busy)
        if not self.background_events:
            await self.binder.drain()
            result.errors.extend(self.binder.failures)
        result.bound.extend(self._bound_keys[before:])
        # Reasons last: binds must not wait behind a flood of status patches for pods with no room.
        self.metrics.set_pending_reasons(reason for _, _, reason in reports)
        await _concurrently(
            (self._unschedulable(pod, message, result) for pod, message, _ in reports), self.write_concurrency
        )

    async def _bind(self, entry_node: str, entry: Allocation, pod: Obj) -> bool:
        """POST the Binding with the device annotations; True when the pod was bound."""
        now = int(self.clock())
        notes = allocation_annotations(
            entry, node=entry_node, now=now, memory_factor=self.config.nvidia.gpu_memory_factor
        )
        try:
            await self.client.bind(
                entry.namespace, entry.name, node=entry_node, annotations=notes, uid=entry.pod_uid
            )
        except (Conflict, NotFound) as e:
            # Bound by another replica already, or gone: the next pass sees which.
            log.info("binding %s to %s did not happen: %s", entry.key, entry_node, e)
            return False
        self.inputs.bound(pod, entry_node, notes)
        self.metrics.allocations.labels(entry_node).inc()
        self._bound_keys.append(entry.key)
        devices = notes[VGPU_IDS]
        audit(
            "allocation",
            pod=entry.key,
            uid=entry.pod_uid,
            node=entry_node,
            devices=devices,
            queue=entry.queue,
            by=self.identity,
        )
        self._emit(
            self._event(
                pod,
                reason="Scheduled",
                message=f"Successfully assigned {entry.key} to {entry_node} ({devices})",
            )
        )
        return True

    def _emit(self, event: Coroutine[Any, Any, None]) -> None:
        """Send an Event without holding up the caller; ``flush_events`` waits for all of them."""
        task = asyncio.ensure_future(event)
        self._events.add(task)
        task.add_done_callback(self._events.discard)

    async def flush_events(self) -> None:
        """Wait for the Events sent in the background so far (they log their own failures)."""
        while self._events:
            await asyncio.gather(*list(self._events), return_exceptions=True)

    def _waiting(
        self, allocator: Allocator, view: ClusterView, pending: Mapping[str, Obj]
    ) -> dict[str, list[Waiting]]:
        """Committed entries of pending pods, per node: the Binder binds them one at a time."""
        out: dict[str, list[Waiting]] = {}
        for name in view.nodes:
            entries = [
                Waiting(e, pending[e.pod_uid])
                for e in allocator.ledger(name).allocations.values()
                if e.committed and e.pod_uid in pending
            ]
            if entries:
                out[name] = entries
        return out

    def _units(
        self,
        pending: Sequence[tuple[PodRequest, Obj]],
        view: ClusterView,
        running: Mapping[tuple[str, str], int],
    ) -> list[tuple[list[PodRequest], int, int]]:
        """Pending pods grouped into decisions: (members, minMember, members already running)."""
        gangs: dict[tuple[str, str], list[PodRequest]] = {}
        singles: list[tuple[list[PodRequest], int, int]] = []
        for request, _ in pending:
            key = (request.namespace, request.group)
            if request.group and key in view.podgroups:
                gangs.setdefault(key, []).append(request)
            else:
                singles.append(([request], 1, 0))
        units = singles
        for key, members in gangs.items():
            spec = view.podgroups[key].get("spec")
            raw = spec.get("minMember") if isinstance(spec, Mapping) else None
            min_member = raw if isinstance(raw, int) and raw > 0 else 1
            units.append((members, min_member, running.get(key, 0)))
        return sorted(units, key=lambda u: min(m.order for m in u[0]))

    async def _report_invalid_assignment(self, pod: Obj, problems: Sequence[str]) -> None:
        """Warning ``InvalidAssignmentEntry`` on the pod, once per distinct set of bad entries."""
        # Anyone who may update the pod writes this annotation: name a few entries, count the rest.
        shown = list(problems[:_FINDINGS_SHOWN])
        if len(problems) > _FINDINGS_SHOWN:
            shown.append(f"and {len(problems) - _FINDINGS_SHOWN} more")
        message = (
            f"{VGPU_IDS} has invalid entries: {'; '.join(shown)}; the device plugin skips "
            "malformed devices; every valid device is held in the GPU ledger until the pod ends"
        )
        key = (str(_meta(pod).get("uid")), "InvalidAssignmentEntry", message)
        if key in self._reported_findings:
            return
        self._reported_findings.add(key)
        name = f"{_meta(pod).get('namespace')}/{_meta(pod).get('name')}"
        self.metrics.assignment_mismatches.labels("invalid-entry").inc(len(problems))
        log.warning("pod %s: %s", name, message)
        audit("invalid-assignment", pod=name, entries=shown, by=self.identity)
        await self._event(pod, reason="InvalidAssignmentEntry", message=message, type_="Warning")

    async def _report_repair(self, pod: Obj, entry: Allocation, node: str, findings: Sequence[str]) -> None:
        """A ledger entry held less than its bound pod's annotation: raised already; say so loudly."""
        shown = list(findings[:_FINDINGS_SHOWN])
        if len(findings) > _FINDINGS_SHOWN:
            shown.append(f"and {len(findings) - _FINDINGS_SHOWN} more")
        message = (
            f"the GPU ledger of node {node} held less than this pod's {VGPU_IDS} says "
            f"({'; '.join(shown)}); the ledger now holds the larger amount until the pod ends and no "
            f"new pod is placed on that capacity; check who edited GPULedger {node} or this pod's annotations"
        )
        self.metrics.assignment_mismatches.labels("ledger-below-assignment").inc(len(findings))
        log.error("pod %s: %s", entry.key, message)
        audit(
            "ledger-repair",
            pod=entry.key,
            uid=entry.pod_uid,
            node=node,
            findings=shown,
            by=self.identity,
        )
        await self._event(pod, reason="LedgerMismatch", message=message, type_="Warning")

    async def _report_adopted_over_capacity(
        self,
        adopted: Sequence[tuple[Allocation, str]],
        ledgers: Mapping[str, NodeLedger],
        view: ClusterView,
    ) -> None:
        """Warning ``AssignmentOverCapacity`` on each adopted pod whose GPUs end up over registered capacity.

        The entry holds the pod's full claim (the plugin hands it out), so the card counts as full
        and nothing new lands on it; the Node gets its own Event from the invariant report.
        """
        factor = self.config.nvidia.gpu_memory_factor
        usage: dict[str, dict[str, GpuUsage]] = {}
        for entry, node in adopted:
            info = view.nodes.get(node)
            if info is None or node not in ledgers:
                continue
            if node not in usage:
                usage[node] = gpu_usage(ledgers[node].allocations.values())
            totals = {g.uuid: g.memory * factor for g in info.gpus}
            details = []
            for uuid in dict.fromkeys(g.uuid for g in entry.grants()):
                u = usage[node].get(uuid)
                total = totals.get(uuid)
                if u is None:
                    continue
                if total is None:
                    details.append(f"{uuid}: not registered on the node")
                elif u.memory > total:
                    details.append(f"{uuid}: {u.memory} MiB reserved > {total} MiB registered")
                elif u.cores > 100:
                    details.append(f"{uuid}: {u.cores}% cores reserved > 100%")
            if not details:
                continue
            pod_obj = {
                "kind": "Pod",
                "apiVersion": "v1",
                "metadata": {"name": entry.name, "namespace": entry.namespace, "uid": entry.pod_uid},
            }
            message = (
                f"this pod's {VGPU_IDS} on node {node} was not made by vgpu-guard and takes more than the "
                f"GPU has ({'; '.join(details)}); vgpu-guard holds the full claim until the pod ends and "
                "places no new pod on that GPU; check who set the annotation"
            )
            self.metrics.assignment_mismatches.labels("adopted-over-capacity").inc()
            log.error("pod %s: %s", entry.key, message)
            audit("adopted-over-capacity", pod=entry.key, uid=entry.pod_uid, node=node, by=self.identity)
            await self._event(pod_obj, reason="AssignmentOverCapacity", message=message, type_="Warning")

    async def _once(self, pod: Obj, reason: str, message: str) -> None:
        key = (str(_meta(pod).get("uid")), reason)
        if key in self._reported_pods:
            return
        self._reported_pods.add(key)
        await self._event(pod, reason=reason, message=message, type_="Warning")
        audit(reason, pod=f"{_meta(pod).get('namespace')}/{_meta(pod).get('name')}", by=self.identity)

    async def _report_violations(
        self, view: ClusterView, ledgers: Mapping[str, NodeLedger], node_objs: Sequence[Obj]
    ) -> None:
        """A loud report of any broken invariant (pre-existing overcommit), and the metrics snapshot."""
        factor = self.config.nvidia.gpu_memory_factor
        nodes_by_name = {str(_meta(o).get("name")): o for o in node_objs}
        counts: dict[str, int] = {}
        usage: dict[str, dict[str, GpuUsage]] = {}
        for name, info in view.nodes.items():
            ledger = ledgers.get(name) or NodeLedger(node=name)
            usage[name] = gpu_usage(ledger.allocations.values())
            violations = check_invariants(ledger, info, memory_factor=factor, usage=usage[name])
            counts[name] = len(violations)
            messages = frozenset(v.message for v in violations)
            if messages and messages != self._reported_violations.get(name):
                text = "; ".join(sorted(messages))
                log.error("GPU ledger of node %s breaks its invariants: %s", name, text)
                audit("overcommit", node=name, violations=sorted(messages), by=self.identity)
                node_obj = nodes_by_name.get(name, {"kind": "Node", "metadata": {"name": name}})
                await self._event(
                    {**node_obj, "kind": "Node", "apiVersion": "v1"},
                    reason="GPUOvercommitted",
                    message=(
                        f"{text}; these pods were bound before vgpu-guard reserved them; nothing is "
                        "evicted: new pods are kept off these GPUs until enough of them end"
                    ),
                    type_="Warning",
                )
            self._reported_violations[name] = messages
        self.metrics.ledgers.snapshot = LedgerSnapshot.of(view.nodes, usage, counts, factor)
