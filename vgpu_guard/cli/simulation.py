"""The whole system on an in-memory cluster: scenario in, outcomes out (``vgpu-guard simulate``).

vgpu-guard's part is not a model: it is vgpu-guard, wired as ``serve all`` wires it
(cli/simulated_cluster.py). Objects go through the webhook's own route function on the views of
its watch caches (cli/admission_chain.py: defaults, mutation, validation, a gang's placement
recorded through the API), the admitted (mutated) objects are stored in the API double, and the
real ``AllocationController`` runs against it through ``MemoryClusterClient``, reading its
informers (``CachedInputs``). Every write that carries a GPU assignment (a Binding, a pod update)
meets the webhook's own ``Arbiter`` on the way in (cli/inprocess_arbiter.py), which reserves it
in the node's GPULedger or refuses it. What is stood in for, each documented where it is:
Volcano (its job controller and scheduler, vgpu_guard/volcano/), the other workload controllers
(``workload_pods``) and the device plugin (``confirm_allocations``).

What a scenario's objects mean:

- the cluster it runs on when not its own (``Scenario.cluster``), every object stored as it is;
- cluster state, stored as they are (they exist before the story starts): Nodes, Namespaces,
  PriorityClasses, HyperNodes, ConfigMaps, and Pods that already have ``spec.nodeName`` (running
  pods, with their assignment annotations; the controller adopts them into the ledger);
- everything else is created in file order through admission: Queues (each sees the ones before
  it), PodGroups, Pods, and workloads, which are admitted as themselves and then expanded into
  pods that are admitted again as their controllers' requests; a Volcano Job is stored and left to
  Volcano's job controller. A denied object is not stored; a denied workload creates no pods.
  Namespaces are created on first use.

Then rounds of one schedule period (one simulated second) each: Volcano's job controller,
one Volcano session, the controller until a pass changes nothing, the device plugin's stand-in;
until a round moves nothing. Which pods Volcano places and which the controller places is the
mode (cli/simulation_mode.py).

Time is a fixed simulated clock that ticks one second per created object and per round, so
creation order is file order and the output never depends on the wall clock; names and UIDs come
from a seeded store. ``run_simulation`` never prints; ``simulate_report`` renders its result.

Exceptions::

    SimulationError            the scenario cannot be simulated (unsupported kind, never settles)
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry

from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.apidouble.identity import ADMIN as ADMIN_USER
from vgpu_guard.apidouble.identity import UserInfo, service_account
from vgpu_guard.apidouble.store import Store
from vgpu_guard.cli.admission_chain import admit
from vgpu_guard.cli.cluster_source import is_cluster_state
from vgpu_guard.cli.documents import Document
from vgpu_guard.cli.packaged_crds import packaged_crd
from vgpu_guard.cli.scenario import Scenario
from vgpu_guard.cli.simulated_cluster import SimulatedCluster
from vgpu_guard.cli.simulation_mode import Mode, simulation_config
from vgpu_guard.cli.workload_pods import CONTROLLER_USERS, expand_workload
from vgpu_guard.controller.allocation import AllocationController
from vgpu_guard.engine.admission import ReviewResult, request_for
from vgpu_guard.engine.annotations import BIND_PHASE
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.ledger import Allocation, NodeLedger, check_invariants, decode_ledger, gpu_usage
from vgpu_guard.engine.objects import Obj
from vgpu_guard.engine.rules.queues_validate import QueueAudit, audit_queues
from vgpu_guard.engine.rules.workloads import WORKLOAD_KINDS
from vgpu_guard.engine.volcano_job import is_volcano_job
from vgpu_guard.kube.errors import KubeError
from vgpu_guard.kube.resources import (
    CRDS,
    EVENTS,
    LEDGERS,
    NAMESPACES,
    PODGROUPS,
    PODS,
    Resource,
)
from vgpu_guard.volcano.allocate import SCHEDULER_NAME as VOLCANO
from vgpu_guard.volcano.binder import VolcanoVersion, parse_version
from vgpu_guard.volcano.jobs import JOBS, plan_job, podgroup_name
from vgpu_guard.volcano.session import BindOutcome, SessionRecord, VolcanoScheduler

__all__ = [
    "ADMIN",
    "EPOCH",
    "Admitted",
    "DeviceOutcome",
    "GpuOutcome",
    "Mode",
    "PodOutcome",
    "SimClock",
    "SimulationError",
    "SimulationResult",
    "VolcanoRun",
    "confirm_allocations",
    "is_cluster_state",
    "run_simulation",
    "simulate",
    "simulation_config",
]


# 2025-06-15T15:06:40Z; any fixed instant would do.
EPOCH = 1_750_000_000.0
# The user the scenario's own objects come from (as `kubectl apply` by a cluster admin).
ADMIN = "kubernetes-admin"
_STORE_SEED = 6
_CRDS = (
    "data/crds/gpuledgers.vgpu-guard.io.yaml",
    "data/crds/gangplacements.vgpu-guard.io.yaml",
    "data/crds/volcano/scheduling.volcano.sh_queues.yaml",
    "data/crds/volcano/scheduling.volcano.sh_podgroups.yaml",
    "data/crds/volcano/topology.volcano.sh_hypernodes.yaml",
    "data/crds/volcano/batch.volcano.sh_jobs.yaml",
)
# Who Volcano's job controller creates pods as (cli/workload_pods.py names the workload controllers).
JOB_CONTROLLER = CONTROLLER_USERS[("batch.volcano.sh", "Job")]
# Volcano's scheduler's ServiceAccount (namespace, name): an admission.allocationWriters entry.
VOLCANO_SCHEDULER = ("volcano-system", "volcano-scheduler")
_MAX_ROUNDS = 50


class SimulationError(Exception):
    """Raised when a scenario cannot be simulated: an object the double does not serve, or no settling."""


class SimClock:
    """Simulated unix seconds: fixed at ``EPOCH``, moved only by ``tick`` (one per created object)."""

    def __init__(self, now: float = EPOCH) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float = 1.0) -> None:
        self.now += seconds


@dataclass(frozen=True)
class Admitted:
    """One object sent through admission, and what became of it."""

    source: str
    result: ReviewResult
    # The user of the AdmissionRequest (the scenario's admin, or a workload controller).
    username: str
    # The API server refused the admitted object (e.g. a PriorityClass that does not exist).
    api_error: str | None = None
    # Pods made from an admitted workload ("namespace/name"), or why none were.
    pods: tuple[str, ...] = ()
    note: str = ""
    # For a pod made by a workload's controller: that workload ("Deployment default/web").
    workload: str = ""


@dataclass(frozen=True)
class DeviceOutcome:
    """One GPU of a bound pod, from its ledger entry (memory in MiB)."""

    uuid: str
    memory: int
    cores: int
    mig_profile: str | None


@dataclass(frozen=True)
class PodOutcome:
    """Where a pod ended up: Bound (node, devices), Pending (reason) or Rejected (reason)."""

    namespace: str
    name: str
    phase: str
    scheduler: str
    source: str
    node: str | None = None
    devices: tuple[DeviceOutcome, ...] = ()
    reason: str | None = None
    priority: int = 0
    existing: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class GpuOutcome:
    """One physical GPU's ledger: capacity and what the entries on it add up to (MiB, percent)."""

    node: str
    uuid: str
    model: str
    mode: str
    memory_total: int
    memory_used: int
    cores_used: int
    pods: tuple[str, ...]


@dataclass(frozen=True)
class VolcanoRun:
    """The Volcano model's part: its release, the stale-cache switch (and why) and every session."""

    version: VolcanoVersion
    stale_cache: bool
    stale_cache_from: str
    sessions: tuple[SessionRecord, ...]


@dataclass(frozen=True)
class SimulationResult:
    """Everything the report shows; ``view`` is the final cluster, ``queues`` its queue audit."""

    scenario: str
    scheduler: str
    # "volcano" or "routing", and the sentence that says why and what it means.
    mode: str
    note: str
    volcano: VolcanoRun
    admission: tuple[Admitted, ...]
    pods: tuple[PodOutcome, ...]
    gpus: tuple[GpuOutcome, ...]
    queues: QueueAudit
    view: ClusterView
    passes: int
    # Broken GPU invariants after settling (over capacity, overlapping MIG slots): empty is the point.
    violations: tuple[str, ...] = ()
    memory_factor: int = 1
    # What vgpu-guard's controller warned about on the way, one line per object and reason: e.g.
    # the device plugin's stale pick (DevicePluginStalePick) a discarded 1.10-1.15.0 session leaves.
    warnings: tuple[str, ...] = ()


def confirm_allocations(store: Store) -> int:
    """The device plugin's stand-in: every pod in ``bind-phase=allocating`` on a node succeeds.

    On a real node the kubelet calls the plugin's Allocate when the bound pod starts, and the plugin
    writes ``volcano.sh/bind-phase=success``; until then the controller commits no further pod on
    that node (docs/design/ledger.md, "One pod per node in allocating"). Returns how many it confirmed.
    """
    done = 0
    for pod in store.list(PODS).items:
        meta = pod.get("metadata") or {}
        if (meta.get("annotations") or {}).get(BIND_PHASE) == "allocating" and (pod.get("spec") or {}).get(
            "nodeName"
        ):
            store.patch(
                PODS,
                meta["name"],
                {"metadata": {"annotations": {BIND_PHASE: "success"}}},
                namespace=meta["namespace"],
            )
            done += 1
    return done


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = _meta(obj)
    return (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))


class _Run:
    """One simulation's mutable state: the store, the clock, and the outcomes gathered so far."""

    def __init__(self, config: GuardConfig) -> None:
        self.config = config
        self.clock = SimClock()
        self.store = Store(seed=_STORE_SEED, clock=lambda: datetime.fromtimestamp(self.clock(), UTC))
        for path in _CRDS:
            self.store.create(CRDS, packaged_crd(path))
        self.admitted: list[Admitted] = []
        # Pods Volcano's job controller made, by the index of their Job's entry in ``admitted``.
        self.job_pods: dict[int, list[Admitted]] = {}
        self.jobs: dict[str, int] = {}  # stored Volcano Job uid -> its entry in ``admitted``
        # Pods in the order they came to be, with their source; rejected ones with the reason.
        self.order: list[tuple[str, str]] = []
        self.sources: dict[tuple[str, str], str] = {}
        self.rejected: dict[tuple[str, str], tuple[str, str]] = {}  # key -> (reason, scheduler)
        self.existing: set[tuple[str, str]] = set()
        # The webhook's caches and arbiter and the controller's inputs, over the store's watches.
        self.cluster = SimulatedCluster(self.store, config, self.clock)

    def client(self, user: UserInfo = ADMIN_USER) -> MemoryClusterClient:
        """A client of the simulated API server whose assignment writes meet the arbiter."""
        return self.cluster.client(user)

    # --- the API ---------------------------------------------------------------------------------

    def resource_for(self, obj: Mapping[str, Any], where: str) -> Resource:
        group = str(obj.get("apiVersion") or "").rpartition("/")[0]
        for info in self.store.types():
            if info.group == group and info.kind == obj.get("kind"):
                return info.resource()
        raise SimulationError(
            f"{where}: simulate cannot create {obj.get('apiVersion')} {obj.get('kind')}: the simulated API "
            "serves Nodes, Namespaces, PriorityClasses, ConfigMaps, HyperNodes, Pods, Queues, PodGroups "
            "and expands Deployments, StatefulSets, ReplicaSets, Jobs and Volcano Jobs into pods"
        )

    def ensure_namespace(self, obj: Mapping[str, Any], resource: Resource) -> None:
        namespace = _meta(obj).get("namespace") or "default"
        if not resource.namespaced:
            return
        try:
            self.store.get(NAMESPACES, str(namespace))
        except KubeError:
            self.store.create(NAMESPACES, {"metadata": {"name": str(namespace)}})

    def create(self, obj: Mapping[str, Any], where: str) -> Obj:
        """Store ``obj`` (as the API server would after admission); raises the API's ``KubeError``."""
        resource = self.resource_for(obj, where)
        self.ensure_namespace(obj, resource)
        namespace = str(_meta(obj).get("namespace") or "default") if resource.namespaced else None
        body = {
            **obj,
            "metadata": {k: v for k, v in _meta(obj).items() if k not in ("uid", "resourceVersion")},
        }
        created = self.store.create(resource, body, namespace=namespace)
        self.clock.tick()
        return created

    async def view(self) -> ClusterView:
        """What the webhook's caches hold now (nodes, queues, podgroups, hypernodes, ledgers, gang
        placements), once they have every change of the store."""
        return await self.cluster.view()

    # --- the story -------------------------------------------------------------------------------

    def add_state(self, document: Document) -> None:
        obj = document.object
        try:
            created = self.create(obj, document.source)
        except KubeError as e:
            raise SimulationError(f"{document.source}: the simulated API refused the object: {e}") from e
        if obj.get("kind") == "Pod":
            key = _key(created)
            self.store.patch(
                PODS, key[1], {"status": {"phase": "Running"}}, namespace=key[0], subresource="status"
            )
            self.order.append(key)
            self.sources[key] = document.source
            self.existing.add(key)

    async def admit(
        self, obj: Mapping[str, Any], *, source: str, username: str
    ) -> tuple[ReviewResult, str | None]:
        """Admission, then the store: what ``kubectl create`` does. Returns the result and any API error.

        The webhook records a gang's IB cluster (first member) through the API before it answers
        (webhook/recording.py); each object it created takes its second of the simulated clock."""
        request = request_for(obj, username=username)
        result = await admit(request, self.view, self.config, self.client())
        self.clock.tick(len(result.persist))
        if not result.decision.allowed:
            return result, None
        try:
            self.create(result.object, source)
        except KubeError as e:
            return result, e.message
        return result, None

    async def admit_pod(
        self, pod: Mapping[str, Any], *, source: str, username: str, workload: str = ""
    ) -> Admitted:
        result, api_error = await self.admit(pod, source=source, username=username)
        key = _key(result.object)
        spec = result.object.get("spec")
        scheduler = str(spec.get("schedulerName") or "default-scheduler") if isinstance(spec, Mapping) else ""
        self.order.append(key)
        self.sources[key] = source
        if not result.decision.allowed:
            self.rejected[key] = (f"denied by admission: {result.decision.message}", scheduler)
        elif api_error is not None:
            self.rejected[key] = (f"refused by the API server: {api_error}", scheduler)
        return Admitted(
            source=source, result=result, username=username, api_error=api_error, workload=workload
        )

    async def add_created(self, document: Document) -> None:
        obj = document.object
        group = str(obj.get("apiVersion") or "").rpartition("/")[0]
        kind = str(obj.get("kind") or "")
        if kind == "Pod":
            self.admitted.append(await self.admit_pod(obj, source=document.source, username=ADMIN))
            return
        if (group, kind) not in WORKLOAD_KINDS:
            self.resource_for(obj, document.source)  # fail early, naming the document, if not served
            result, api_error = await self.admit(obj, source=document.source, username=ADMIN)
            self.admitted.append(
                Admitted(source=document.source, result=result, username=ADMIN, api_error=api_error)
            )
            return
        result = await admit(request_for(obj, username=ADMIN), self.view, self.config, self.client())
        self.clock.tick()
        if not result.decision.allowed:
            self.admitted.append(Admitted(source=document.source, result=result, username=ADMIN))
            return
        if is_volcano_job(result.object):
            self.add_volcano_job(document.source, result)
            return
        expansion = expand_workload(result.object)
        workload = f"{kind} {_key(obj)[0]}/{_key(obj)[1]}"
        self.admitted.append(
            Admitted(
                source=document.source,
                result=result,
                username=ADMIN,
                pods=tuple(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in expansion.pods),
                note=expansion.note,
            )
        )
        for pod in expansion.pods:
            self.admitted.append(
                await self.admit_pod(
                    pod,
                    source=f"{document.source} ({workload})",
                    username=expansion.username,
                    workload=workload,
                )
            )

    def add_volcano_job(self, source: str, result: ReviewResult) -> None:
        """Store an admitted Volcano Job; Volcano's job controller makes the rest (``sync_jobs``)."""
        try:
            stored = self.create(result.object, source)
        except KubeError as e:
            self.admitted.append(Admitted(source=source, result=result, username=ADMIN, api_error=e.message))
            return
        self.jobs[str(stored["metadata"]["uid"])] = len(self.admitted)
        self.admitted.append(Admitted(source=source, result=result, username=ADMIN))
        self.job_pods[self.jobs[str(stored["metadata"]["uid"])]] = []

    async def sync_jobs(self, sessions: list[SessionRecord]) -> int:
        """Volcano's job controller over every stored Job (vgpu_guard/volcano/jobs.py): the PodGroup
        ``<job>-<uid>`` first (no admission webhook of ours sees it), the pods once Volcano's
        enqueue moved it to Inqueue, each admitted as the job controller's request. Returns how
        many objects it created."""
        created = 0
        stored = {str(job["metadata"]["uid"]): job for job in self.store.list(JOBS).items}
        for uid, index in sorted(self.jobs.items(), key=lambda pair: pair[1]):  # in creation order
            job = stored[uid]
            namespace, pg_name = str(job["metadata"]["namespace"]), podgroup_name(job)
            try:
                podgroup: Obj | None = self.store.get(PODGROUPS, pg_name, namespace=namespace)
            except KubeError:
                podgroup = None
            existing = {k[1] for k in self.order if k[0] == namespace}
            plan = plan_job(job, podgroup, existing)
            if plan.podgroup is not None:
                self.create(plan.podgroup, self.admitted[index].source)
                note = (
                    f"PodGroup {pg_name} created by Volcano's job controller; pods wait until it is Inqueue"
                )
                self.admitted[index] = replace(self.admitted[index], note=note)
                created += 1
            if plan.pods:
                await self.admit_job_pods(
                    index, plan.pods, pg_name, _enqueued_in(sessions, f"{namespace}/{pg_name}")
                )
                created += len(plan.pods)
        return created

    async def admit_job_pods(
        self, index: int, pods: tuple[Obj, ...], pg_name: str, session: int | None
    ) -> None:
        job = self.admitted[index]
        workload = f"Job {_key(job.result.object)[0]}/{_key(job.result.object)[1]}"
        for pod in pods:
            self.job_pods[index].append(
                await self.admit_pod(
                    pod, source=f"{job.source} ({workload})", username=JOB_CONTROLLER, workload=workload
                )
            )
        when = f" in session {session}" if session is not None else ""
        self.admitted[index] = replace(
            job,
            pods=job.pods + tuple(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods),
            note=f"PodGroup {pg_name} created by Volcano's job controller; Volcano's enqueue made it "
            f"Inqueue{when}, then the job controller created its pods",
        )

    def admission(self) -> tuple[Admitted, ...]:
        """Every admission request in order, a Volcano Job's pods right after the Job."""
        out: list[Admitted] = []
        for index, entry in enumerate(self.admitted):
            out.append(entry)
            out.extend(self.job_pods.get(index, ()))
        return tuple(out)

    async def settle(self, volcano: VolcanoScheduler, controller: AllocationController) -> int:
        """Rounds of one schedule period each (Volcano's 1 s): the job controller, one Volcano
        session, the allocation controller until a pass changes nothing, the device plugin's
        stand-in; until a round moves nothing. Returns the controller's passes in those rounds.

        The controller settles once first, not counted: vgpu-guard runs before the scenario's pods
        arrive, so the running pods are in the ledger (adopted) when Volcano's first session is
        arbitrated, as in a cluster where it was installed on running workloads."""
        await controller.settle()
        passes = 0
        for _ in range(_MAX_ROUNDS):
            created = await self.sync_jobs(volcano.sessions)
            await self.cluster.caught_up()  # Volcano lists fresh; the arbiter reads the caches
            session = await volcano.session()
            results = await controller.settle()
            passes += len(results)
            confirmed = confirm_allocations(self.store)
            self.clock.tick()
            if not (created or session.changed or confirmed or any(r.changed for r in results)):
                return passes
        raise SimulationError(
            f"the cluster did not settle within {_MAX_ROUNDS} rounds of Volcano and the controller"
        )


# --- what the run came to (read from its store once it settled) ---------------------------------------


def _violations(run: _Run, view: ClusterView) -> tuple[str, ...]:
    """The broken ledger invariants of the settled cluster (the simulate report's violations)."""
    out: list[str] = []
    for obj in run.store.list(LEDGERS).items:
        ledger = decode_ledger(obj)
        info = view.nodes.get(ledger.node)
        if info is not None:
            found = check_invariants(ledger, info, memory_factor=run.config.nvidia.gpu_memory_factor)
            out.extend(v.message for v in found)
    return tuple(out)


def _outcomes(
    run: _Run, view: ClusterView, sessions: list[SessionRecord]
) -> tuple[tuple[PodOutcome, ...], tuple[GpuOutcome, ...]]:
    """Each pod's outcome in the order it came to be, and each GPU's use."""
    ledgers = [decode_ledger(o) for o in run.store.list(LEDGERS).items]
    entries: dict[str, Allocation] = {uid: a for led in ledgers for uid, a in led.allocations.items()}
    stored = {_key(p): p for p in run.store.list(PODS).items}
    refusals = _last_refusals(sessions)
    pods = [
        _pod_outcome(run, key, stored.get(key), entries, refusals.get(f"{key[0]}/{key[1]}"))
        for key in run.order
    ]
    return tuple(pods), _gpu_outcomes(view, ledgers, run.config.nvidia.gpu_memory_factor)


def _pod_outcome(
    run: _Run,
    key: tuple[str, str],
    pod: Obj | None,
    entries: Mapping[str, Allocation],
    refusal: tuple[int, BindOutcome] | None,
) -> PodOutcome:
    """One pod's outcome: rejected (and why), bound (where, with which devices) or pending (why)."""
    namespace, name, source = key[0], key[1], run.sources[key]
    if key in run.rejected or pod is None:
        reason, scheduler = run.rejected.get(key, ("deleted", ""))
        return PodOutcome(namespace, name, "Rejected", scheduler, source, reason=reason)
    spec = pod.get("spec") or {}
    scheduler = str(spec.get("schedulerName") or "default-scheduler")
    raw_priority = spec.get("priority")
    entry = entries.get(str(_meta(pod).get("uid")))
    node = spec.get("nodeName")
    devices = tuple(
        DeviceOutcome(g.uuid, g.memory, g.cores, g.mig.profile if g.mig else None)
        for g in (entry.grants() if entry is not None and node else ())
    )
    ours = run.config.scheduling.scheduler_name
    return PodOutcome(
        namespace,
        name,
        "Bound" if node else "Pending",
        scheduler,
        source,
        node=str(node) if node else None,
        devices=devices,
        reason=None
        if node
        else _pending_reason(pod, scheduler=scheduler, ours=ours, entry=entry, refusal=refusal),
        priority=raw_priority if isinstance(raw_priority, int) else 0,
        existing=key in run.existing,
    )


def _gpu_outcomes(view: ClusterView, ledgers: list[NodeLedger], factor: int) -> tuple[GpuOutcome, ...]:
    gpus: list[GpuOutcome] = []
    by_node = {led.node: led for led in ledgers}
    for name in sorted(view.nodes):
        ledger = by_node.get(name)
        usage = gpu_usage(ledger.allocations.values()) if ledger else {}
        for gpu in view.nodes[name].gpus:
            used = usage.get(gpu.uuid)
            gpus.append(
                GpuOutcome(
                    node=name,
                    uuid=gpu.uuid,
                    model=gpu.type,
                    mode=gpu.mode,
                    memory_total=gpu.memory * factor,
                    memory_used=used.memory if used else 0,
                    cores_used=used.cores if used else 0,
                    pods=tuple(sorted(used.pods)) if used else (),
                )
            )
    return tuple(gpus)


def _last_refusals(sessions: list[SessionRecord]) -> dict[str, tuple[int, BindOutcome]]:
    """Each pod's last refused assignment, unless a later session bound it."""
    last: dict[str, tuple[int, BindOutcome]] = {}
    for record in sessions:
        for outcome in record.binds:
            if outcome.result == "bound":
                last.pop(outcome.pod, None)
            else:
                last[outcome.pod] = (record.number, outcome)
    return last


def _enqueued_in(sessions: list[SessionRecord], podgroup: str) -> int | None:
    return next((r.number for r in sessions if podgroup in r.enqueued), None)


def _pending_reason(
    pod: Mapping[str, Any],
    *,
    scheduler: str,
    ours: str,
    entry: Allocation | None,
    refusal: tuple[int, BindOutcome] | None,
) -> str:
    if scheduler not in (ours, VOLCANO):
        return (
            f"not simulated: schedulerName is {scheduler}; simulate runs Volcano's model ({VOLCANO}) "
            f"and vgpu-guard's controller ({ours})"
        )
    conditions = (pod.get("status") or {}).get("conditions") or []
    scheduled = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
    waits = scheduled is not None and scheduled.get("status") == "False" and scheduled.get("message")
    if refusal is not None:
        number, outcome = refusal
        told = f"vgpu-guard's arbiter refused its assignment to {outcome.node} in Volcano's session {number}"
        if waits and outcome.message in str(scheduled["message"]):  # type: ignore[index]
            return str(scheduled["message"])  # type: ignore[index]
        if waits:
            return f"{scheduled['message']} (after {told})"  # type: ignore[index]
        return f"{told}: {outcome.message}"
    if waits:
        return str(scheduled["message"])  # type: ignore[index]
    if entry is not None:
        return "reserved in the ledger, not bound yet (its gang is still being committed)"
    return f"no decision recorded by {'the controller' if scheduler == ours else 'Volcano'}"


async def run_simulation(
    scenario: Scenario, config: GuardConfig, mode: Mode | None = None
) -> SimulationResult:
    """Run ``scenario`` with ``config`` in ``mode`` (volcano mode unless routing is asked for:
    ``simulation_config``). Raises ``SimulationError`` when the scenario holds something the
    simulated API cannot serve, or a bad ``--volcano-version``."""
    mode = mode or Mode()
    try:
        version = parse_version(mode.volcano_version)
    except ValueError as e:
        raise SimulationError(str(e)) from None
    config, mode_name, note = simulation_config(config, mode)
    run = _Run(config)
    for document in scenario.cluster:
        run.add_state(document)
    for document in scenario.documents:
        if is_cluster_state(document.object):
            run.add_state(document)
    await run.cluster.start()
    try:
        return await _story(run, scenario, config, mode=mode, version=version, mode_name=mode_name, note=note)
    finally:
        await run.cluster.stop()


async def _story(
    run: _Run,
    scenario: Scenario,
    config: GuardConfig,
    *,
    mode: Mode,
    version: VolcanoVersion,
    mode_name: str,
    note: str,
) -> SimulationResult:
    """The scenario's objects through admission, then Volcano and the controller until settled."""
    for document in scenario.documents:
        if not is_cluster_state(document.object):
            await run.add_created(document)
    volcano = VolcanoScheduler(
        run.client(service_account(*VOLCANO_SCHEDULER)),
        config,
        version=version,
        stale_cache=mode.stale_cache,
        clock=run.clock,
    )
    controller = AllocationController(
        run.client(),
        config,
        identity="vgpu-guard-simulate",
        clock=run.clock,
        registry=CollectorRegistry(),
        inputs=run.cluster.inputs,
    )
    passes = await run.settle(volcano, controller)
    view = await run.view()
    pods, gpus = _outcomes(run, view, volcano.sessions)
    return SimulationResult(
        scenario=scenario.source,
        scheduler=config.scheduling.scheduler_name,
        mode=mode_name,
        note=note,
        volcano=VolcanoRun(version, mode.stale_cache, mode.stale_cache_from, tuple(volcano.sessions)),
        admission=run.admission(),
        pods=pods,
        gpus=gpus,
        queues=audit_queues(view, config),
        view=view,
        passes=passes,
        violations=_violations(run, view),
        memory_factor=config.nvidia.gpu_memory_factor,
        warnings=_controller_warnings(run),
    )


def _controller_warnings(run: _Run) -> tuple[str, ...]:
    """The Warning Events of vgpu-guard's controller in the store, once per object and reason (the
    last message), as ``kubectl get events --field-selector type=Warning`` would list them."""
    last: dict[tuple[str, str, str], str] = {}
    for event in run.store.list(EVENTS).items:
        if event.get("type") != "Warning" or event.get("reportingComponent") != "vgpu-guard":
            continue
        involved = event.get("involvedObject") or {}
        name = "/".join(p for p in (involved.get("namespace"), involved.get("name")) if p)
        last[(str(involved.get("kind")), name, str(event.get("reason")))] = str(event.get("message"))
    return tuple(
        f"{kind} {name}: {reason}: {message}" for (kind, name, reason), message in sorted(last.items())
    )


def simulate(scenario: Scenario, config: GuardConfig, mode: Mode | None = None) -> SimulationResult:
    """``run_simulation`` on a fresh event loop, for callers that are not async (the CLI)."""
    return asyncio.run(run_simulation(scenario, config, mode))
