"""The allocation controller: one pass = take in changes -> release/verify/adopt -> decide -> CAS -> bind.

A pass reads its inputs (informer caches while running, fresh LISTs in ``simulate`` and tests) and
hands them to ``World`` (controller/world.py), which finds what changed since the last pass and
keeps the allocator and kube-scheduler's workloads in step with it, so a pass costs what changed,
not what the cluster holds. Every ledger write carries the resourceVersion it was decided on; on
409 the pass stops and the next one decides again from fresh state (``settle`` loops). A pod is
bound only after a successful write that marks its entry ``committed``; committed entries are
released only when the pod ends (deleted, Succeeded, Failed) or is found bound elsewhere.
docs/design/ledger.md walks through every crash window, and why stale caches are safe.

Per pass:
1. release entries of ended pods, cross-check entries against their bound pods' assignment
   annotations (hold the larger), adopt bound pods that carry an assignment but have no entry;
   all over the pods and entries that changed (``Changes.dirty``); report invariant violations of
   the nodes that changed (Event, metric, audit line; never evict);
2. place pending pods (ours: ``spec.schedulerName``) in priority/creation order, gangs as one
   decision; a single pod is reserved and committed in one write;
3. write the changed ledgers (CAS, all nodes at once, bounded), hand the committed entries to the
   Binder (one binding in flight per node, the plugin's handshake), and report ``PodScheduled=False``
   with the reason for pods that cannot be placed.

A write that fails for one node other than by a 409 (the CRD schema, an admission webhook, a 500)
stops nothing but that node: its decisions are undone, it takes no new pod until its retry (with
backoff, controller/unwritable.py), and it is reported on the Node and its GPULedger; every other
node's writes and bindings go on in the same pass (issue 36). A 409 still ends the pass.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry

from vgpu_guard.controller.binder import Binder, Waiting
from vgpu_guard.controller.gang_status import GangKey, GangStatusWriter
from vgpu_guard.controller.inputs import InputSource, ListedInputs
from vgpu_guard.controller.metrics import AllocationMetrics
from vgpu_guard.controller.reports import PassReports, Reporter
from vgpu_guard.controller.unplaceable import UnplaceableMemo
from vgpu_guard.controller.unwritable import UnwritableNodes, failure_reason
from vgpu_guard.controller.world import PodRecord, World
from vgpu_guard.engine.allocator import Allocator, Placement, Unplaceable, pod_queue
from vgpu_guard.engine.annotations import VGPU_IDS
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
from vgpu_guard.engine.ledger import Allocation, NodeLedger, check_write, decode_ledger
from vgpu_guard.engine.ledger_summary import ledger_summary
from vgpu_guard.engine.pod_request import GROUP_ANNOTATIONS, PodRequest, PodRequestError, pod_request
from vgpu_guard.engine.podgroup_status import GangState
from vgpu_guard.engine.scheduling import FactsMemo, PodFacts, Workloads
from vgpu_guard.kube.bounded import gather_bounded
from vgpu_guard.kube.client import ClusterClient, list_all
from vgpu_guard.kube.errors import Conflict, KubeError, NotFound
from vgpu_guard.kube.ledger_writer import LedgerWriter
from vgpu_guard.kube.resources import (
    PODS,
)
from vgpu_guard.logs import audit

__all__ = ["AllocationController", "Clock", "PassResult"]

log = logging.getLogger("vgpu_guard.controller.allocation")

Obj = dict[str, Any]
Clock = Callable[[], float]
# (pod, message, PENDING_REASONS entry) for a pod that stays Pending.
Report = tuple[Obj, str, str]


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


def _node_name(pod: Mapping[str, Any]) -> str:
    spec = pod.get("spec")
    return str(spec.get("nodeName") or "") if isinstance(spec, Mapping) else ""


# Ledger entries missing from the pod cache in one namespace confirmed by a GET each; more are
# confirmed by one LIST of the namespace (the same fresh read, after the ledgers were read).
CONFIRM_BY_GET = 16

# Seconds a time stamp from another clock (a pod's bind-time) may lie ahead of ours. Further ahead
# it is treated as expired: a bind-time of 9999999999 must not keep a node busy for ever (issue 36).
CLOCK_SKEW_SECONDS = 60

# A node whose ledger write failed is retried after this many seconds, doubling per failure in a row
# up to NODE_RETRY_CAP_SECONDS (run_controller passes its own retry period and cap).
NODE_RETRY_SECONDS = 2.0
NODE_RETRY_CAP_SECONDS = 16.0

# Ledger summaries compared with their node's registration per pass (the rest wait for the next).
SUMMARY_CHECKS_PER_PASS = 256

# Requests of one pass sent at once (ledger writes of different nodes, bindings, reports): enough to
# keep the API server busy while this process decides nothing meanwhile, few enough that a pass over a
# flood of unplaceable pods does not swamp it.
WRITE_CONCURRENCY = 16


def _with_facts(request: PodRequest, facts: PodFacts) -> PodRequest:
    return replace(request, facts=facts)


def release_reason(
    record: PodRecord | None, node: str, entry: Allocation | None = None, *, now: int = 0, hold: int = 0
) -> str | None:
    """Why a ledger entry on ``node`` no longer holds its pod (None: it does).

    An entry the arbiter reserved at admission (``admitted``) whose pod is still not bound after
    ``hold`` seconds is released too ("unbound"): its write was refused after admission, or Volcano
    discarded the assignment. ``hold`` outlasts the API server's request timeout, so the admitted
    write can no longer land (docs/design/ledger.md). A ``reservedAt`` further in the future than
    ``hold`` (a clock or a hand gone wrong) counts as expired, so it cannot hold a card for ever.
    """
    if record is None:
        return "deleted"
    if record.terminal:
        return record.pod_phase.lower()
    if record.node and record.node != node:
        return "moved"
    if not record.node and record.deleting:
        return "deleted"
    if entry is not None and entry.admitted and not record.node and abs(now - entry.reserved_at) >= hold:
        return "unbound"
    return None


# One ledger write: the ledger as read, the ledger to write, the node's registration (for the summary).
Write = tuple[NodeLedger, NodeLedger, NodeInfo | None]


@dataclass
class Reconciled:
    """Step 1's findings, written as one ledger per node."""

    updated: dict[str, NodeLedger] = field(default_factory=dict)
    released: list[tuple[Allocation, str, str]] = field(default_factory=list)
    repaired: list[tuple[Allocation, str, list[str]]] = field(default_factory=list)
    invalid: list[tuple[Obj, list[str]]] = field(default_factory=list)
    adopted: list[tuple[Allocation, str]] = field(default_factory=list)

    @property
    def any(self) -> bool:
        return bool(self.released or self.repaired or self.adopted)


def _without_nodes(step: Reconciled, nodes: set[str]) -> tuple[Reconciled, dict[str, None]]:
    """``step`` less what it decided on ``nodes`` (not written), and the pods of those entries."""
    left = {
        entry.pod_uid: None
        for entry, name in [
            *((e, n) for e, n, _ in step.released),
            *((e, n) for e, n, _ in step.repaired),
            *step.adopted,
        ]
        if name in nodes
    }
    kept = Reconciled(
        updated={n: ledger for n, ledger in step.updated.items() if n not in nodes},
        released=[r for r in step.released if r[1] not in nodes],
        repaired=[r for r in step.repaired if r[1] not in nodes],
        invalid=step.invalid,
        adopted=[a for a in step.adopted if a[1] not in nodes],
    )
    return kept, left


class AllocationController:
    """The allocation loop's state across passes: the world, caches, the binder, what was reported."""

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
        node_retry_seconds: float = NODE_RETRY_SECONDS,
        node_retry_cap_seconds: float = NODE_RETRY_CAP_SECONDS,
    ) -> None:
        self.client = client
        self.config = config
        self.identity = identity
        self.clock = clock
        self.metrics = metrics or AllocationMetrics(registry)
        # Fresh LISTs every pass unless told otherwise (run_controller passes its informers).
        self.inputs: InputSource = inputs or ListedInputs(client)
        self.write_concurrency = write_concurrency
        # Events leave in the background when set (the run loop); settle() waits for them.
        self.background_events = False
        self.reports = Reporter(client, config, identity=identity, clock=clock, metrics=self.metrics)
        self.world = World(config)
        self.binder = Binder(self._bind, concurrency=write_concurrency)
        self.gang_status = GangStatusWriter(client, clock=clock)
        # Every ledger write goes through the writer the webhook's arbiter uses too; our own writes
        # reach the informer cache at once (looked up at call time: run.py swaps ``inputs``).
        self.writer = LedgerWriter(
            client,
            memory_factor=config.nvidia.gpu_memory_factor,
            writer="controller",
            metrics=self.metrics.ledger_writes,
            on_written=self._wrote_ledger,
        )
        self._bound_keys: list[str] = []  # every binding made, in order (passes report their share)
        # Nodes whose ledger write failed (not a 409): held out of placement until their retry.
        self.unwritable = UnwritableNodes(base=node_retry_seconds, cap=node_retry_cap_seconds)
        # Nodes whose registration changed since their ledger's summary was last checked: the
        # summary (kubectl's FREE-MIB) is rewritten when it no longer matches (issue 36 item 5).
        self._summary_due: set[str] = set()
        self._node_objs: Mapping[str, Obj] = {}  # the pass's Node objects (for their Events)
        # Parsed pod facts and requests by resourceVersion: a pass re-parses only what changed.
        self._facts: dict[str, tuple[str, str, PodFacts]] = {}
        # Replicas sharing their spec pieces (the pod cache's SharedParts) are parsed once.
        self._derive_facts = FactsMemo()
        self._requests: dict[str, tuple[str, PodRequest | PodRequestError | None]] = {}
        self._unplaceable = UnplaceableMemo()
        self._reported_bad: dict[str, str] = {}
        self._unreconciled: dict[str, None] = {}  # an ordered set, as ``Changes.dirty``
        # Entries reserved at admission whose pod is not bound yet (uid -> reservedAt): checked
        # again once ``arbiter.unboundReleaseSeconds`` have passed, though nothing else changed.
        self._admitted_unbound: dict[str, int] = {}
        self._now = int(clock())
        self._last_error: str | None = None
        # The workloads that last indexed the side objects (claims, volumes, namespaces), and their version.
        self._side_indexed: tuple[Workloads, tuple[int, ...] | None] | None = None

    # --- parsing, once per object version ------------------------------------------------------

    def _pod_facts(self, pod: Obj) -> PodFacts:
        meta = _meta(pod)
        uid = str(meta.get("uid"))
        rv, node = str(meta.get("resourceVersion") or ""), _node_name(pod)
        cached = self._facts.get(uid)
        if cached is not None and rv and cached[0] == rv and cached[1] == node:
            return cached[2]
        facts = self._derive_facts(pod)
        self._facts[uid] = (rv, node, facts)
        return facts

    def _pod_request(self, pod: Obj) -> PodRequest | None:
        """``pod_request`` (with its facts) once per pending pod version; raises as it does."""
        meta = _meta(pod)
        member = self._gang_member(pod)
        # Keyed by whether its PodGroup is known too: a group that appears later changes the answer.
        uid, rv = str(meta.get("uid")), str(meta.get("resourceVersion") or "") + ("+gang" if member else "")
        cached = self._requests.get(uid)
        if cached is not None and rv and cached[0] == rv:
            if isinstance(cached[1], PodRequestError):
                raise cached[1]
            return cached[1]
        try:
            request = pod_request(pod, self.config.nvidia, with_no_gpu=member)
        except PodRequestError as e:
            self._requests[uid] = (rv, e)
            raise
        if request is not None:
            request = _with_facts(request, self._pod_facts(pod))
        self._requests[uid] = (rv, request)
        return request

    def _gang_member(self, pod: Obj) -> bool:
        """A pod of a PodGroup we know: routed to us, it is placed with its gang even without vGPU
        (routing routes a gang whole, so a mixed gang never waits for a scheduler it was not sent
        to)."""
        notes = _meta(pod).get("annotations")
        if not isinstance(notes, Mapping):
            return False
        group = next((str(notes[a]) for a in GROUP_ANNOTATIONS if notes.get(a)), "")
        namespace = str(_meta(pod).get("namespace") or "default")
        return bool(group) and (namespace, group) in self.world.view.podgroups

    def _forget(self, gone: set[str]) -> None:
        for uid in gone:
            self._facts.pop(uid, None)
            self._requests.pop(uid, None)
        self.reports.forget_pods(gone)

    # --- writes --------------------------------------------------------------------------------

    def _wrote_ledger(self, obj: Obj) -> None:
        self.inputs.wrote_ledger(obj)

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
        if (
            entry.group
            and self.binder.retry is not None
            and self.gang_status.follows((entry.namespace, entry.group))
        ):
            # The echo of our own binding wakes no pass, but this one may complete a gang: its
            # members without vGPU are bound, and its PodGroup says Running, in the next pass.
            self.binder.retry()
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
        self.reports.emit(
            self.reports.event(
                pod,
                reason="Scheduled",
                message=f"Successfully assigned {entry.key} to {entry_node} ({devices})",
            )
        )
        return True

    async def _bind_plain(self, node: str, entry: Allocation, pod: Obj, result: PassResult) -> None:
        """Bind a gang member that asks no vGPU: a plain Binding (no device annotations, no
        plugin handshake to wait for), as kube-scheduler would send it."""
        try:
            await self.client.bind(entry.namespace, entry.name, node=node, annotations={}, uid=entry.pod_uid)
        except (Conflict, NotFound) as e:
            log.info("binding %s to %s did not happen: %s", entry.key, node, e)
            return
        except KubeError as e:
            result.errors.append(f"binding {entry.key} to {node}: {e}")
            return
        self.inputs.bound(pod, node, {})
        self._bound_keys.append(entry.key)
        result.bound.append(entry.key)
        audit("binding", pod=entry.key, uid=entry.pod_uid, node=node, group=entry.group, by=self.identity)
        self.reports.emit(
            self.reports.event(
                pod,
                reason="Scheduled",
                message=f"Successfully assigned {entry.key} to {node} (a member of gang "
                f"{entry.namespace}/{entry.group}; it asks no vGPU)",
            )
        )

    async def flush_events(self) -> None:
        await self.reports.flush_events()

    # --- the pass ------------------------------------------------------------------------------

    async def run_once(self) -> PassResult:
        """One pass (see the module docstring); never raises for API errors."""
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
            self.world.resync()  # what the allocator decided may not be what the ledgers hold
            self.metrics.conflicts.inc()
            result.conflicts += 1
            log.info("ledger write lost a race, re-deciding on the next pass: %s", e)
        except KubeError as e:
            self.world.resync()
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
        inputs = await self.inputs.read(self.config)
        world = self.world
        changes = world.update(
            inputs.pods,
            inputs.ledgers,
            inputs.view,
            decode=decode_ledger,
            facts=self._pod_facts,
            changed_pods=inputs.changed_pods,
            changed_ledgers=inputs.changed_ledgers,
        )
        self._log_bad_ledgers()
        self._node_objs = inputs.nodes
        self._summary_due |= changes.nodes
        for name in changes.nodes - world.view.nodes.keys():
            self.unwritable.forget(name)  # a node that is gone has nothing to retry
        if changes.freed:
            self._unplaceable.capacity_freed()
        self._forget(changes.gone)
        # What a failed pass was checking is checked again: its pods did not change, but the
        # release or adoption it decided never reached the server.
        self._now = int(self.clock())  # what release_reason's hold is measured against this pass
        dirty = changes.dirty | self._unreconciled | self._hold_expired()
        self._unreconciled = dirty
        confirmed = set() if inputs.fresh else await self._confirm_missing(dirty)
        if confirmed:
            dirty = {uid: None for uid in dirty if uid not in confirmed}
        step = self._reconcile(dirty, world.view, result)
        wrote, left = False, dict[str, None]()
        if step.any or step.invalid:
            # Raises on a 409: ``_unreconciled`` keeps every dirty pod for the next pass.
            wrote, left = await self._write_reconciled(step, world.view, result)
        self._unreconciled = left
        if wrote:
            return  # the next pass starts from what we just wrote (fresh resourceVersions)
        self._hold_unwritable()
        try:
            await self._decide(inputs.generation, result)
        finally:
            # After the decision: the report evicts nothing and blocks nothing (the write check
            # judges only GPUs that gain an entry), and at a start it checks every node (~2 s at
            # 5,000 nodes) that the first bind would otherwise wait for.
            await self.reports.violations(
                world.view, world.ledgers, inputs.nodes, changes.ledgers | changes.nodes
            )

    def _hold_unwritable(self) -> None:
        """Keep the nodes whose ledger write failed out of this decision until their retry is due;
        a node whose wait ran out may take pods again (a pod refused for it is judged again)."""
        held = self.unwritable.held(self.clock())
        if set(held) < set(self.world.held):
            self._unplaceable.capacity_freed()
        self.world.held = held

    def retry_due(self) -> bool:
        """A held node's retry came due since the last decision (the run loop passes then)."""
        return set(self.unwritable.held(self.clock())) != set(self.world.held)

    def _hold_expired(self) -> dict[str, None]:
        """Entries reserved at admission whose hold ran out (checked again, and tracked anew by
        ``_entry_in_order`` while their pod stays unbound and the hold has not run out)."""
        hold = self.config.arbiter.unbound_release_seconds
        due = {uid: None for uid, at in self._admitted_unbound.items() if abs(self._now - at) >= hold}
        for uid in due:
            del self._admitted_unbound[uid]
        return due

    def _log_bad_ledgers(self) -> None:
        for name, error in self.world.bad.items():
            if self._reported_bad.get(name) != error:
                log.error("GPULedger %s is malformed, its node is left alone: %s", name, error)
        self._reported_bad = dict(self.world.bad)

    async def _confirm_missing(self, dirty: Iterable[str]) -> set[str]:
        """Ask the server about ledger entries whose pod the cache does not hold (yet).

        A cache may lag the ledgers it is compared with: a pod created and reserved moments ago
        can be missing from it. Releasing such an entry would free capacity a bound pod may use,
        so before a release for "deleted" the pod is read; returns the UIDs found alive.
        """
        world = self.world
        missing = [
            world.ledgers[name].allocations[uid]
            for uid in dirty
            if uid not in world.records
            for name in sorted(world.entries.get(uid, ()))
        ]
        by_namespace: dict[str, list[Allocation]] = {}
        for entry in missing:
            by_namespace.setdefault(entry.namespace, []).append(entry)
        # Few missing in a namespace: one GET each; many (a namespace deleted while we were down,
        # 3,000 ghosts took 46-57 s one GET at a time): one paginated LIST of that namespace.
        listed = [ns for ns, entries in by_namespace.items() if len(entries) > CONFIRM_BY_GET]
        singles = [e for ns, entries in by_namespace.items() if ns not in listed for e in entries]
        alive: set[str] = set()

        async def confirm(entry: Allocation) -> None:
            try:
                pod = await self.client.get(PODS, entry.name, namespace=entry.namespace)
            except NotFound:
                return
            if str(_meta(pod).get("uid")) == entry.pod_uid:
                alive.add(entry.pod_uid)

        async def confirm_namespace(namespace: str) -> None:
            wanted = {e.pod_uid for e in by_namespace[namespace]}
            pods = await list_all(self.client, PODS, namespace=namespace)
            alive.update(wanted & {str(_meta(p).get("uid")) for p in pods})

        await gather_bounded(
            [*(confirm_namespace(ns) for ns in listed), *(confirm(e) for e in singles)],
            self.write_concurrency,
        )
        return alive

    # --- 1. release, verify, adopt (over what changed) ---------------------------------------------

    def _reconcile(self, dirty: Iterable[str], view: ClusterView, result: PassResult) -> Reconciled:
        world = self.world
        step = Reconciled()
        factor = self.config.nvidia.gpu_memory_factor

        def ledger(name: str) -> NodeLedger:
            return step.updated.get(name) or world.ledgers.get(name) or NodeLedger(node=name)

        def order(uid: str) -> tuple[str, str, str]:
            record = world.records.get(uid)
            return (*record.key, uid) if record is not None else ("", "", uid)

        # At a start every entry is dirty (100,000 of them) and nearly all are in order: find the
        # few that are not first, and sort only those (the pods' order makes the writes and the
        # audit lines the same from run to run).
        for uid in sorted([uid for uid in dirty if self._needs_work(uid, factor)], key=order):
            record = world.records.get(uid)
            held = world.entries.get(uid, ())
            if len(held) > 1:
                held = tuple(sorted(held))
            for name in held:
                if name not in world.bad:
                    entry = world.ledgers[name].allocations[uid]
                    if not self._entry_in_order(entry, name, record, factor):
                        self._check_entry(entry, name, record, step, ledger, factor=factor)
            if not held and self._adoptable(record):
                assert record is not None
                self._adopt(world.pods[uid], record, view, step, result)
        by_node: dict[str, list[Allocation]] = {}
        for entry, node in step.adopted:
            by_node.setdefault(node, []).append(entry)
        for node, entries in by_node.items():
            step.updated[node] = ledger(node).with_allocations(entries)
        return step

    def _needs_work(self, uid: str, factor: int) -> bool:
        """An entry of the pod's to release or verify, or a bound pod to adopt."""
        world = self.world
        record = world.records.get(uid)
        held = world.entries.get(uid)
        if not held:
            return self._adoptable(record)
        for name in held:  # a loop, not any() over a generator: called 100,000 times at a start
            if name not in world.bad and not self._entry_in_order(
                world.ledgers[name].allocations[uid], name, record, factor
            ):
                return True
        return False

    def _adoptable(self, record: PodRecord | None) -> bool:
        """A bound pod with an assignment on a readable ledger's node (held by no entry: adopt it)."""
        return (
            record is not None
            and record.bound
            and bool(record.assignment)
            and record.node not in self.world.bad
        )

    def _release_reason(self, record: PodRecord | None, name: str, entry: Allocation) -> str | None:
        return release_reason(
            record, name, entry, now=self._now, hold=self.config.arbiter.unbound_release_seconds
        )

    def _entry_in_order(self, entry: Allocation, name: str, record: PodRecord | None, factor: int) -> bool:
        """Nothing to do: the pod lives on, and its annotation on this node is absent (not bound
        yet) or exactly what we write for the entry (our own bindings: one string compare)."""
        if self._release_reason(record, name, entry) is not None:
            return False
        assert record is not None
        if entry.admitted and not record.node:
            # Reserved at admission, not bound yet: looked at again when its hold runs out.
            self._admitted_unbound[entry.pod_uid] = entry.reserved_at
        raw = record.assignment
        if not raw or record.node != name:
            return True
        return raw == encode_assignment(entry.containers, memory_factor=factor)

    def _check_entry(
        self,
        entry: Allocation,
        name: str,
        record: PodRecord | None,
        step: Reconciled,
        ledger: Callable[[str], NodeLedger],
        *,
        factor: int,
    ) -> None:
        """Release an entry whose pod ended, moved or went; else raise it to what the pod's
        annotation says (``_entry_in_order`` said it is not in order)."""
        reason = self._release_reason(record, name, entry)
        if reason is not None:
            step.updated[name] = ledger(name).without(entry.pod_uid)
            step.released.append((entry, name, reason))
            return
        assert record is not None
        # Verify before trusting: a bound pod's annotation is what the plugin hands out; it is
        # decoded and the entry raised to the larger of the two, never lowered.
        decoded = decode_assignment_entries(record.assignment)
        if decoded.invalid:
            step.invalid.append((self.world.pods[record.uid], decoded.invalid))
        fixed, findings = hold_larger(entry, decoded.containers, memory_factor=factor)
        if findings:
            step.updated[name] = ledger(name).without(entry.pod_uid).with_allocation(fixed)
            step.repaired.append((fixed, name, findings))

    def _adopt(
        self, pod: Obj, record: PodRecord, view: ClusterView, step: Reconciled, result: PassResult
    ) -> None:
        """A bound pod with an assignment and no entry: hold what its annotation says (conservatively)."""
        nvidia = self.config.nvidia
        try:
            request = pod_request(pod, nvidia)
            if request is None:
                return
            queue, _ = pod_queue(request, view)
            adoption = adopted_allocation(
                request, record.assignment, queue=queue, node=view.nodes.get(record.node), nvidia=nvidia
            )
        except (PodRequestError, AssignmentError) as e:
            result.errors.append(f"cannot adopt {record.key[0]}/{record.key[1]}: {e}")
            return
        if adoption.invalid:
            step.invalid.append((pod, adoption.invalid))
        if adoption.allocation.containers:  # nothing valid: nothing the plugin hands out
            step.adopted.append((adoption.allocation, record.node))

    async def _write_reconciled(
        self, step: Reconciled, view: ClusterView, result: PassResult
    ) -> tuple[bool, dict[str, None]]:
        """Write step 1's ledgers; returns whether any write landed, and the pods whose entries
        sit on a node that was not written (held, or its write failed): checked again next pass."""
        world = self.world
        now = self.clock()
        writes: dict[str, Write] = {}
        unwritten: set[str] = set()
        for name, new in step.updated.items():
            old = world.ledgers.get(name) or NodeLedger(node=name)
            if new.allocations == old.allocations:
                continue
            if self.unwritable.blocked(name, now):
                unwritten.add(name)  # its retry is not due: the entries wait in _unreconciled
                continue
            writes[name] = (old, new, view.nodes.get(name))
        failed = await self._write_ledgers(writes)
        for name in failed:
            await self._unwritable(name, failed[name], ())
        unwritten |= set(failed)
        left: dict[str, None] = {}
        if unwritten:
            step, left = _without_nodes(step, unwritten)
        for entry, name, reason in step.released:
            self.metrics.releases.labels(reason).inc()
            result.released.append(entry.key)
            audit("release", pod=entry.key, uid=entry.pod_uid, node=name, reason=reason, by=self.identity)
        result.adopted.extend(entry.key for entry, _ in step.adopted)
        self.metrics.adoptions.inc(len(step.adopted))
        # One audit line per node: adoption is one ledger write per node, and at a first start on
        # a busy cluster per-pod lines would be 100,000 lines (~3 s of JSON logging) for one pass.
        adopted_on: dict[str, list[Allocation]] = {}
        for entry, node in step.adopted:
            adopted_on.setdefault(node, []).append(entry)
        for name, entries in adopted_on.items():
            audit(
                "adoption",
                node=name,
                pods=[e.key for e in entries],
                uids=[e.pod_uid for e in entries],
                by=self.identity,
            )
        for pod, skipped in step.invalid:
            await self.reports.invalid_assignment(pod, skipped)
        for entry, name, findings in step.repaired:
            await self.reports.repair(world.pods[entry.pod_uid], entry, name, findings)
        await self.reports.adopted_over_capacity(step.adopted, {**world.ledgers, **step.updated}, view)
        result.repaired.extend(entry.key for entry, _, _ in step.repaired)
        return bool(set(writes) - set(failed)), left

    async def _write_ledgers(self, writes: Mapping[str, Write]) -> dict[str, KubeError]:
        """CAS-write each node's ledger (all at once, bounded); returns the nodes whose write failed
        and why. A 409 on any node is raised once every write has ended (the pass re-decides);
        any other error is that node's alone (``_unwritable``)."""
        failed: dict[str, KubeError] = {}
        conflicts: list[Conflict] = []

        async def write(name: str, old: NodeLedger, new: NodeLedger, info: NodeInfo | None) -> None:
            try:
                await self.writer.write(old, new, info)
            except Conflict as e:
                conflicts.append(e)
                return
            except NotFound as e:
                if old.resource_version is None:
                    failed[name] = e  # a POST: the resource itself is not served
                    return
                # Deleted since it was read: as stale as a 409, decided again from the next read.
                conflicts.append(Conflict(f"GPULedger {name} was deleted under this write: {e}", code=409))
                return
            except KubeError as e:
                failed[name] = e
                return
            recovered = self.unwritable.written(name)
            if recovered is not None:
                self.reports.ledger_written(name, recovered)

        await gather_bounded(
            (write(name, *args) for name, args in sorted(writes.items())), self.write_concurrency
        )
        if conflicts and failed:
            for name in sorted(failed):
                await self._unwritable(name, failed[name], ())
        if conflicts:
            raise conflicts[0]
        return failed

    async def _unwritable(self, name: str, error: KubeError, pods: Sequence[str]) -> None:
        """Hold ``name`` until its retry and report it (the Node, its GPULedger, the metric)."""
        now = self.clock()
        state = self.unwritable.failed(name, error, now)
        self.world.held = self.unwritable.held(now)  # the allocator holds it from the next decision
        await self.reports.ledger_unwritable(self._node_objs.get(name), name, state, pods, now=now)

    # --- 2. decide, 3. write and bind ---------------------------------------------------------------

    async def _busy(self, now: int) -> dict[str, str]:
        """Nodes waiting for the plugin's handshake (node -> pod); warn once about stuck ones."""
        timeout = self.config.scheduling.allocating_timeout_seconds
        busy: dict[str, str] = {}
        for record in list(self.world.allocating.values()):
            ahead = record.bind_time - now
            if ahead <= CLOCK_SKEW_SECONDS and now - record.bind_time < timeout:
                busy[record.node] = record.uid
                continue
            why = (
                f"its volcano.sh/bind-time {record.bind_time} is {ahead}s ahead of this controller's clock "
                f"(more than the {CLOCK_SKEW_SECONDS}s skew allowed), so it counts as timed out"
                if ahead > CLOCK_SKEW_SECONDS
                else f"the device plugin has not confirmed the GPU assignment within {timeout}s "
                "(bind-phase still allocating)"
            )
            await self.reports.once(
                self.world.pods[record.uid],
                "AllocationTimeout",
                (
                    f"{why}; node {record.node} is released for the next pod; check "
                    "the volcano-vgpu-device-plugin logs on that node"
                ),
            )
        for record in list(self.world.failed.values()):
            await self.reports.once(
                self.world.pods[record.uid],
                "DeviceAllocationFailed",
                (
                    f"the device plugin reported bind-phase=failed on node {record.node}; the pod keeps "
                    "its GPU reservation until it ends; delete it so its controller recreates it"
                ),
            )
        return busy

    def _pending(self, reports: list[Report]) -> list[tuple[PodRequest, Obj]]:
        """Our pending pods with a readable vGPU request; the rest get their reason reported."""
        scheduler = self.config.scheduling.scheduler_name
        pending: list[tuple[PodRequest, Obj]] = []
        for uid in self.world.pending:
            pod = self.world.pods[uid]
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
        return pending

    async def _refresh_objects(self, pending: Sequence[tuple[PodRequest, Obj]]) -> None:
        """Claims, volumes and namespace labels, read only when a pending pod needs them."""
        facts = [req.facts for req, _ in pending if req.facts is not None]
        needs_volumes = any(f.claims for f in facts)
        needs_namespaces = self.world.workloads.anti_affinity_pods > 0 or any(
            t.namespace_selector is not None for f in facts for t in (*f.affinity, *f.anti_affinity)
        )
        if not (needs_volumes or needs_namespaces):
            return
        side = await self.inputs.side_objects(volumes=needs_volumes, namespaces=needs_namespaces)
        workloads = self.world.workloads  # a resync starts a new one, which has indexed nothing yet
        if side.version is not None and self._side_indexed == (workloads, side.version):
            return  # the same objects these workloads already index
        workloads.set_objects(claims=side.claims, volumes=side.volumes, namespaces=side.namespaces)
        self._side_indexed = (workloads, side.version)

    async def _decide(self, generation: tuple[int, ...] | None, result: PassResult) -> None:
        now = int(self.clock())
        world = self.world
        reports: list[Report] = []
        busy = await self._busy(now)
        pending = self._pending(reports)
        result.pending = len(pending)
        await self._refresh_objects(pending)
        world.refill(self._pod_facts)
        allocator = world.allocator(world.view)
        allocator.touched.clear()
        objects = {req.uid: pod for req, pod in pending}
        gangs: dict[GangKey, GangState] = {}
        plain = self._place(
            allocator,
            pending=pending,
            objects=objects,
            generation=generation,
            now=now,
            reports=reports,
            result=result,
            gangs=gangs,
        )
        await self._write_and_offer(allocator, objects, busy, result, reports)
        await gather_bounded(
            (self._bind_plain(p.node, p.allocation, objects[p.pod.uid], result) for p in plain),
            self.write_concurrency,
        )
        result.errors.extend(await self.gang_status.write(gangs, world.view, world.running))
        # After placement: our pods not bound yet, the unreadable requests included (as by reason),
        # less those this pass reserved and offered for binding.
        self.metrics.pending.set(max(0, len(world.pending) - len(result.reserved)))
        # Reasons last: binds must not wait behind a flood of status patches for pods with no room.
        self.metrics.set_pending_reasons(reason for _, _, reason in reports)
        passed = PassReports()
        await gather_bounded(
            (self.reports.unschedulable(pod, message, passed) for pod, message, _ in reports),
            self.write_concurrency,
        )
        result.unschedulable.extend(passed.unschedulable)
        result.errors.extend(passed.errors)

    def _place(
        self,
        allocator: Allocator,
        *,
        pending: Sequence[tuple[PodRequest, Obj]],
        objects: Mapping[str, Obj],
        generation: tuple[int, ...] | None,
        now: int,
        reports: list[Report],
        result: PassResult,
        gangs: dict[GangKey, GangState],
    ) -> list[Placement]:
        """Place each unit (a pod, or a gang as one decision) and commit what may be bound; returns
        the gang members without vGPU that may be bound now (they take no ledger entry), and
        records each gang's decision in ``gangs`` (its PodGroup status)."""
        units = self._units(pending, self.world.view, self.world.running)
        plain: list[Placement] = []
        reserved_before = {req.uid for req, _ in pending if allocator.allocation_of(req.uid) is not None}
        to_commit: list[str] = []
        memo = self._unplaceable.signature(generation, placed_pods=len(self.world.placed))
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
                # decided on a node share one ledger write, and the Binder binds them one by one
                # as the plugin's handshake allows.
                if not placed.allocation.committed:
                    to_commit.append(single.uid)
                continue
            outcome = allocator.place_gang(members, min_member=min_member, running=already, now=now)
            why = outcome.failures[0].message if not outcome.ok and outcome.failures else None
            gangs[(members[0].namespace, members[0].group)] = GangState(
                min_member=min_member, bound=already, pending=len(members), why=why
            )
            for uid in outcome.released:
                meta = _meta(objects[uid])
                result.released.append(f"{meta.get('namespace')}/{meta.get('name')}")
                self.metrics.releases.labels("gang").inc()
            reports.extend((objects[f.pod.uid], f.message, f.cause) for f in outcome.failures)
            if not outcome.ok:
                continue
            gpu = [p for p in outcome.placements if p.allocation.containers]
            fresh = [p for p in gpu if p.pod.uid not in reserved_before]
            result.reserved.extend(p.pod.key for p in fresh)
            if not fresh:
                # Every member was already reserved when this pass read the ledgers: commit them all.
                to_commit.extend(p.pod.uid for p in gpu if not p.allocation.committed)
                if all(p.allocation.committed for p in gpu):
                    # Members without vGPU are bound once every vGPU member's entry is committed
                    # as read (never released but by the pod's end): the gang is then decided for
                    # good, and a crash before this point leaves nothing of theirs to undo.
                    plain.extend(p for p in outcome.placements if not p.allocation.containers)
        for uid in to_commit:
            allocator.mark_committed(uid)
        return plain

    async def _write_and_offer(
        self,
        allocator: Allocator,
        objects: Mapping[str, Obj],
        busy: Mapping[str, str],
        result: PassResult,
        reports: list[Report],
    ) -> None:
        """CAS-write every ledger the pass changed (all nodes at once), then hand the committed
        entries to the Binder. A 409 leaves the allocator to be rebuilt (the pass re-decides); a
        node whose write fails otherwise is undone and held alone (``_unwritten``), and the other
        nodes' entries are bound in this pass."""
        world = self.world
        factor = self.config.nvidia.gpu_memory_factor
        writes: dict[str, Write] = {}
        for name in sorted(allocator.touched):
            old = world.ledgers.get(name) or NodeLedger(node=name)
            new = allocator.ledger(name)
            if new.allocations == old.allocations:
                continue
            info = world.view.nodes.get(name)
            if info is not None:
                problems = check_write(old, new, info, memory_factor=factor)
                if problems:
                    # The allocator never decides this; refusing the write keeps the invariant anyway.
                    log.error("refusing a ledger write for node %s: %s", name, [p.message for p in problems])
                    result.errors.append(f"ledger write for {name} refused: {problems[0].message}")
                    world.resync()
                    return
            writes[name] = (old, new, info)
        failed = await self._write_ledgers(writes)
        for name in sorted(failed):
            await self._unwritten(
                name, failed[name], allocator=allocator, objects=objects, result=result, reports=reports
            )
        before = len(self._bound_keys)
        self.binder.failures.clear()
        self.binder.offer(self._waiting(allocator, objects), busy)
        if not self.background_events:
            await self.binder.drain()
            result.errors.extend(self.binder.failures)
        else:
            # Let the bindings just started put their requests on the wire before the pass goes on
            # with status reports and the invariant report (5,000 nodes at a start).
            await asyncio.sleep(0)
        result.bound.extend(self._bound_keys[before:])
        await self._refresh_summaries(set(writes) - set(failed))

    async def _unwritten(
        self,
        name: str,
        error: KubeError,
        *,
        allocator: Allocator,
        objects: Mapping[str, Obj],
        result: PassResult,
        reports: list[Report],
    ) -> None:
        """``name``'s write failed (not a 409): undo this pass's decisions there, send its pods back
        to the queue with the reason, hold the node and report it. Nothing else is undone."""
        stored = self.world.ledgers.get(name) or NodeLedger(node=name)
        decided = [
            uid
            for uid, entry in allocator.ledger(name).allocations.items()
            if stored.allocations.get(uid) != entry
        ]
        self.world.revert(name, decided)
        keys = []
        for uid in decided:
            pod = objects.get(uid)
            if pod is None:
                continue
            meta = _meta(pod)
            keys.append(f"{meta.get('namespace')}/{meta.get('name')}")
            reports.append(
                (
                    pod,
                    f"node {name} was chosen for this pod but its GPULedger cannot be written "
                    f"({failure_reason(error)}: {error}); the pod is placed again, on another node if one "
                    f"fits; see the Events of node {name}",
                    "ledger-unwritable",
                )
            )
        if keys:
            dropped = set(keys)
            result.reserved[:] = [key for key in result.reserved if key not in dropped]
        await self._unwritable(name, error, keys)

    async def _refresh_summaries(self, written: set[str]) -> None:
        """Rewrite the summary of ledgers whose node's registration changed since (one CAS write per
        node, entries unchanged): ``kubectl get gpuledgers`` shows FREE-MIB against what the node
        registers now, not what it registered at the last write. A node written in this pass got
        its summary then; a held node waits for its retry; a 409 leaves it for the next pass."""
        due = sorted(self._summary_due - written)
        # A start finds every node changed: its summaries are checked a slice per pass (a check is
        # ~80 us; 5,000 nodes at once would hold the first pass up ~0.4 s for a cosmetic field).
        due, rest = due[:SUMMARY_CHECKS_PER_PASS], due[SUMMARY_CHECKS_PER_PASS:]
        self._summary_due = set(rest)
        world, factor, now = self.world, self.config.nvidia.gpu_memory_factor, self.clock()
        writes: dict[str, Write] = {}
        for name in due:
            ledger = world.ledgers.get(name)
            if ledger is None or name in world.bad:
                continue  # no ledger to rewrite (the first write brings the summary)
            if self.unwritable.blocked(name, now):
                self._summary_due.add(name)
                continue
            info = world.view.nodes.get(name)
            if world.stored_summary(name) != ledger_summary(ledger, info, factor):
                writes[name] = (ledger, ledger, info)
        if not writes:
            return
        try:
            failed = await self._write_ledgers(writes)
        except Conflict:
            self._summary_due |= set(writes)  # someone wrote first; the next pass looks again
            raise
        for name in sorted(failed):
            self._summary_due.add(name)
            await self._unwritable(name, failed[name], ())

    def _waiting(self, allocator: Allocator, pending: Mapping[str, Obj]) -> dict[str, list[Waiting]]:
        """Committed entries of pending pods, per node: the Binder binds them one at a time."""
        out: dict[str, list[Waiting]] = {}
        for uid, pod in pending.items():
            held = allocator.allocation_of(uid)
            if held is not None and held[1].committed:
                out.setdefault(held[0], []).append(Waiting(held[1], pod))
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
