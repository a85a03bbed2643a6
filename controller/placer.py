"""Steps 2 and 3 of a pass: place our pending pods, write the ledgers, bind.

Pods are placed in scheduling order (priority, then age), a gang as one decision, each on what
the ones before it left (engine/allocator.py); a single pod is reserved and committed in one write,
a gang's vGPU members are reserved first and committed in the next pass, and its members without
vGPU are bound once every vGPU member's entry is committed as read. All the ledgers the decisions
changed are written at once (controller/node_writes.py: per-node failure, a 409 ends the pass),
the committed entries go to the Binder, every pod that stays Pending gets ``PodScheduled=False``
with the reason, and each gang's PodGroup says what happened (controller/gang_status.py).

A pod whose answer cannot have changed (same version, same cluster signature) is not judged again
(controller/scheduling_queue.py); nodes whose ledger cannot be written take no new pod until their
retry; nodes in the plugin's handshake bind one pod at a time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vgpu_guard.controller.binder import Waiting
from vgpu_guard.controller.bindings import Bindings
from vgpu_guard.controller.gang_status import GangKey, GangStatusWriter
from vgpu_guard.controller.handshakes import Handshakes
from vgpu_guard.controller.inputs import InputSource
from vgpu_guard.controller.metrics import AllocationMetrics
from vgpu_guard.controller.node_queue import failure_reason
from vgpu_guard.controller.node_writes import NodeConflicts, NodeWrites, Write
from vgpu_guard.controller.pass_result import PassResult, Report
from vgpu_guard.controller.pod_parser import PodParser
from vgpu_guard.controller.reports import PassReports, Reporter
from vgpu_guard.controller.scheduling_queue import SchedulingQueue, Signature, Unit
from vgpu_guard.controller.world import World
from vgpu_guard.engine.allocator import Allocator, Placement, Unplaceable
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.ledger import NodeLedger, check_write
from vgpu_guard.engine.objects import Obj
from vgpu_guard.engine.pod_request import PodRequest, PodRequestError
from vgpu_guard.engine.podgroup_status import GangState
from vgpu_guard.engine.scheduling import Workloads
from vgpu_guard.kube.bounded import gather_bounded
from vgpu_guard.kube.errors import Conflict, KubeError

__all__ = ["Placer", "committed_waiting", "readable_pending"]

log = logging.getLogger("vgpu_guard.controller.allocation")


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


@dataclass
class _Step:
    """One placement step's inputs and what it collects (passed down, never kept)."""

    allocator: Allocator
    objects: Mapping[str, Obj]
    reserved_before: set[str]
    signature: Signature | None
    now: int
    reports: list[Report]
    result: PassResult
    to_commit: list[str] = field(default_factory=list)
    plain: list[Placement] = field(default_factory=list)


class Placer:
    """Places our pending pods and binds them; the scheduling queue lives across passes."""

    def __init__(
        self,
        config: GuardConfig,
        world: World,
        *,
        inputs: InputSource,
        parser: PodParser,
        writes: NodeWrites,
        bindings: Bindings,
        gang_status: GangStatusWriter,
        reports: Reporter,
        metrics: AllocationMetrics,
        clock: Callable[[], float],
        concurrency: int,
        background_events: bool = False,
    ) -> None:
        self.config = config
        self.world = world
        self.inputs = inputs
        self.parser = parser
        self.writes = writes
        self.bindings = bindings
        self.gang_status = gang_status
        self.reports = reports
        self.metrics = metrics
        self.clock = clock
        self.concurrency = concurrency
        # Bindings run as tasks (the run loop) instead of being awaited by the pass (settle()).
        self.background_events = background_events
        self.queue = SchedulingQueue()
        self.handshakes = Handshakes(config, world, reports)
        # The workloads that last indexed the side objects (claims, volumes, namespaces), and their version.
        self._side_indexed: tuple[Workloads, tuple[int, ...] | None] | None = None

    def capacity_freed(self) -> None:
        """Something freed capacity: every remembered "no room" answer may be wrong now."""
        self.queue.capacity_freed()

    def retry_due(self) -> bool:
        """A held node's retry came due since the last decision (the run loop passes then)."""
        return set(self.writes.held_now()) != set(self.world.held)

    def hold_unwritable(self) -> None:
        """Keep the nodes whose ledger write failed out of this decision until their retry is due;
        a node whose wait ran out may take pods again (a pod refused for it is judged again)."""
        held = self.writes.held_now()
        if set(held) < set(self.world.held):
            self.queue.capacity_freed()
        self.world.held = held

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

    async def decide(self, generation: tuple[int, ...] | None, result: PassResult) -> None:
        now = int(self.clock())
        world = self.world
        reports: list[Report] = []
        busy = await self.handshakes.busy(now)
        pending = readable_pending(world, self.parser, self.config.scheduling.scheduler_name, reports)
        result.pending = len(pending)
        await self._refresh_objects(pending)
        world.refill(self.parser.facts)
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
            (self.bindings.bind_plain(p.node, p.allocation, objects[p.pod.uid], result) for p in plain),
            self.concurrency,
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
            self.concurrency,
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
        step = _Step(
            allocator=allocator,
            objects=objects,
            reserved_before={req.uid for req, _ in pending if allocator.allocation_of(req.uid) is not None},
            signature=self.queue.signature(generation, placed_pods=len(self.world.placed)),
            now=now,
            reports=reports,
            result=result,
        )
        for unit in self.queue.units(pending, self.world.view, self.world.running):
            if unit.single:
                self._place_single(unit, step)
            else:
                gangs[unit.key[1], unit.key[2]] = self._place_gang(unit, step)
        for uid in step.to_commit:
            allocator.mark_committed(uid)
        return step.plain

    def _place_single(self, unit: Unit, step: _Step) -> None:
        """One pod: a parked answer is reused; a placement is reserved and committed in one write
        (a single pod's reservation is only released when it ends, so all the pods decided on a
        node share one ledger write, and the Binder binds them one by one as the plugin's
        handshake allows)."""
        [pod] = unit.members
        obj = step.objects[pod.uid]
        parked = self.queue.parked(unit, step.objects, step.signature)
        if parked is not None:  # nothing that could change the answer changed
            step.reports.append((obj, *parked[0][pod.uid]))
            return
        placed = step.allocator.place(pod, now=step.now)
        if isinstance(placed, Unplaceable):
            self.queue.park(
                unit, step.objects, step.signature, ({pod.uid: (placed.message, placed.cause)}, None)
            )
            step.reports.append((obj, placed.message, placed.cause))
            return
        self.queue.activate(unit)
        step.allocator.commit(placed)
        if pod.uid not in step.reserved_before:
            step.result.reserved.append(pod.key)
        if not placed.allocation.committed:
            step.to_commit.append(pod.uid)

    def _place_gang(self, unit: Unit, step: _Step) -> GangState:
        """A gang as one decision: its vGPU members reserved first and committed in the next pass
        (when every one was already reserved as read); its members without vGPU bound once every
        vGPU member's entry is committed as read (never released but by the pod's end), so a crash
        before that leaves nothing of theirs to undo. A gang that cannot start is parked as a pod
        is. Returns the gang's state for its PodGroup."""
        members, min_member, already = unit.members, unit.min_member, unit.running
        parked = self.queue.parked(unit, step.objects, step.signature)
        if parked is not None:
            told, why = parked
            step.reports.extend((step.objects[m.uid], *told[m.uid]) for m in members if m.uid in told)
            return GangState(min_member=min_member, bound=already, pending=len(members), why=why)
        outcome = step.allocator.place_gang(members, min_member=min_member, running=already, now=step.now)
        why = outcome.failures[0].message if not outcome.ok and outcome.failures else None
        for uid in outcome.released:
            meta = _meta(step.objects[uid])
            step.result.released.append(f"{meta.get('namespace')}/{meta.get('name')}")
            self.metrics.releases.labels("gang").inc()
        step.reports.extend((step.objects[f.pod.uid], f.message, f.cause) for f in outcome.failures)
        state = GangState(min_member=min_member, bound=already, pending=len(members), why=why)
        if not outcome.ok:
            if not outcome.released:  # a release changes the ledgers: decide again next pass
                told = {f.pod.uid: (f.message, f.cause) for f in outcome.failures}
                self.queue.park(unit, step.objects, step.signature, (told, why))
            return state
        self.queue.activate(unit)
        gpu = [p for p in outcome.placements if p.allocation.containers]
        fresh = [p for p in gpu if p.pod.uid not in step.reserved_before]
        step.result.reserved.extend(p.pod.key for p in fresh)
        if not fresh:
            step.to_commit.extend(p.pod.uid for p in gpu if not p.allocation.committed)
            if all(p.allocation.committed for p in gpu):
                step.plain.extend(p for p in outcome.placements if not p.allocation.containers)
        return state

    async def _write_and_offer(
        self,
        allocator: Allocator,
        objects: Mapping[str, Obj],
        busy: Mapping[str, str],
        result: PassResult,
        reports: list[Report],
    ) -> None:
        """CAS-write every ledger the pass changed (all nodes at once), then hand the committed
        entries to the Binder. A node whose write lost a race is undone alone (``_lost_race``: its
        pods are placed again next pass, from the ledger as then read); one whose write fails
        otherwise is undone and held alone (``_unwritten``); the other nodes' entries are bound in
        this pass. A gang decided across a node that lost and others ends the pass (re-raised):
        its members are placed together or not at all."""
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
                    self.metrics.allocator_rebuilds.labels("refused-write").inc()
                    return
            writes[name] = (old, new, info)
        lost: dict[str, Conflict] = {}
        try:
            failed = await self.writes.write(writes)
        except NodeConflicts as race:
            failed, lost = race.failed, race.lost
        for name in sorted(failed):
            await self._unwritten(
                name, failed[name], allocator=allocator, objects=objects, result=result, reports=reports
            )
        if lost and self._lost_race(lost, allocator, result):
            raise NodeConflicts(lost, {})  # a gang split across nodes: the next pass decides it whole
        before = len(self.bindings.bound_keys)
        self.bindings.binder.failures.clear()
        self.bindings.binder.offer(committed_waiting(allocator, objects), busy)
        if not self.background_events:
            await self.bindings.binder.drain()
            result.errors.extend(self.bindings.binder.failures)
        else:
            # Let the bindings just started put their requests on the wire before the pass goes on
            # with status reports and the invariant report (5,000 nodes at a start).
            await asyncio.sleep(0)
        result.bound.extend(self.bindings.bound_keys[before:])
        await self.writes.refresh_summaries(set(writes) - set(failed))

    def _lost_race(self, lost: Mapping[str, Conflict], allocator: Allocator, result: PassResult) -> bool:
        """Undo this pass's decisions on the nodes whose write lost a race (their pods are placed
        again from the next read; no hold, no report: a race is not a failure). True when one of
        them held a member of a gang decided on another node as well (the pass-level case)."""
        groups_elsewhere = {
            (entry.namespace, entry.group)
            for name in allocator.touched
            if name not in lost
            for entry in allocator.ledger(name).allocations.values()
            if entry.group
        }
        split = False
        for name in sorted(lost):
            stored = self.world.ledgers.get(name) or NodeLedger(node=name)
            decided = [
                entry
                for uid, entry in allocator.ledger(name).allocations.items()
                if stored.allocations.get(uid) != entry
            ]
            split = split or any(e.group and (e.namespace, e.group) in groups_elsewhere for e in decided)
            self.world.revert(name, [e.pod_uid for e in decided])
            self.metrics.conflicts.inc()
            result.conflicts += 1
            log.info("ledger write of node %s lost a race; its pods are placed again: %s", name, lost[name])
        return split

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
        await self.writes.hold(name, error, keys)


def readable_pending(
    world: World, parser: PodParser, scheduler: str, reports: list[Report]
) -> list[tuple[PodRequest, Obj]]:
    """Our pending pods with a readable vGPU request; the rest get their reason reported (a pod
    routed to ``scheduler`` without a vGPU request is told how to leave it)."""
    pending: list[tuple[PodRequest, Obj]] = []
    for uid in world.pending:
        pod = world.pods[uid]
        try:
            request = parser.request(pod)
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


def committed_waiting(allocator: Allocator, pending: Mapping[str, Obj]) -> dict[str, list[Waiting]]:
    """Committed entries of pending pods, per node: the Binder binds them one at a time."""
    out: dict[str, list[Waiting]] = {}
    for uid, pod in pending.items():
        held = allocator.allocation_of(uid)
        if held is not None and held[1].committed:
            out.setdefault(held[0], []).append(Waiting(held[1], pod))
    return out
