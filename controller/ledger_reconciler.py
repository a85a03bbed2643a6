"""Step 1 of a pass: release, verify and adopt ledger entries, over what changed.

Why apart from placement: this half keeps the ledger true to the pods (an ended pod's entry
released, a bound pod's entry made exactly what its annotation hands out, a bound pod without
an entry adopted), whoever placed them: Volcano, the arbiter, our own placer, a hand. It needs the
pods and ledgers, not the scheduler's view of free capacity, and it runs first: a pass that wrote
here ends, so the placer decides on the ledgers as just written.

Released: an entry whose pod ended (deleted, Succeeded, Failed), moved to another node, or, for an
entry the arbiter reserved at admission, is still unbound after ``arbiter.unboundReleaseSeconds``
(``release_reason``; docs/design/ledger.md proves why a reservation and a release cannot cross).
A pod the cache does not hold is confirmed gone with the server first (controller/ghost_entries.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from vgpu_guard.controller.ghost_entries import confirm_missing
from vgpu_guard.controller.metrics import AllocationMetrics
from vgpu_guard.controller.node_writes import NodeConflicts, NodeWrites, Write
from vgpu_guard.controller.pass_result import PassResult
from vgpu_guard.controller.reports import Reporter
from vgpu_guard.controller.world import PodRecord, World
from vgpu_guard.engine.allocator import pod_queue
from vgpu_guard.engine.arbiter import RELEASE_HOLDS
from vgpu_guard.engine.assignment import (
    AssignmentError,
    adopted_allocation,
    decode_assignment_entries,
    encode_assignment,
    held_exactly,
    hold_larger,
)
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.ledger import Allocation, NodeLedger
from vgpu_guard.engine.objects import Obj
from vgpu_guard.engine.pod_request import PodRequestError, pod_request
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.logs import audit

__all__ = ["HOLD_NOTICE_SECONDS", "LedgerReconciler", "Reconciled", "release_reason"]

log = logging.getLogger("vgpu_guard.controller.allocation")

# An admitted Binding lands within its request, milliseconds after our reservation; an entry whose
# pod is still unbound this long after was refused after admission (another webhook, the API
# server), and its hold is announced on the pod and the GPULedger (issue 43).
HOLD_NOTICE_SECONDS = 10


def release_reason(
    record: PodRecord | None, node: str, entry: Allocation | None = None, *, now: int = 0, hold: int = 0
) -> str | None:
    """Why a ledger entry on ``node`` no longer holds its pod (None: it does).

    An entry the arbiter reserved at admission (``admitted``) whose pod is still not bound
    ``RELEASE_HOLDS`` holds after its reservation is released too ("unbound"): its write was
    refused after admission. ``hold`` outlasts the API server's request timeout, so the admitted
    write can no longer land (docs/design/ledger.md); from ``hold`` on the entry counts for nothing
    in the arbiter's decisions, and is kept until then only to refuse its own pod's Bindings while
    others that waited go first. A ``reservedAt`` further in the future than that (a clock or a
    hand gone wrong) counts as expired, so it cannot hold a card for ever.
    """
    if record is None:
        return "deleted"
    if record.terminal:
        return record.pod_phase.lower()
    if record.node and record.node != node:
        return "moved"
    if not record.node and record.deleting:
        return "deleted"
    if (
        entry is not None
        and entry.admitted
        and not record.node
        and abs(now - entry.reserved_at) >= RELEASE_HOLDS * hold
    ):
        return "unbound"
    return None


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


class LedgerReconciler:
    """Step 1 across passes: the pods still to check (a failed write's), the admitted holds running out."""

    def __init__(
        self,
        client: ClusterClient,
        config: GuardConfig,
        world: World,
        *,
        writes: NodeWrites,
        reports: Reporter,
        metrics: AllocationMetrics,
        identity: str,
        clock: Callable[[], float],
        concurrency: int,
    ) -> None:
        self.client = client
        self.config = config
        self.world = world
        self.writes = writes
        self.reports = reports
        self.metrics = metrics
        self.identity = identity
        self.clock = clock
        self.concurrency = concurrency
        self._unreconciled: dict[str, None] = {}  # an ordered set, as ``Changes.dirty``
        # Entries reserved at admission whose pod is not bound yet (uid -> reservedAt): checked
        # again once ``arbiter.unboundReleaseSeconds`` have passed, though nothing else changed.
        self._admitted_unbound: dict[str, int] = {}
        # The holds announced already (uid, reservedAt): one Event pair per hold.
        self._holds_announced: set[tuple[str, int]] = set()
        self._reported_bad: dict[str, str] = {}
        self._now = int(clock())

    async def run(self, changed: Mapping[str, None], *, result: PassResult) -> bool:
        """Release, verify and adopt over the pods that changed; True when a ledger write landed
        (the pass then ends: the next one starts from what was just written)."""
        self._log_bad_ledgers()
        # What a failed pass was checking is checked again: its pods did not change, but the
        # release or adoption it decided never reached the server.
        self._now = int(self.clock())  # what release_reason's hold is measured against this pass
        dirty = {**changed, **self._unreconciled, **self._hold_expired()}
        self._unreconciled = dirty
        confirmed = await confirm_missing(self.client, self.world, dirty, concurrency=self.concurrency)
        if confirmed:
            dirty = {uid: None for uid in dirty if uid not in confirmed}
        step = self._reconcile(dirty, self.world.view, result)
        wrote, left = False, dict[str, None]()
        if step.any or step.invalid:
            # Raises on a 409: ``_unreconciled`` keeps every dirty pod for the next pass.
            wrote, left = await self._write(step, self.world.view, result)
        self._unreconciled = left
        await self._announce_holds()
        return wrote

    async def _announce_holds(self) -> None:
        """Each hold of an admitted entry whose Binding has not landed: an Event on the pod and on
        the GPULedger naming the holder and when the hold ends, so the pod waiting for those GPUs
        (refused meanwhile) and whoever reads the ledger can tell what holds them."""
        hold = self.config.arbiter.unbound_release_seconds
        world = self.world
        for uid, at in list(self._admitted_unbound.items()):
            if abs(self._now - at) < HOLD_NOTICE_SECONDS or (uid, at) in self._holds_announced:
                continue
            record, pod = world.records.get(uid), world.pods.get(uid)
            if record is None or record.node or pod is None:
                continue
            for name in world.entries.get(uid, ()):
                entry = world.ledgers[name].allocations.get(uid) if name not in world.bad else None
                if entry is not None and entry.admitted and entry.reserved_at == at:
                    self._holds_announced.add((uid, at))
                    await self.reports.unlanded_hold(pod, entry, name, ends_at=at + hold)
        self._holds_announced &= set(self._admitted_unbound.items())

    def _hold_expired(self) -> dict[str, None]:
        """Entries reserved at admission whose hold ran out (checked again, and tracked anew by
        ``_entry_in_order`` while their pod stays unbound and the hold has not run out)."""
        hold = RELEASE_HOLDS * self.config.arbiter.unbound_release_seconds
        due = {uid: None for uid, at in self._admitted_unbound.items() if abs(self._now - at) >= hold}
        for uid in due:
            del self._admitted_unbound[uid]
        return due

    def _log_bad_ledgers(self) -> None:
        for name, error in self.world.bad.items():
            if self._reported_bad.get(name) != error:
                log.error("GPULedger %s is malformed, its node is left alone: %s", name, error)
        self._reported_bad = dict(self.world.bad)

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
        """Release an entry whose pod ended, moved or went; else make it what the pod's annotation
        says (``_entry_in_order`` said it is not in order)."""
        reason = self._release_reason(record, name, entry)
        if reason is not None:
            step.updated[name] = ledger(name).without(entry.pod_uid)
            step.released.append((entry, name, reason))
            return
        assert record is not None
        # Until the device plugin has handed the devices out (bind-phase success), a bound pod's
        # annotation is what it will hand out: the entry becomes exactly that, lowered too (issue
        # 43: entries that only grew held cards for a second Binding that never landed). After,
        # the running containers keep what they were handed whatever the annotation says later:
        # the entry is only raised. So is one with a malformed device: what cannot be read is not
        # given up.
        decoded = decode_assignment_entries(record.assignment)
        if decoded.invalid:
            step.invalid.append((self.world.pods[record.uid], decoded.invalid))
        if decoded.invalid or record.bind_phase == "success":
            fixed, findings = hold_larger(entry, decoded.containers, memory_factor=factor)
        else:
            fixed, findings = held_exactly(entry, decoded.containers, memory_factor=factor)
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

    async def _write(
        self, step: Reconciled, view: ClusterView, result: PassResult
    ) -> tuple[bool, dict[str, None]]:
        """Write step 1's ledgers; returns whether any write landed, and the pods whose entries
        sit on a node that was not written (held, or its write failed): checked again next pass."""
        world = self.world
        writes: dict[str, Write] = {}
        unwritten: set[str] = set()
        for name, new in step.updated.items():
            old = world.ledgers.get(name) or NodeLedger(node=name)
            if new.allocations == old.allocations:
                continue
            if self.writes.blocked(name):
                unwritten.add(name)  # its retry is not due: the entries wait in _unreconciled
                continue
            writes[name] = (old, new, view.nodes.get(name))
        try:
            failed, lost = await self.writes.write(writes), {}
        except NodeConflicts as race:
            # Those nodes' pods are checked again from the next read; the rest of step 1 stands.
            failed, lost = race.failed, race.lost
            self.metrics.conflicts.inc(len(lost))
            result.conflicts += len(lost)
            log.info("step 1 lost a ledger race on %s, checked again next pass", ", ".join(sorted(lost)))
        for name in failed:
            await self.writes.hold(name, failed[name], ())
        unwritten |= set(failed) | set(lost)
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
        # A write that landed, or lost a race, ends the pass: the next one starts from what is stored.
        return bool(set(writes) - set(failed)), left
