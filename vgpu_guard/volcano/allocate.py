"""Volcano's enqueue and allocate actions over one snapshot of its cache: pure decisions, no I/O.

What a session decides, from Volcano's source (pkg/scheduler/):

- **Whose pods**: pods with ``schedulerName: volcano`` that are not bound, grouped into jobs by
  their PodGroup (``scheduling.k8s.io/group-name``; cache.go ~709-720). A pod without a group is a
  job of one (Volcano's PodGroup controller gives it a PodGroup of minMember 1,
  pkg/controllers/podgroup/pg_controller.go; the model does not create that object). A group's pods
  are scheduled only once their PodGroup exists and is past Pending.
- **enqueue** (actions/enqueue/enqueue.go): PodGroups ``Pending`` (or without a phase) move to
  ``Inqueue``. The model lets every PodGroup in: ``JobEnqueueable`` (queue capacity, the
  overcommit and proportion plugins) is not modelled.
- **allocate** (actions/allocate/allocate.go): jobs by priority (the priority plugin: the highest
  pod priority, then the oldest), tasks likewise. For each task: the nodes that are Ready and pass
  kube-scheduler's filters Volcano's predicates plugin runs (cordon, nodeSelector and required node
  affinity, taints), then deviceshare's predicate on each (deviceshare.py, over a copy of the
  node's cards as Volcano's cache counts them, device_cache.py and device_usage.py: the
  registration and the bound pods' own ``vgpu-ids-new``, never vgpu-guard's ledger), with the
  ``binpack`` SchedulePolicy of Volcano's vGPU guide (docs/user-guide/how_to_use_volcano_vgpu.md).
  The node: the highest deviceshare score (``floor(score + 0.5)``, plugins/deviceshare
  ``getDeviceScore``), then the first by name. (Volcano with the guide's configuration gives
  deviceshare no ScheduleWeight, ranks by its other plugins and picks at random among the best,
  util.SelectBestNodeAndScore; a model that must repeat itself cannot.) Allocate then takes the
  devices on the session's cards, with its version's bookkeeping (device_usage.py). A task that
  fits nowhere gets Volcano's ``FitErrors`` message: ``0/N nodes are unavailable: <count>
  <reason>, ...`` (api/unschedule_info.go), the device reason written ``hami-vgpuDeviceSharing
  <error>`` (v1.10/v1.11's wording; v1.12.0+ write ``hami-vgpuDeviceSharing error`` and log the
  error). Only vGPU pods are placed; cpu, memory, ports and pod affinity are not judged.
- **gang** (plugins/gang/gang.go): a job is committed only when its bound tasks plus the tasks
  placed now reach ``minMember``; otherwise the statement is discarded and every pending task gets
  ``<missing>/<tasks> tasks in gang unschedulable: ...`` (gang.go ``OnSessionClose``).
- **stale cache** (#3616, Volcano 1.9): the session does not count its own placements of
  single-pod jobs, so each such task sees the cards as they were when the session opened: three
  12 GiB pods of a Deployment land on one 24 GiB card, as #3616 reported. A gang's tasks are still
  counted within its statement. Off, every placement is counted before the next task is decided.
- **discard**: a gang that is not ready gives its tasks' numbers back to the session's cards from
  v1.15.0 (``Release`` -> ``SubResource``); v1.10-v1.14 keep them for the rest of the session.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.objects import Obj
from vgpu_guard.engine.placement_reason import judged_after
from vgpu_guard.engine.pod_request import PodRequest, PodRequestError, pod_request
from vgpu_guard.engine.untrusted import as_mapping
from vgpu_guard.volcano.binder import VolcanoVersion, parse_version
from vgpu_guard.volcano.session_devices import Placed, SessionDevices

__all__ = [
    "SCHEDULER_NAME",
    "Assignment",
    "JobDecision",
    "SessionPlan",
    "Snapshot",
    "decide",
    "pod_key",
]

# Volcano's default schedulerName (installer/helm/chart/volcano/values.yaml).
SCHEDULER_NAME = "volcano"
_PENDING_PHASES = ("", "Pending")
_ENDED = ("Succeeded", "Failed")


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = as_mapping(pod.get("metadata"))
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


@dataclass(frozen=True)
class Snapshot:
    """Volcano's cache when a session opens: every Node, Pod, PodGroup and Queue (typed objects)."""

    nodes: tuple[Obj, ...] = ()
    pods: tuple[Obj, ...] = ()
    podgroups: tuple[Obj, ...] = ()
    queues: tuple[Obj, ...] = ()


@dataclass(frozen=True, slots=True)
class Assignment:
    """A task placed by the session: its pod, node, and the ``vgpu-ids-new`` value to write."""

    pod: Obj
    node: str
    ids: str


@dataclass(frozen=True)
class JobDecision:
    """One job's statement: ``ready`` (commit: bind ``assignments``) or discarded; the tasks left
    pending and why, as ``(pod, reason)``; ``minimum`` and ``running`` for re-checking readiness."""

    name: str
    ready: bool
    assignments: tuple[Assignment, ...] = ()
    unplaced: tuple[tuple[Obj, str], ...] = ()
    minimum: int = 1
    running: int = 0
    podgroup: tuple[str, str] | None = None


@dataclass(frozen=True)
class SessionPlan:
    """What one session decided: PodGroups to enqueue, then each job's statement in order."""

    enqueue: tuple[tuple[str, str], ...] = ()
    jobs: tuple[JobDecision, ...] = field(default=())


@dataclass
class _Job:
    name: str
    podgroup: tuple[str, str] | None
    minimum: int
    tasks: list[tuple[Obj, PodRequest | None, str]] = field(default_factory=list)  # pod, request, error
    running: int = 0
    blocked: str = ""  # why none of its tasks may be scheduled now (no PodGroup)

    def order(self) -> tuple[int, str, str]:
        pending = [r for _, r, _ in self.tasks if r is not None]
        top = max((r.priority for r in pending), default=0)
        oldest = min((r.created for r in pending), default="")
        return (-top, oldest, self.name)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return as_mapping(obj.get("metadata"))


def _phase(obj: Mapping[str, Any]) -> str:
    return str(as_mapping(obj.get("status")).get("phase") or "")


def _group_key(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    notes = as_mapping(_meta(pod).get("annotations"))
    group = notes.get("scheduling.k8s.io/group-name") or notes.get("scheduling.volcano.sh/group-name")
    return (str(_meta(pod).get("namespace") or "default"), str(group)) if group else None


def _live(pod: Mapping[str, Any]) -> bool:
    return not _meta(pod).get("deletionTimestamp") and _phase(pod) not in _ENDED


def _ours(pod: Mapping[str, Any]) -> bool:
    return as_mapping(pod.get("spec")).get("schedulerName") == SCHEDULER_NAME


def _bound(pod: Mapping[str, Any]) -> bool:
    return bool(as_mapping(pod.get("spec")).get("nodeName"))


def _request(pod: Mapping[str, Any], config: GuardConfig) -> tuple[PodRequest | None, str]:
    try:
        request = pod_request(pod, config.nvidia)
    except PodRequestError as e:
        return None, f"its vGPU request cannot be read: {e}"
    if request is None:
        return None, "the Volcano model places vGPU pods only; this pod requests no vGPU"
    return request, ""


def _jobs(snapshot: Snapshot, podgroups: Mapping[tuple[str, str], Obj], config: GuardConfig) -> list[_Job]:
    jobs: dict[str, _Job] = {}
    for pod in snapshot.pods:
        if not _ours(pod) or not _live(pod):
            continue
        group = _group_key(pod)
        name = f"{group[0]}/{group[1]}" if group else pod_key(pod)
        job = jobs.get(name)
        if job is None:
            podgroup = podgroups.get(group) if group else None
            minimum = as_mapping(podgroup.get("spec")).get("minMember") if podgroup else 1
            job = jobs[name] = _Job(name, group, minimum if isinstance(minimum, int) else 1)
            if group and podgroup is None:
                job.blocked = f"its PodGroup {name} does not exist; Volcano schedules a group's pods with it"
        if _bound(pod):
            job.running += 1
        else:
            job.tasks.append((pod, *_request(pod, config)))
    return [job for job in jobs.values() if job.tasks]


def _place(job: _Job, devices: SessionDevices, *, stale: bool) -> JobDecision:
    """One job's statement: place its tasks in order; commit when the gang is ready."""
    placed: list[tuple[Obj, Placed]] = []
    failed: list[tuple[Obj, str]] = []
    before: list[str] = []  # the tasks placed (tentatively) before the first that did not fit
    count = not (stale and job.minimum <= 1)  # #3616: the next task sees the cards as they were
    for pod, request, error in sorted(job.tasks, key=lambda t: t[1].order if t[1] else (0, "", "", "")):
        if request is None:
            failed.append((pod, error))
            continue
        result = devices.place(pod, count=count)
        if isinstance(result, str):
            if not failed:
                before = [pod_key(p).split("/", 1)[1] for p, _ in placed]
            failed.append((pod, result))
            continue
        placed.append((pod, result))
    ready = job.running + len(placed) >= job.minimum
    if not ready and count:
        for _, placement in reversed(placed):  # Statement.Discard undoes the last first
            devices.discard(placement)
    return JobDecision(
        name=job.name,
        ready=ready,
        assignments=tuple(Assignment(pod, p.node, p.ids) for pod, p in placed),
        unplaced=tuple(failed) if ready else _gang_reasons(job, len(placed), failed, before),
        minimum=job.minimum,
        running=job.running,
        podgroup=job.podgroup,
    )


def _gang_reasons(
    job: _Job, placed: int, failed: list[tuple[Obj, str]], before: list[str]
) -> tuple[tuple[Obj, str], ...]:
    """gang.go's message for every pending task of a job that cannot start whole, with the first task
    that did not fit and why (judged after ``before``, the tasks placed ahead of it: none of them is
    bound, so the reason says its numbers are what would remain)."""
    if job.minimum <= 1:
        return tuple(failed)
    missing = job.minimum - job.running - placed
    blocker = ""
    if failed:
        task = pod_key(failed[0][0]).split("/", 1)[1]
        blocker = f"; {judged_after(task, before)}: {failed[0][1]}"
    message = (
        f"{missing}/{len(job.tasks) + job.running} tasks in gang unschedulable: gang {job.name} needs "
        f"{job.minimum} (minMember), {job.running + placed} can run{blocker}"
    )
    return tuple((pod, message) for pod, _, _ in job.tasks)


def decide(
    snapshot: Snapshot,
    config: GuardConfig,
    *,
    stale: bool,
    now: int,
    version: VolcanoVersion | None = None,
) -> SessionPlan:
    """Enqueue and allocate over ``snapshot`` (see the module docstring); ``now`` is unused by the
    decisions (Volcano stamps its writes, binder.py) and kept for the session's call."""
    del now
    podgroups = {
        (str(_meta(p).get("namespace") or "default"), str(_meta(p).get("name") or "")): p
        for p in snapshot.podgroups
    }
    enqueue = tuple(sorted(key for key, p in podgroups.items() if _phase(p) in _PENDING_PHASES))
    released = {
        key: {**p, "status": {**as_mapping(p.get("status")), "phase": "Inqueue"}}
        for key, p in podgroups.items()
    }
    devices = SessionDevices(snapshot.nodes, snapshot.pods, config, version or parse_version("1.16"))
    decisions = []
    for job in sorted(_jobs(snapshot, released, config), key=_Job.order):
        if job.blocked:
            decisions.append(
                JobDecision(job.name, False, (), tuple((p, job.blocked) for p, _, _ in job.tasks))
            )
            continue
        decisions.append(_place(job, devices, stale=stale))
    return SessionPlan(enqueue=enqueue, jobs=tuple(decisions))
