"""Who may write a pod's GPU assignment: the allocators and the device plugin, on every path.

Why: the controller and the device plugin read the allocation annotations (``vgpu-ids-new``,
``vgpu-node``, ``bind-phase`` ...) as the truth of which card holds what. A user who can write
them can claim a card's memory for a pod that never went through the allocator, and the ledger
then adopts the claim: an overcommit. Refusing them at pod CREATE is not enough, because the same
annotations reach a pod through

- an UPDATE or PATCH of the pod,
- ``pods/status`` (the status strategy keeps metadata changes, only spec is reset),
- a Binding, through either door: ``pods/binding`` or the legacy ``bindings`` resource (both
  copy the Binding's ``metadata.annotations`` onto the pod at bind),

and a vGPU pod created with ``spec.nodeName`` already set skips the allocator altogether.
``pods/ephemeralcontainers`` is not among them: its strategy resets metadata to the stored pod
(``ResetObjectMetaForStatus``) before admission sees it.

Only identities in ``admission.allocationWriters`` (usernames) or in a group of
``admission.allocationWriterGroups`` may do any of this. These checks run in every namespace,
including ``admission.exemptNamespaces``: an exemption skips policy, never forgery checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vgpu_guard.engine.annotations import ALLOCATION_ANNOTATIONS
from vgpu_guard.engine.assignment_writes import is_binding
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.decision import AdmissionDecision, AdmissionRequest, decision_from
from vgpu_guard.engine.rules.display import show
from vgpu_guard.engine.violations import Violation

__all__ = [
    "ALLOCATION_SUBRESOURCES",
    "admit_allocation_write",
    "allocation_write_violations",
    "carried_allocation_annotations",
    "is_allocation_writer",
    "prebound_violations",
]

# The pod subresources through which allocation annotations can change ("" is the pod itself).
ALLOCATION_SUBRESOURCES = frozenset({"", "status", "binding"})

_WHO = "only the allocator and the device plugin (admission.allocationWriters) write allocation annotations"


def is_allocation_writer(username: str, groups: tuple[str, ...], config: GuardConfig) -> bool:
    """True for the identities allowed to write a pod's GPU assignment."""
    admission = config.admission
    return username in admission.allocation_writers or any(
        group in admission.allocation_writer_groups for group in groups
    )


def carried_allocation_annotations(obj: Mapping[str, Any] | None) -> dict[str, object]:
    """The allocation annotations an object carries (a Pod's, or a Binding's to be copied)."""
    metadata = obj.get("metadata") if obj is not None else None
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    if not isinstance(annotations, Mapping):
        return {}
    return {key: annotations[key] for key in ALLOCATION_ANNOTATIONS if key in annotations}


def _who(username: str) -> str:
    return username or "an unknown user"


def _update_violations(
    old: Mapping[str, Any] | None, new: Mapping[str, Any] | None, *, username: str, where: str
) -> list[Violation]:
    before, after = carried_allocation_annotations(old), carried_allocation_annotations(new)
    out: list[Violation] = []
    for key in ALLOCATION_ANNOTATIONS:
        if before.get(key) == after.get(key):  # unchanged, or absent from both
            continue
        path = f"metadata.annotations[{key}]"
        if key not in before:
            what = f"{show(after[key])} was added by {_who(username)} {where}; {_WHO}, leave it out"
        elif key not in after:
            what = f"{show(before[key])} was removed by {_who(username)} {where}; {_WHO}, keep it"
        else:
            what = (
                f"{show(before[key])} was changed to {show(after[key])} by {_who(username)} {where}; "
                f"{_WHO}, keep {show(before[key])}"
            )
        out.append(Violation("allocation-annotations", path, what))
    return out


def _binding_violations(binding: Mapping[str, Any] | None, *, username: str, pod: str) -> list[Violation]:
    return [
        Violation(
            "allocation-annotations",
            f"metadata.annotations[{key}]",
            f"{show(value)} on a Binding by {_who(username)} would be copied onto pod {pod}; {_WHO}, "
            f"bind without it",
        )
        for key, value in carried_allocation_annotations(binding).items()
    ]


def allocation_write_violations(
    *,
    operation: str,
    sub_resource: str,
    resource: str = "pods",
    obj: Mapping[str, Any] | None,
    old: Mapping[str, Any] | None,
    username: str,
    groups: tuple[str, ...],
    config: GuardConfig,
    pod: str = "",
) -> list[Violation]:
    """Violations of a pod UPDATE, ``pods/status`` UPDATE or a Binding CREATE (either door).

    ``pod`` names the pod (``namespace/name``) for a Binding's message. Pod CREATE is judged by
    ``validate_pod_spec`` (annotations, and ``prebound_violations``), not here.
    """
    binding = is_binding(operation=operation, resource=resource, sub_resource=sub_resource)
    if not binding and (resource != "pods" or sub_resource not in ALLOCATION_SUBRESOURCES):
        return []
    if is_allocation_writer(username, groups, config):
        return []
    if binding:
        return _binding_violations(obj, username=username, pod=pod)
    if operation == "UPDATE":
        where = "through pods/status" if sub_resource == "status" else "on UPDATE"
        return _update_violations(old, obj, username=username, where=where)
    return []


def prebound_violations(
    spec: Mapping[str, Any], *, username: str, groups: tuple[str, ...], config: GuardConfig, prefix: str = ""
) -> list[Violation]:
    """A vGPU pod created with ``spec.nodeName`` set skips the allocator: its GPUs are unrecorded."""
    node = spec.get("nodeName")
    if not node or is_allocation_writer(username, groups, config):
        return []
    return [
        Violation(
            "vgpu-prebound",
            f"{prefix}spec.nodeName",
            f"{show(node)} is set at creation by {_who(username)}, which skips vgpu-guard's allocator and "
            f"leaves the pod's GPUs unrecorded; remove spec.nodeName and choose nodes with nodeSelector "
            f"or affinity",
        )
    ]


def admit_allocation_write(request: AdmissionRequest, config: GuardConfig) -> AdmissionDecision:
    """The handler of the allocation webhook (pod UPDATE, pods/status, a Binding through either door).

    Needs no cluster state, so it answers on an unsynced view too.
    """
    obj = request.object
    name = request.name or _name(obj)
    violations = allocation_write_violations(
        operation=request.operation,
        sub_resource=request.sub_resource,
        resource=request.resource,
        obj=obj,
        old=request.old_object,
        username=request.username,
        groups=request.groups,
        config=config,
        pod=f"{request.namespace}/{name}" if request.namespace else name,
    )
    return decision_from(violations, config, obj=obj)


def _name(obj: Mapping[str, Any] | None) -> str:
    metadata = obj.get("metadata") if obj is not None else None
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) else ""
