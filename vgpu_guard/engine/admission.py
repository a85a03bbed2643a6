"""Admission decisions: one entry point for the webhook, ``review`` and ``simulate``.

``decide(request, view, config)`` routes an ``AdmissionRequest`` to the rules of its resource and
phase (mutate or validate), applies each rule's configured action (enforce -> deny, warn -> admission
warning, audit -> recorded only) and returns an ``AdmissionDecision``.

``admission_sequence`` is what kube-apiserver does around our two webhook calls: its defaulting,
the mutating call, the validating call on the mutated object, the warnings of both joined and
clipped. It is the only copy: ``simulate`` runs it over the webhook's own route function
(cli/admission_chain.py), ``review_object`` over the offline decision (the container cap, then
``decide``), so ``review`` and ``simulate`` (and so ``serve``) cannot disagree on the order. The
request and decision types, and the turning of violations into a decision, live in
``engine.decision``: the rules import them from there.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.decision import (
    AdmissionDecision,
    AdmissionRequest,
    Operation,
    decision_from,
    not_synced,
)
from vgpu_guard.engine.gang import decide_gang, gang_of, ib_enabled
from vgpu_guard.engine.object_size import too_large
from vgpu_guard.engine.patch import MISSING, apply_ops, diff, value_at
from vgpu_guard.engine.rules.fleet import fleet_config
from vgpu_guard.engine.rules.pods_mutate import normalise_pod, vgpu_gang
from vgpu_guard.engine.rules.pods_validate import validate_pod_spec
from vgpu_guard.engine.rules.queues_validate import admit_queue, admit_queue_delete
from vgpu_guard.engine.rules.workloads import WORKLOAD_KINDS, validate_workload
from vgpu_guard.engine.synchronous import run_without_suspending
from vgpu_guard.engine.topology import stamp_cluster
from vgpu_guard.engine.vgpu_request import requests_vgpu
from vgpu_guard.engine.violations import clip_warnings

__all__ = [
    "KIND_RESOURCES",
    "WORKLOAD_RESOURCES",
    "DecidePhase",
    "Handler",
    "Phase",
    "ReviewResult",
    "admission_sequence",
    "decide",
    "register",
    "request_for",
    "review_object",
    "server_defaults",
    "too_many_containers",
]

Phase = Literal["mutate", "validate"]


def _has_vgpu(pod: Mapping[str, Any], config: GuardConfig) -> bool:
    spec = pod.get("spec")
    return isinstance(spec, Mapping) and requests_vgpu(spec, config.nvidia)


def _mutate_pod(request: AdmissionRequest, view: ClusterView, config: GuardConfig) -> AdmissionDecision:
    pod = request.object or {}
    gang = ib_enabled(config) and gang_of(pod) is not None
    routed = config.scheduling.routing and vgpu_gang(pod, view, config) is not None
    if not _has_vgpu(pod, config) and not gang and not routed:
        return AdmissionDecision(allowed=True, object=pod)
    work, warnings = normalise_pod(pod, view, config)
    persist: tuple[Mapping[str, Any], ...] = ()
    decision = decide_gang(work, view=view, config=config) if gang else None
    if decision is not None:
        if decision.violation is not None:
            denied = decision_from(
                [decision.violation], config, warnings=[*warnings, *decision.warnings], obj=work
            )
            if not denied.allowed:
                return denied
            warnings = list(denied.warnings)
        elif decision.cluster is None or stamp_cluster(work, decision.cluster, decision.clusters):
            # The gang's notes go with a change (or with leaving it unpinned): a reinvocation on an
            # already stamped pod stays silent.
            warnings.extend(decision.warnings)
        persist = (decision.persist,) if decision.persist is not None else ()
    patch = diff(pod, work)
    if not _validate_pod(replace(request, object=work), view, config).allowed:
        # The validating webhook denies this pod: kubectl would print our notes about changes to
        # an object that is never created, without naming it, above the denial. The denial says
        # what to fix; nothing is recorded for a gang whose member is refused.
        warnings, persist = [], ()
    return AdmissionDecision(
        allowed=True,
        warnings=tuple(clip_warnings(warnings)),
        patch=tuple(patch),
        object=work,
        persist=persist,
    )


def _mutate_pod_update(
    request: AdmissionRequest, view: ClusterView, config: GuardConfig
) -> AdmissionDecision:
    """Keep a re-applied pod file from failing on the fields our CREATE mutation changed.

    ``kubectl apply`` of an unchanged file sends back every field of the file that differs from
    the live pod: the MIG-rounded ``vgpu-memory``, a limit copied from requests, a default, the
    routed ``schedulerName``. A pod's spec is immutable, so the update failed with "pod updates may
    not change fields". The file's spec is normalised exactly as at CREATE; when that gives the
    stored value back, that value is kept (the update is a no-op for it). A real change (an image)
    is left as written, for the API server to judge: this never makes an update do more.
    """
    new, old = request.object or {}, request.old_object or {}
    if not isinstance(old.get("spec"), Mapping) or new.get("spec") == old.get("spec"):
        return AdmissionDecision(allowed=True, object=new)
    created = _mutate_pod(replace(request, operation="CREATE", dry_run=True), view, config)
    if not created.allowed or created.object is None:
        return AdmissionDecision(allowed=True, object=new)
    # Only what normalising puts back to the stored value: a real change (an image) stays as
    # written, and a normalisation that would now differ from creation time is not applied.
    kept = [
        op
        for op in diff(new, created.object)
        if op["path"].startswith("/spec/")
        and value_at(old, op["path"]) == (MISSING if op["op"] == "remove" else op["value"])
    ]
    if not kept:
        return AdmissionDecision(allowed=True, object=new)
    return AdmissionDecision(allowed=True, patch=tuple(kept), object=apply_ops(new, kept))


def _mutate_pod_any(request: AdmissionRequest, view: ClusterView, config: GuardConfig) -> AdmissionDecision:
    if request.operation == "UPDATE":
        return _mutate_pod_update(request, view, config)
    return _mutate_pod(request, view, config)


def _validate_pod(request: AdmissionRequest, view: ClusterView, config: GuardConfig) -> AdmissionDecision:
    pod = request.object or {}
    if _has_vgpu(pod, config) and not view.synced:
        return not_synced("nodes")
    violations = validate_pod_spec(pod, view, config, username=request.username, groups=request.groups)
    # On a fleet that can grow, capacity rules default to warn (engine/rules/fleet.py).
    return decision_from(violations, fleet_config(config, view), obj=pod)


def _validate_workload(
    request: AdmissionRequest, view: ClusterView, config: GuardConfig
) -> AdmissionDecision:
    obj = request.object or {}
    violations = validate_workload(
        obj,
        view,
        config,
        username=request.username,
        groups=request.groups,
        cluster_checks=view.synced,
        creating=request.operation == "CREATE",
    )
    return decision_from(violations, fleet_config(config, view), obj=obj)


Handler = Callable[[AdmissionRequest, ClusterView, GuardConfig], AdmissionDecision]

# (phase, group, resource) -> handler, and the operations each handles.
_HANDLERS: dict[tuple[Phase, str, str], tuple[Handler, frozenset[str]]] = {
    ("mutate", "", "pods"): (_mutate_pod_any, frozenset({"CREATE", "UPDATE"})),
    ("validate", "", "pods"): (_validate_pod, frozenset({"CREATE"})),
}
_PLURALS = {
    "Deployment": "deployments",
    "StatefulSet": "statefulsets",
    "ReplicaSet": "replicasets",
    "DaemonSet": "daemonsets",
    "Job": "jobs",
    "CronJob": "cronjobs",
}
for _group, _kind in WORKLOAD_KINDS:
    _HANDLERS[("validate", _group, _PLURALS[_kind])] = (_validate_workload, frozenset({"CREATE", "UPDATE"}))


# The (group, resource) pairs of workloads whose pod templates are validated.
WORKLOAD_RESOURCES = frozenset((group, _PLURALS[kind]) for (group, kind) in WORKLOAD_KINDS)

# (group, kind) -> resource plural, for objects that arrive as files rather than AdmissionReviews.
KIND_RESOURCES: dict[tuple[str, str], str] = {
    ("", "Pod"): "pods",
    ("scheduling.volcano.sh", "Queue"): "queues",
    **{(group, kind): _PLURALS[kind] for (group, kind) in WORKLOAD_KINDS},
}


def request_for(
    obj: Mapping[str, Any],
    *,
    username: str,
    operation: Operation = "CREATE",
    old: Mapping[str, Any] | None = None,
    dry_run: bool = False,
) -> AdmissionRequest:
    """The AdmissionRequest the API server would send for ``obj`` (offline review, simulate)."""
    api_version = str(obj.get("apiVersion") or "")
    group = api_version.rpartition("/")[0]
    kind = str(obj.get("kind") or "")
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(metadata, Mapping)
    resource = KIND_RESOURCES.get((group, kind), kind.lower() + "s")
    namespace = "" if resource == "queues" else str(metadata.get("namespace") or "default")
    return AdmissionRequest(
        kind=kind,
        group=group,
        resource=resource,
        operation=operation,
        object=obj,
        old_object=old,
        namespace=namespace,
        name=str(metadata.get("name") or metadata.get("generateName") or ""),
        username=username,
        dry_run=dry_run,
    )


def register(
    phase: Phase, group: str, resource: str, *, handler: Handler, operations: frozenset[str]
) -> None:
    """Add a resource's rules (used by the rule modules of later features at import time)."""
    _HANDLERS[(phase, group, resource)] = (handler, operations)


def _admit_queue_any(request: AdmissionRequest, view: ClusterView, config: GuardConfig) -> AdmissionDecision:
    if request.operation == "DELETE":
        return admit_queue_delete(request, view, config)
    return admit_queue(request, view, config)


register(
    "validate",
    "scheduling.volcano.sh",
    "queues",
    handler=_admit_queue_any,
    operations=frozenset({"CREATE", "UPDATE", "DELETE"}),
)


def decide(
    request: AdmissionRequest, view: ClusterView, config: GuardConfig, *, phase: Phase
) -> AdmissionDecision:
    """Decide one admission request; requests we do not handle are allowed untouched."""
    entry = _HANDLERS.get((phase, request.group, request.resource))
    if entry is None or request.operation not in entry[1] or request.sub_resource:
        return AdmissionDecision(allowed=True, object=request.object)
    handler, _ = entry
    return handler(request, view, config)


@dataclass(frozen=True)
class ReviewResult:
    """Both phases for one object, as ``review`` and ``simulate`` report it."""

    decision: AdmissionDecision
    patch: tuple[dict[str, Any], ...]
    warnings: tuple[str, ...]
    object: Mapping[str, Any]
    # What the mutating call recorded (a gang's GangPlacement). ``serve`` creates it through the
    # API before answering, so it exists whatever the validating call then says; offline callers
    # add it to their view (cli/review.py), as ``simulate``'s call has created it.
    persist: tuple[Mapping[str, Any], ...] = ()


def server_defaults(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The API server's defaulting that happens before admission and matters to our rules.

    A container that sets only ``limits`` of a resource gets equal ``requests``
    (pkg/apis/core/v1/defaults.go SetDefaults_Pod). ``admission_sequence`` applies it so that what
    ``review`` and ``simulate`` report is what the webhook would see in a cluster.
    """
    if obj.get("kind") != "Pod" or not isinstance(obj.get("spec"), Mapping):
        return obj
    out = copy.deepcopy(dict(obj))
    for list_name in ("initContainers", "containers"):
        containers = out["spec"].get(list_name)
        for container in containers if isinstance(containers, list) else []:
            resources = container.get("resources") if isinstance(container, dict) else None
            if not isinstance(resources, dict) or not isinstance(resources.get("limits"), dict):
                continue
            requests = resources.setdefault("requests", {})
            if isinstance(requests, dict):
                for name, value in resources["limits"].items():
                    requests.setdefault(name, value)
    return out


def too_many_containers(obj: Mapping[str, Any] | None, limit: int) -> AdmissionDecision | None:
    """The webhook's first check, before any rule (422: the object, not the policy, is at fault)."""
    message = too_large(obj, limit)
    if message is None:
        return None
    return AdmissionDecision(allowed=False, code=422, message=message, rules=("object-too-large",))


# One webhook call: the decision for ``request`` in ``phase``, awaited as the API server awaits it.
DecidePhase = Callable[[AdmissionRequest, Phase], Awaitable[AdmissionDecision]]


async def admission_sequence(request: AdmissionRequest, decide_phase: DecidePhase) -> ReviewResult:
    """What kube-apiserver does with a write before storing it, around our two webhook calls.

    Its defaulting (``server_defaults``), then the mutating call; a denial ends it there. Then the
    validating call on the mutated object, and the warnings of both answers joined and clipped as
    it returns them. What the mutating call recorded is kept even when validation denies: in a
    cluster it was created before the validating call was made.
    """
    if request.object is not None:
        request = replace(request, object=server_defaults(request.object))
    mutated = await decide_phase(request, "mutate")
    obj = mutated.object if mutated.object is not None else (request.object or {})
    if not mutated.allowed:
        return ReviewResult(decision=mutated, patch=(), warnings=mutated.warnings, object=obj)
    validated = await decide_phase(replace(request, object=obj), "validate")
    warnings = tuple(clip_warnings([*mutated.warnings, *validated.warnings]))
    return ReviewResult(
        decision=validated, patch=mutated.patch, warnings=warnings, object=obj, persist=mutated.persist
    )


def _offline(view: ClusterView, config: GuardConfig) -> DecidePhase:
    """The webhook's call without its API: the container cap, then the rules on ``view``. What a
    decision must record is left in its ``persist`` (nothing is created), for the caller's view."""

    async def decide_phase(request: AdmissionRequest, phase: Phase) -> AdmissionDecision:
        capped = too_many_containers(request.object, config.webhook.max_containers)
        return capped if capped is not None else decide(request, view, config, phase=phase)

    return decide_phase


def review_object(request: AdmissionRequest, view: ClusterView, config: GuardConfig) -> ReviewResult:
    """``admission_sequence`` offline, on ``view``: what ``serve`` and ``simulate`` answer for
    ``request`` when their caches hold ``view`` (and the API reads nothing else)."""
    return run_without_suspending(admission_sequence(request, _offline(view, config)))
