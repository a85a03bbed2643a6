"""One Volcano scheduler session against an API server: read the cache, decide, write, record.

Volcano opens a session every ``schedulePeriod`` (1 s by default; pkg/scheduler/scheduler.go),
runs its actions over a snapshot of its cache, and closes it. The decisions are allocate.py's;
this module makes the writes they imply, in Volcano's order, through binder.py:

1. enqueue: each PodGroup let in is written ``Inqueue`` (actions/enqueue/enqueue.go);
2. allocate: each job's statement. 1.10-1.15 PATCH each task's assignment as it is allocated, so a
   refused patch leaves the task unallocated, and a job whose tasks no longer reach minMember is
   discarded, its patches undone; >= 1.16 write nothing until the bind;
3. bind: every task of every committed statement at once (``asyncio.gather``: one session's
   Bindings are in flight together, pkg/scheduler/cache/cache.go); a refused bind is resynced:
   the task is pending again and the next session decides it on fresh data;
4. close: a pod that could not be placed gets ``PodScheduled=False`` with the reason
   (cache.go ``taskUnschedulable``); a PodGroup with minMember tasks bound becomes ``Running``
   (framework/job_updater.go).

Every session is recorded (``SessionRecord``) so ``simulate`` can tell the story: what was bound,
what the arbiter refused and with which message, what waits and why. ``changed`` says whether the
session moved anything (a bind, an enqueue, a PodGroup phase, a pod's reason): a session that
changed nothing will be repeated unchanged until the cluster changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.objects import Obj
from vgpu_guard.engine.untrusted import as_mapping
from vgpu_guard.kube.client import ClusterClient, typed_items
from vgpu_guard.kube.errors import KubeError, NotFound
from vgpu_guard.kube.resources import NODES, PODGROUPS, PODS, QUEUES
from vgpu_guard.volcano.allocate import Assignment, JobDecision, SessionPlan, Snapshot, decide, pod_key
from vgpu_guard.volcano.binder import VolcanoVersion, allocate, bind, deallocate

__all__ = ["BindOutcome", "SessionRecord", "VolcanoScheduler"]

Result = Literal["bound", "denied", "failed"]


@dataclass(frozen=True, slots=True)
class BindOutcome:
    """One task's writes: bound, denied by an admission webhook, or failed otherwise.

    ``step`` is the write that was refused (``patch``: 1.10-1.15's AllocateFunc; ``bind``)."""

    pod: str
    node: str
    ids: str
    result: Result
    message: str = ""
    step: Literal["patch", "bind"] = "bind"


@dataclass(frozen=True)
class SessionRecord:
    """What one session did (see the module docstring)."""

    number: int
    enqueued: tuple[str, ...] = ()
    binds: tuple[BindOutcome, ...] = ()
    unplaced: tuple[tuple[str, str], ...] = ()  # (namespace/name, reason)
    discarded: tuple[str, ...] = ()  # jobs whose statement was discarded (gang not ready)
    running: tuple[str, ...] = ()  # PodGroups that became Running
    changed: bool = False


def _refusal(error: KubeError) -> Result:
    """``denied`` for an admission webhook's refusal (the arbiter's), ``failed`` for the rest."""
    return (
        "denied"
        if "admission webhook" in error.message and "denied the request" in error.message
        else "failed"
    )


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Statement:
    """Tasks of committed statements waiting to be bound, and what the allocate step recorded."""

    to_bind: list[tuple[Assignment, Obj, str]] = field(default_factory=list)  # assignment, task pod, job
    refused: list[BindOutcome] = field(default_factory=list)
    unplaced: list[tuple[Obj, str]] = field(default_factory=list)
    discarded: list[str] = field(default_factory=list)


class VolcanoScheduler:
    """Volcano's scheduler, one ``session()`` at a time (the sandbox's service calls it every second)."""

    def __init__(
        self,
        api: ClusterClient,
        config: GuardConfig,
        *,
        version: VolcanoVersion,
        stale_cache: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.config = config
        self.version = version
        self.stale_cache = stale_cache
        self.clock = clock
        self.sessions: list[SessionRecord] = []

    async def snapshot(self) -> Snapshot:
        """The cache, read fresh: a refused bind is decided again on what the API server holds."""
        listed = [typed_items((await self.api.list(r)).items, r) for r in (NODES, PODS, PODGROUPS, QUEUES)]
        return Snapshot(*(tuple(items) for items in listed))

    async def session(self) -> SessionRecord:
        """Open, decide, write, close; the record is also appended to ``sessions``."""
        snapshot = await self.snapshot()
        now = int(self.clock())
        plan = decide(snapshot, self.config, stale=self.stale_cache, now=now, version=self.version)
        enqueued = await self._enqueue(plan)
        statement = _Statement()
        for job in plan.jobs:
            await self._allocate(job, statement, now)
        binds = await asyncio.gather(*(self._bind(a, task) for a, task, _ in statement.to_bind))
        outcomes = (*statement.refused, *binds)
        reasons = statement.unplaced + [(p, r) for job in plan.jobs for p, r in job.unplaced]
        written = await self._close(reasons, now)
        running = await self._running(snapshot, plan, binds)
        record = SessionRecord(
            number=len(self.sessions) + 1,
            enqueued=enqueued,
            binds=tuple(outcomes),
            unplaced=tuple((pod_key(p), r) for p, r in reasons),
            discarded=tuple(statement.discarded),
            running=running,
            changed=bool(enqueued or running or written or any(b.result == "bound" for b in binds)),
        )
        self.sessions.append(record)
        return record

    async def _enqueue(self, plan: SessionPlan) -> tuple[str, ...]:
        done = []
        for namespace, name in plan.enqueue:
            with contextlib.suppress(NotFound):
                await self.api.patch(PODGROUPS, name, {"status": {"phase": "Inqueue"}}, namespace=namespace)
                done.append(f"{namespace}/{name}")
        return tuple(done)

    async def _allocate(self, job: JobDecision, statement: _Statement, now: int) -> None:
        """AllocateFunc for each placed task of ``job``, then commit or discard its statement."""
        allocated: list[tuple[Assignment, Obj]] = []
        for a in job.assignments:
            try:
                allocated.append(
                    (
                        a,
                        await allocate(
                            self.api, a.pod, node=a.node, ids=a.ids, version=self.version, now=now
                        ),
                    )
                )
            except KubeError as e:
                statement.refused.append(
                    BindOutcome(pod_key(a.pod), a.node, a.ids, _refusal(e), e.message, "patch")
                )
                statement.unplaced.append((a.pod, f"its assignment to {a.node} was refused: {e.message}"))
        if job.ready and job.running + len(allocated) >= job.minimum:
            statement.to_bind.extend((a, task, job.name) for a, task in allocated)
            return
        if job.assignments:
            statement.discarded.append(job.name)
        for a, task in allocated:
            with contextlib.suppress(KubeError):
                await deallocate(self.api, task, self.version)
            if job.ready:  # became unready through refused patches: say so on the others
                why = (
                    f"statement of {job.name} discarded: {job.running + len(allocated)} of minMember "
                    f"{job.minimum} tasks allocated, the other assignments were refused"
                )
                statement.unplaced.append((a.pod, why))

    async def _bind(self, a: Assignment, task: Obj) -> BindOutcome:
        try:
            await bind(self.api, task, a.node)
        except KubeError as e:
            return BindOutcome(pod_key(a.pod), a.node, a.ids, _refusal(e), e.message)
        return BindOutcome(pod_key(a.pod), a.node, a.ids, "bound")

    async def _close(self, reasons: list[tuple[Obj, str]], now: int) -> int:
        """``PodScheduled=False`` with the reason on every task left pending (unchanged ones skipped)."""
        written = 0
        for pod, reason in reasons:
            status = as_mapping(pod.get("status"))
            conditions = [c for c in status.get("conditions") or [] if isinstance(c, Mapping)]
            current = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
            if current is not None and current.get("status") == "False" and current.get("message") == reason:
                continue
            condition = {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": reason,
                "lastProbeTime": None,
                "lastTransitionTime": _rfc3339(now),
            }
            others = [c for c in conditions if c.get("type") != "PodScheduled"]
            meta = as_mapping(pod.get("metadata"))
            with contextlib.suppress(NotFound):
                patch = {"status": {"conditions": [*others, condition]}}
                await self.api.patch(
                    PODS, str(meta["name"]), patch, namespace=str(meta["namespace"]), subresource="status"
                )
                written += 1
        return written

    async def _running(
        self, snapshot: Snapshot, plan: SessionPlan, binds: list[BindOutcome]
    ) -> tuple[str, ...]:
        """PodGroups whose bound tasks now reach minMember, written ``Running``."""
        bound = {b.pod for b in binds if b.result == "bound"}
        phases = {
            (
                str(as_mapping(p.get("metadata")).get("namespace")),
                str(as_mapping(p.get("metadata")).get("name")),
            ): str(as_mapping(p.get("status")).get("phase") or "")
            for p in snapshot.podgroups
        }
        done = []
        for job in plan.jobs:
            if job.podgroup is None or phases.get(job.podgroup) == "Running":
                continue
            now_bound = job.running + sum(1 for a in job.assignments if pod_key(a.pod) in bound)
            if now_bound >= job.minimum:
                namespace, name = job.podgroup
                with contextlib.suppress(NotFound):
                    await self.api.patch(
                        PODGROUPS, name, {"status": {"phase": "Running"}}, namespace=namespace
                    )
                    done.append(f"{namespace}/{name}")
        return tuple(done)
