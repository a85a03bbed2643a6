"""The ledger arbiter's decision: may this GPU assignment be written, and what does the ledger hold then?

Volcano stays the scheduler; what it writes is arbitrated at the moment it is written. Volcano
>= 1.16 carries a pod's assignment on the ``pods/binding`` Binding (the predicates plugin merges
``vgpu-node``, ``vgpu-ids-new``, ``devices-to-allocate``, ``bind-phase``, ``bind-time`` and
``vgpu-time`` into the task's annotations and ``DefaultBinder.Bind`` sends them: volcano
pkg/scheduler/api/devices/nvidia/vgpu/device_info.go, pkg/scheduler/cache/cache.go); Volcano
1.10-1.15 PATCHes them onto the pod first and binds plainly after. Either way the write passes the
allocation webhook, which asks this module whether the node's ledger can take the assignment:

- the assignment is decoded exactly as the device plugin reads it (engine/assignment.py), matched
  in order to the pod's vGPU containers; a malformed device, or more entries than vGPU containers,
  is refused (the plugin would hand out something else than the ledger holds);
- a pod's earlier entry on that node is never replaced, only raised to hold both (the larger per
  device): the earlier assignment may have reached the pod (a second binder, a bind whose answer
  was lost), and what was handed out stays held until the pod ends;
- ``check_write`` judges every GPU that gains a grant against the node's registration: memory,
  cores, vGPU count, MIG slices, and devices the node does not register.

Pure: the shell reads the ledger and the node, and writes the result with compare-and-swap
(vgpu_guard/kube/ledger_writer.py); a conflict re-runs this decision on the fresh ledger.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from vgpu_guard.engine.annotations import DEVICES_TO_ALLOCATE, VGPU_IDS, VGPU_NODE
from vgpu_guard.engine.assignment import adopted_allocation, decode_assignment_entries, hold_larger
from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.config import NvidiaConfig
from vgpu_guard.engine.ledger import Allocation, LedgerViolation, NodeLedger, check_write, gpu_usage
from vgpu_guard.engine.pod_request import PodRequest
from vgpu_guard.engine.violations import Violation

__all__ = [
    "RULE",
    "Refused",
    "Reserved",
    "WrittenAssignment",
    "arbitrate",
    "written_assignment",
]

RULE = "vgpu-assignment-capacity"
_NEXT = "Volcano decides again on its next session"


@dataclass(frozen=True, slots=True)
class WrittenAssignment:
    """A GPU assignment an allocation writer is about to write onto a pod."""

    node: str
    raw: str
    # The annotation it came in (for the field path of a refusal).
    key: str
    # Where the write comes from, for messages: "Binding" or "pod update".
    via: str


@dataclass(frozen=True, slots=True)
class Reserved:
    """The write may go ahead once ``ledger`` is written (``None``: the ledger already holds it)."""

    entry: Allocation
    ledger: NodeLedger | None


@dataclass(frozen=True, slots=True)
class Refused:
    """The write must be denied: one violation per GPU (or per malformed entry)."""

    violations: tuple[Violation, ...]


def _annotations(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    metadata = obj.get("metadata") if obj is not None else None
    notes = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    return notes if isinstance(notes, Mapping) else {}


def _assignment_of(notes: Mapping[str, Any]) -> tuple[str, str] | None:
    """(annotation key, value) of the assignment a writer sets: ``vgpu-ids-new``, else
    ``devices-to-allocate`` (the device plugin consumes the latter; both carry the same value
    when Volcano writes them)."""
    for key in (VGPU_IDS, DEVICES_TO_ALLOCATE):
        value = notes.get(key)
        if isinstance(value, str) and value.strip():
            return key, value
    return None


def written_assignment(
    *,
    operation: str,
    sub_resource: str,
    obj: Mapping[str, Any] | None,
    old: Mapping[str, Any] | None,
) -> WrittenAssignment | None:
    """The assignment this write carries onto the pod, or None when it writes none.

    A Binding (``pods/binding`` CREATE) that carries one is always arbitrated: its annotations are
    copied onto the pod with the node. A pod UPDATE (or ``pods/status``) is arbitrated when it adds
    or changes ``vgpu-ids-new``; the device plugin consuming ``devices-to-allocate`` container by
    container, or confirming ``bind-phase``, changes no assignment and passes untouched.
    """
    if sub_resource == "binding" and operation == "CREATE":
        found = _assignment_of(_annotations(obj))
        if found is None:
            return None
        target = obj.get("target") if obj is not None else None
        node = target.get("name") if isinstance(target, Mapping) else None
        return WrittenAssignment(node=str(node or ""), raw=found[1], key=found[0], via="Binding")
    if operation != "UPDATE" or sub_resource not in ("", "status"):
        return None
    before, after = _annotations(old), _annotations(obj)
    raw = after.get(VGPU_IDS)
    if not isinstance(raw, str) or not raw.strip() or raw == before.get(VGPU_IDS):
        return None
    # A pod already bound is judged on its node, whatever vgpu-node the update claims.
    spec = old.get("spec") if old is not None else None
    node = (spec.get("nodeName") if isinstance(spec, Mapping) else None) or after.get(VGPU_NODE)
    return WrittenAssignment(node=str(node or ""), raw=raw, key=VGPU_IDS, via="pod update")


def _path(written: WrittenAssignment) -> str:
    return f"metadata.annotations[{written.key}]"


def _refused(written: WrittenAssignment, *messages: str) -> Refused:
    return Refused(tuple(Violation(RULE, _path(written), m) for m in messages))


def _holders(pods: list[str]) -> str:
    """The pods holding a GPU, by name (not ledger order, which is the order writes landed in)."""
    pods = sorted(pods)
    shown = ", ".join(pods[:4])
    return shown + (f" and {len(pods) - 4} more" if len(pods) > 4 else "")


def _gpu_line(
    problem: LedgerViolation, *, before: NodeLedger, entry: Allocation, node: NodeInfo, factor: int, pod: str
) -> str:
    """One GPU's refusal: what is free, what was asked, who holds it, what happens next."""
    others = gpu_usage(a for uid, a in before.allocations.items() if uid != entry.pod_uid).get(problem.gpu)
    held = f" (held by {_holders(others.pods)})" if others is not None and others.pods else ""
    asked = [g for g in entry.grants() if g.uuid == problem.gpu]
    card = next((g for g in node.gpus if g.uuid == problem.gpu), None)
    lead = f"GPU {problem.gpu} on node {node.name}"
    if card is None or problem.kind == "unknown-gpu":
        why = f"{lead} is not registered on the node ({len(node.gpus)} GPUs are)"
    elif problem.kind == "memory":
        used = others.memory if others is not None else 0
        capacity = card.memory * factor
        why = (
            f"{lead} has {max(0, capacity - used)} MiB free of {capacity} MiB, "
            f"{sum(g.memory for g in asked)} MiB asked{held}"
        )
    elif problem.kind == "cores":
        used = others.cores if others is not None else 0
        why = f"{lead} has {max(0, 100 - used)}% cores free, {sum(g.cores for g in asked)}% asked{held}"
    elif problem.kind == "pods":
        used = others.grants if others is not None else 0
        why = f"{lead} holds {used} of its {card.split_count} vGPUs, {len(asked)} more asked{held}"
    else:  # mig, duplicate-device
        why = problem.message + held
    return f"{why}; the assignment of pod {pod} is refused before it lands, and {_NEXT}"


def arbitrate(
    written: WrittenAssignment,
    pod: PodRequest,
    *,
    ledger: NodeLedger,
    node: NodeInfo | None,
    queue: str,
    now: int,
    nvidia: NvidiaConfig,
) -> Reserved | Refused:
    """Decide ``written`` for ``pod`` against the node's ``ledger`` as last read (see the module doc)."""
    key = pod.key
    if node is None or not node.gpus:
        why = node.gpu_problem if node is not None and node.gpu_problem else "registers no vGPU devices"
        return _refused(
            written,
            f"node {written.node or '(none)'} {why}; the assignment of pod {key} is refused before it "
            f"lands, and {_NEXT}",
        )
    adoption = adopted_allocation(pod, written.raw, queue=queue, node=node, nvidia=nvidia)
    if adoption.invalid or not adoption.allocation.containers:
        found = adoption.invalid or ["it names no device"]
        return _refused(
            written,
            *(
                f"{problem} in the {written.via} of pod {key}; the device plugin would hand out something "
                f"else than vgpu-guard can hold, so it is refused; {_NEXT}"
                for problem in found
            ),
        )
    entry = replace(adoption.allocation, adopted=False, admitted=True, reserved_at=now)
    existing = ledger.allocations.get(pod.uid)
    if existing is not None:
        # Never replaced, only raised: the pod may already be bound with the earlier assignment (a
        # second binder, or a bind that failed on its way back), and what was handed out stays
        # held until the pod ends. Our own controller's committed entry matches and passes as is.
        decoded = decode_assignment_entries(written.raw).containers
        merged, findings = hold_larger(existing, decoded, memory_factor=nvidia.gpu_memory_factor)
        if not findings:
            return Reserved(existing, None)
        entry = merged
    after = ledger.without(pod.uid).with_allocation(entry)
    problems = check_write(ledger, after, node, memory_factor=nvidia.gpu_memory_factor)
    if problems:
        factor = nvidia.gpu_memory_factor
        lines = dict.fromkeys(
            _gpu_line(p, before=ledger, entry=entry, node=node, factor=factor, pod=key) for p in problems
        )
        return _refused(written, *lines)
    return Reserved(entry, after)
