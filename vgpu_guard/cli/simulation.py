"""The whole system on an in-memory cluster: scenario in, outcomes out (``vgpu-guard simulate``).

Nothing here is a model of vgpu-guard: it is vgpu-guard. Objects go through ``review_object``
(the webhook's exact decision code) against a ``ClusterView`` read from the API double, the
admitted (mutated) objects are stored in the double, and the real ``AllocationController`` runs
against it through ``MemoryClusterClient`` until nothing changes. Only two things are stood in for,
both documented where they are: the workload controllers (``workload_pods``) and the device
plugin (``confirm_allocations``).

What a scenario's objects mean:

- the cluster it runs on when not its own (``Scenario.cluster``), every object stored as it is;
- cluster state, stored as they are (they exist before the story starts): Nodes, Namespaces,
  PriorityClasses, HyperNodes, ConfigMaps, and Pods that already have ``spec.nodeName`` (running
  pods, with their assignment annotations; the controller adopts them into the ledger);
- everything else is created in file order through admission: Queues (each sees the ones before
  it), PodGroups, Pods, and workloads, which are admitted as themselves and then expanded into
  pods that are admitted again as their controllers' requests. A denied object is not stored; a
  denied workload creates no pods. Namespaces are created on first use.

Then the controller settles (passes until one changes nothing), the device plugin stand-in
confirms every pod in ``bind-phase=allocating``, and that repeats until neither moves.

Time is a fixed simulated clock that ticks one second per created object, so creation order is
file order and the output never depends on the wall clock; names and UIDs come from a seeded
store. ``run_simulation`` never prints; ``simulate_report`` renders its result.

Exceptions::

    SimulationError            the scenario cannot be simulated (unsupported kind, never settles)
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.apidouble.store import Store
from vgpu_guard.cli.cluster_source import is_cluster_state
from vgpu_guard.cli.documents import Document
from vgpu_guard.cli.scenario import Scenario
from vgpu_guard.cli.workload_pods import expand_workload
from vgpu_guard.controller.allocation import AllocationController
from vgpu_guard.engine.admission import ReviewResult, request_for, review_object
from vgpu_guard.engine.annotations import BIND_PHASE
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.ledger import Allocation, check_invariants, decode_ledger, gpu_usage
from vgpu_guard.engine.rules.queues_validate import QueueAudit, audit_queues
from vgpu_guard.engine.rules.workloads import WORKLOAD_KINDS
from vgpu_guard.kube.client import typed_items
from vgpu_guard.kube.errors import KubeError
from vgpu_guard.kube.resources import (
    CRDS,
    GANG_PLACEMENTS,
    HYPERNODES,
    LEDGERS,
    NAMESPACES,
    NODES,
    PODGROUPS,
    PODS,
    QUEUES,
    Resource,
)

__all__ = [
    "ADMIN",
    "EPOCH",
    "Admitted",
    "DeviceOutcome",
    "GpuOutcome",
    "PodOutcome",
    "SimClock",
    "SimulationError",
    "SimulationResult",
    "confirm_allocations",
    "is_cluster_state",
    "run_simulation",
    "simulate",
    "simulation_config",
]

Obj = dict[str, Any]

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
)
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
class SimulationResult:
    """Everything the report shows; ``view`` is the final cluster, ``queues`` its queue audit."""

    scenario: str
    scheduler: str
    routing: str
    admission: tuple[Admitted, ...]
    pods: tuple[PodOutcome, ...]
    gpus: tuple[GpuOutcome, ...]
    queues: QueueAudit
    view: ClusterView
    passes: int
    # Broken GPU invariants after settling (over capacity, overlapping MIG slots): empty is the point.
    violations: tuple[str, ...] = ()
    memory_factor: int = 1


# The IB cluster label simulate uses when the configuration names none (the ib-gang example's nodes).
SIMULATE_IB_LABEL = "vgpu-guard.io/ib-cluster"


def simulation_config(config: GuardConfig) -> tuple[GuardConfig, str]:
    """Routing on, and IB clusters read from ``vgpu-guard.io/ib-cluster``, unless the configuration
    sets them: the simulated controller only places routed pods, and the stories need IB pinning.

    Returns the config to run and a sentence for the report saying which applies and why.
    """
    scheduling, topology = config.scheduling, config.topology
    name = scheduling.scheduler_name
    notes = []
    if "routing" in scheduling.model_fields_set:
        notes.append(
            f"scheduling.routing is {'on' if scheduling.routing else 'off'} (from the configuration)"
        )
    else:
        config = config.model_copy(update={"scheduling": scheduling.model_copy(update={"routing": True})})
        notes.append(f"scheduling.routing is on (simulate's default): vGPU pods get schedulerName {name}")
    if "ib_cluster_label" not in topology.model_fields_set and topology.hyper_node_tier is None:
        config = config.model_copy(
            update={"topology": topology.model_copy(update={"ib_cluster_label": SIMULATE_IB_LABEL})}
        )
        notes.append(f"IB clusters come from node label {SIMULATE_IB_LABEL} (simulate's default)")
    return config, "; ".join(notes)


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
            text = resources.files("vgpu_guard").joinpath(path).read_text(encoding="utf-8")
            self.store.create(CRDS, yaml.safe_load(text))
        self.admitted: list[Admitted] = []
        # Pods in the order they came to be, with their source; rejected ones with the reason.
        self.order: list[tuple[str, str]] = []
        self.sources: dict[tuple[str, str], str] = {}
        self.rejected: dict[tuple[str, str], tuple[str, str]] = {}  # key -> (reason, scheduler)
        self.existing: set[tuple[str, str]] = set()

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

    def view(self) -> ClusterView:
        """What the webhook's caches would hold now (nodes, queues, podgroups, hypernodes, ledgers,
        gang placements)."""
        # Straight from the store, as a LIST answers: built-in items carry no kind, so they are
        # typed from their resource the way the client adapters type them.
        resources = (NODES, QUEUES, PODGROUPS, HYPERNODES, LEDGERS, GANG_PLACEMENTS)
        objects = [obj for r in resources for obj in typed_items(self.store.list(r).items, r)]
        return ClusterView.from_objects(objects, self.config, source="simulated cluster")

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

    def admit(self, obj: Mapping[str, Any], *, source: str, username: str) -> tuple[ReviewResult, str | None]:
        """Admission, then the store: what ``kubectl create`` does. Returns the result and any API error."""
        result = review_object(request_for(obj, username=username), self.view(), self.config)
        if not result.decision.allowed:
            return result, None
        try:
            # What the webhook does before answering: record a gang's IB cluster (first member).
            for recorded in result.persist:
                self.create(recorded, source)
            self.create(result.object, source)
        except KubeError as e:
            return result, e.message
        return result, None

    def admit_pod(
        self, pod: Mapping[str, Any], *, source: str, username: str, workload: str = ""
    ) -> Admitted:
        result, api_error = self.admit(pod, source=source, username=username)
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

    def add_created(self, document: Document) -> None:
        obj = document.object
        group = str(obj.get("apiVersion") or "").rpartition("/")[0]
        kind = str(obj.get("kind") or "")
        if kind == "Pod":
            self.admitted.append(self.admit_pod(obj, source=document.source, username=ADMIN))
            return
        if (group, kind) not in WORKLOAD_KINDS:
            self.resource_for(obj, document.source)  # fail early, naming the document, if not served
            result, api_error = self.admit(obj, source=document.source, username=ADMIN)
            self.admitted.append(
                Admitted(source=document.source, result=result, username=ADMIN, api_error=api_error)
            )
            return
        result = review_object(request_for(obj, username=ADMIN), self.view(), self.config)
        self.clock.tick()
        if not result.decision.allowed:
            self.admitted.append(Admitted(source=document.source, result=result, username=ADMIN))
            return
        expansion = expand_workload(result.object)
        api_error = None
        if expansion.podgroup is not None:
            # Volcano's job controller creates the PodGroup; no admission webhook of ours sees it.
            try:
                self.create(expansion.podgroup, document.source)
            except KubeError as e:
                api_error = f"PodGroup {expansion.podgroup['metadata']['name']}: {e.message}"
        workload = f"{kind} {_key(obj)[0]}/{_key(obj)[1]}"
        self.admitted.append(
            Admitted(
                source=document.source,
                result=result,
                username=ADMIN,
                api_error=api_error,
                pods=tuple(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in expansion.pods),
                note=expansion.note,
            )
        )
        for pod in expansion.pods:
            self.admitted.append(
                self.admit_pod(
                    pod,
                    source=f"{document.source} ({workload})",
                    username=expansion.username,
                    workload=workload,
                )
            )

    async def settle(self, controller: AllocationController) -> int:
        passes = 0
        for _ in range(_MAX_ROUNDS):
            results = await controller.settle()
            passes += len(results)
            moved = any(r.changed for r in results)
            if confirm_allocations(self.store) == 0 and not moved:
                return passes
        raise SimulationError(f"the cluster did not settle within {_MAX_ROUNDS} rounds of the controller")

    # --- outcomes --------------------------------------------------------------------------------

    def violations(self, view: ClusterView) -> tuple[str, ...]:
        out: list[str] = []
        for obj in self.store.list(LEDGERS).items:
            ledger = decode_ledger(obj)
            info = view.nodes.get(ledger.node)
            if info is not None:
                found = check_invariants(ledger, info, memory_factor=self.config.nvidia.gpu_memory_factor)
                out.extend(v.message for v in found)
        return tuple(out)

    def outcomes(self, view: ClusterView) -> tuple[tuple[PodOutcome, ...], tuple[GpuOutcome, ...]]:
        factor = self.config.nvidia.gpu_memory_factor
        ours = self.config.scheduling.scheduler_name
        ledgers = [decode_ledger(o) for o in self.store.list(LEDGERS).items]
        entries: dict[str, Allocation] = {uid: a for led in ledgers for uid, a in led.allocations.items()}
        stored = {_key(p): p for p in self.store.list(PODS).items}
        pods: list[PodOutcome] = []
        for key in self.order:
            if key in self.rejected:
                reason, scheduler = self.rejected[key]
                pods.append(
                    PodOutcome(
                        namespace=key[0],
                        name=key[1],
                        source=self.sources[key],
                        phase="Rejected",
                        scheduler=scheduler,
                        reason=reason,
                    )
                )
                continue
            pod = stored[key]
            spec = pod.get("spec") or {}
            scheduler = str(spec.get("schedulerName") or "default-scheduler")
            raw_priority = spec.get("priority")
            entry = entries.get(str(_meta(pod).get("uid")))
            node = spec.get("nodeName")
            devices = tuple(
                DeviceOutcome(g.uuid, g.memory, g.cores, g.mig.profile if g.mig else None)
                for g in (entry.grants() if entry is not None and node else ())
            )
            pods.append(
                PodOutcome(
                    namespace=key[0],
                    name=key[1],
                    source=self.sources[key],
                    phase="Bound" if node else "Pending",
                    scheduler=scheduler,
                    node=str(node) if node else None,
                    devices=devices,
                    reason=None
                    if node
                    else _pending_reason(pod, scheduler=scheduler, ours=ours, entry=entry),
                    priority=raw_priority if isinstance(raw_priority, int) else 0,
                    existing=key in self.existing,
                )
            )
        gpus: list[GpuOutcome] = []
        by_node = {led.node: led for led in ledgers}
        for name in sorted(view.nodes):
            info = view.nodes[name]
            ledger = by_node.get(name)
            usage = gpu_usage(ledger.allocations.values()) if ledger else {}
            for gpu in info.gpus:
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
        return tuple(pods), tuple(gpus)


def _pending_reason(pod: Mapping[str, Any], *, scheduler: str, ours: str, entry: Allocation | None) -> str:
    if scheduler != ours:
        return f"not simulated: schedulerName is {scheduler}; simulate runs only {ours}'s allocator"
    conditions = (pod.get("status") or {}).get("conditions") or []
    scheduled = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
    if scheduled is not None and scheduled.get("status") == "False" and scheduled.get("message"):
        return str(scheduled["message"])
    if entry is not None:
        return "reserved in the ledger, not bound yet (its gang is still being committed)"
    return "no decision recorded by the controller"


async def run_simulation(scenario: Scenario, config: GuardConfig) -> SimulationResult:
    """Run ``scenario`` with ``config`` (routing turned on unless it sets it: ``simulation_config``).

    Raises ``SimulationError`` when the scenario holds something the simulated API cannot serve.
    """
    config, routing = simulation_config(config)
    run = _Run(config)
    for document in scenario.cluster:
        run.add_state(document)
    for document in scenario.documents:
        if is_cluster_state(document.object):
            run.add_state(document)
    for document in scenario.documents:
        if not is_cluster_state(document.object):
            run.add_created(document)
    controller = AllocationController(
        MemoryClusterClient(run.store),
        config,
        identity="vgpu-guard-simulate",
        clock=run.clock,
        registry=CollectorRegistry(),
    )
    passes = await run.settle(controller)
    view = run.view()
    pods, gpus = run.outcomes(view)
    return SimulationResult(
        scenario=scenario.source,
        scheduler=config.scheduling.scheduler_name,
        routing=routing,
        admission=tuple(run.admitted),
        pods=pods,
        gpus=gpus,
        queues=audit_queues(view, config),
        view=view,
        passes=passes,
        violations=run.violations(view),
        memory_factor=config.nvidia.gpu_memory_factor,
    )


def simulate(scenario: Scenario, config: GuardConfig) -> SimulationResult:
    """``run_simulation`` on a fresh event loop, for callers that are not async (the CLI)."""
    return asyncio.run(run_simulation(scenario, config))
