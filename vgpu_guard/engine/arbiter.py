"""The ledger arbiter's decision: may this GPU assignment be written, and what does the ledger hold then?

Volcano stays the scheduler; what it writes is arbitrated when it is committed. Which write
commits what (a Binding through either door binds; a PATCH of an unbound pod only proposes; a
PATCH of a bound pod changes) is engine/assignment_writes.py's; this module decides, on the node's
ledger as last read:

- the assignment is decoded exactly as the device plugin reads it (engine/assignment.py), matched
  in order to the pod's vGPU containers; a malformed device, or more entries than vGPU containers,
  is refused (the plugin would hand out something else than the ledger holds);
- **bind**: the entry is reserved. A retry of the same assignment changes nothing (its hold keeps
  the time it began); a second, different Binding of a pod not bound yet holds both (the larger per
  device) until the pod is bound, since either may land: the controller then replaces the entry
  with what the pod was bound with;
- **propose**: checked against the ledger and reserves nothing (a pod with an entry already, whose
  admitted Binding may still land, holds both as for a second Binding);
- **change**: the bound pod's entry is replaced by the new assignment (not handed out yet);
  **raise**: it holds both, the larger per device (its containers keep what they were handed);
- ``check_write`` judges every GPU that gains a grant against the node's registration: memory,
  cores, vGPU count, MIG slices, and devices the node does not register.

**Bounded holds.** An entry reserved at admission whose pod is still unbound was admitted through
a Binding that has not landed (another webhook or the API server refused it). Its Bindings are
re-admitted for ``hold - LANDING_SECONDS`` after the hold began, so every admitted one has landed
or failed by ``hold``; after that the entry has *lapsed*: it counts for nothing and is dropped by
the next write of its node. The pod's own Bindings stay refused while the lapsed entry is there,
until ``RELEASE_HOLDS * hold`` (when the controller releases it): pods that waited for its GPUs
go first, and it holds nothing meanwhile. So a pod whose Bindings never land holds a card at most
``hold`` seconds in all while another waits, however often it is retried (docs/design/ledger.md).

Pure: the shell reads the ledger and the node, and writes the result with compare-and-swap
(vgpu_guard/kube/ledger_writer.py); a conflict re-runs this decision on the fresh ledger.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace

from vgpu_guard.engine.assignment import adopted_allocation, decode_assignment_entries, hold_larger
from vgpu_guard.engine.assignment_writes import RULE, WrittenAssignment
from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.config import NvidiaConfig
from vgpu_guard.engine.ledger import Allocation, LedgerViolation, NodeLedger, check_write, gpu_usage
from vgpu_guard.engine.pod_request import PodRequest
from vgpu_guard.engine.violations import Violation

__all__ = [
    "LANDING_SECONDS",
    "RELEASE_HOLDS",
    "RULE",
    "Holds",
    "Refused",
    "Reserved",
    "WrittenAssignment",
    "arbitrate",
]

_NEXT = "Volcano decides again on its next session"

# How long an admitted Binding may still land after the webhook allowed it: kube-apiserver ends a
# request at --request-timeout (60 s by default), counted from before admission, plus 5 s of clock
# skew between the webhook replicas and the controller.
LANDING_SECONDS = 65
# A lapsed hold's entry stays (counting for nothing) until this many holds after it began: the
# controller releases it then (release_reason), and until then its pod's Bindings are refused, so
# that the pods waiting for its GPUs go first.
RELEASE_HOLDS = 2


@dataclass(frozen=True, slots=True)
class Holds:
    """What bounds an admitted entry whose pod is not bound: ``seconds`` in all
    (``arbiter.unboundReleaseSeconds``), and whether an entry's pod is known to be unbound."""

    seconds: int
    unbound: Callable[[Allocation], bool]

    def age(self, entry: Allocation, now: int) -> int:
        # A reservedAt in the future (a skewed clock or a hand) counts as old: it cannot hold for ever.
        return abs(now - entry.reserved_at)

    def lapsed(self, entry: Allocation, now: int) -> bool:
        """An admitted entry of an unbound pod whose hold ran out: no Binding admitted for it can
        still land, so it holds nothing."""
        return entry.admitted and self.age(entry, now) >= self.seconds and self.unbound(entry)


NO_HOLDS = Holds(seconds=2**62, unbound=lambda _entry: False)


@dataclass(frozen=True, slots=True)
class Reserved:
    """The write may go ahead once ``ledger`` is written (``None``: nothing to write, as when the
    ledger already holds it or the write only proposes)."""

    entry: Allocation
    ledger: NodeLedger | None
    # Lapsed holds this write drops (other pods' Bindings that never landed), for the audit log.
    dropped: tuple[Allocation, ...] = ()


@dataclass(frozen=True, slots=True)
class Refused:
    """The write must be denied: one violation per GPU (or per malformed entry)."""

    violations: tuple[Violation, ...]


def _path(written: WrittenAssignment) -> str:
    return f"metadata.annotations[{written.key}]"


def _refused(written: WrittenAssignment, *messages: str) -> Refused:
    return Refused(tuple(Violation(RULE, _path(written), m) for m in messages))


def _holders(pods: list[str]) -> str:
    """The pods holding a GPU, by name (not ledger order, which is the order writes landed in), a
    pod once however many of its containers are on the card. One with several says so: Volcano
    1.12.x and >= 1.15.0 count a pod's use of a card once (``GPUDevices.addResource`` ->
    ``Sharing.AddPod`` returns early for a pod already in the card's ``PodMap``; pkg/scheduler/api/
    devices/nvidia/vgpu/device_info.go, hamicore.go; 1.13-1.14's hami-core counts every container),
    so it thinks the rest free and may keep choosing the card."""
    counts = Counter(pods)
    named = [
        f"{p} ({n} containers, counted once by Volcano 1.12, >= 1.15)" if n > 1 else p
        for p, n in sorted(counts.items())
    ]
    shown = ", ".join(named[:4])
    return shown + (f" and {len(named) - 4} more" if len(named) > 4 else "")


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


def _retry_closed(
    written: WrittenAssignment, entry: Allocation, *, holds: Holds, now: int, pod: str
) -> Refused:
    """A pod's Bindings were admitted and never landed, and its hold is past the time a newly
    admitted one could still land within it: refused until the hold lapses."""
    since = holds.age(entry, now)
    left = max(1, holds.seconds - since)
    return _refused(
        written,
        f"pod {pod} has held its GPUs on node {written.node} for {since} s through Bindings that were "
        f"admitted but never landed (another admission webhook or the API server refused them); the hold "
        f"ends in {left} s (arbiter.unboundReleaseSeconds {holds.seconds}) so that pods waiting for these "
        f"GPUs go first, and the pod may be bound after that; {_NEXT}",
    )


def _waiters_first(
    written: WrittenAssignment, entry: Allocation, *, holds: Holds, now: int, pod: str
) -> Refused:
    """The pod's hold lapsed (its Bindings never landed): others go first until it is released."""
    left = max(1, RELEASE_HOLDS * holds.seconds - holds.age(entry, now))
    return _refused(
        written,
        f"pod {pod} held its GPUs on node {written.node} for {holds.seconds} s "
        "(arbiter.unboundReleaseSeconds) through Bindings that were admitted but never landed (another "
        "admission webhook or the API server refused them); pods waiting for these GPUs go first for "
        f"{left} s more, and the pod may be bound after that; {_NEXT}",
    )


def _decoded_entry(
    written: WrittenAssignment, pod: PodRequest, *, queue: str, node: NodeInfo, now: int, nvidia: NvidiaConfig
) -> Allocation | Refused:
    """The entry the assignment makes, decoded as the plugin reads it, or why it cannot be held."""
    adoption = adopted_allocation(pod, written.raw, queue=queue, node=node, nvidia=nvidia)
    if adoption.invalid or not adoption.allocation.containers:
        found = adoption.invalid or ["it names no device"]
        return _refused(
            written,
            *(
                f"{problem} in the {written.via} of pod {pod.key}; the device plugin would hand out "
                f"something else than vgpu-guard can hold, so it is refused; {_NEXT}"
                for problem in found
            ),
        )
    return replace(adoption.allocation, adopted=False, admitted=True, reserved_at=now)


def _with_entry(
    written: WrittenAssignment,
    entry: Allocation,
    existing: Allocation | None,
    *,
    holds: Holds,
    now: int,
    nvidia: NvidiaConfig,
) -> Allocation | Refused | None:
    """The pod's entry after this write (None: the ledger already holds it, nothing to write)."""
    if existing is None or written.effect == "change":
        return entry if existing is None or existing.containers != entry.containers else None
    if written.effect == "raise":
        merged, findings = hold_larger(
            existing,
            decode_assignment_entries(written.raw).containers,
            memory_factor=nvidia.gpu_memory_factor,
        )
        return merged if findings else None
    retry = written.effect == "bind" and existing.admitted and holds.unbound(existing)
    if retry and holds.age(existing, now) >= holds.seconds - LANDING_SECONDS:
        return _retry_closed(written, existing, holds=holds, now=now, pod=entry.key)
    # Both may land (a Binding in flight and this one): hold the larger of the two per device, in
    # the hold that began first; once the pod is bound the controller replaces it with what it got.
    decoded = decode_assignment_entries(written.raw).containers
    merged, findings = hold_larger(existing, decoded, memory_factor=nvidia.gpu_memory_factor)
    return merged if findings else None


def arbitrate(
    written: WrittenAssignment,
    pod: PodRequest,
    *,
    ledger: NodeLedger,
    node: NodeInfo | None,
    queue: str,
    now: int,
    nvidia: NvidiaConfig,
    holds: Holds = NO_HOLDS,
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
    entry = _decoded_entry(written, pod, queue=queue, node=node, now=now, nvidia=nvidia)
    if isinstance(entry, Refused):
        return entry
    own = ledger.allocations.get(pod.uid)
    lapsed = own is not None and written.effect == "bind" and holds.lapsed(own, now)
    if own is not None and lapsed and holds.age(own, now) < RELEASE_HOLDS * holds.seconds:
        return _waiters_first(written, own, holds=holds, now=now, pod=key)
    # Lapsed holds count for nothing and go with this write (no Binding admitted for them can
    # still land); the pod's own, once released, starts anew.
    held = ledger
    for uid in [uid for uid, a in ledger.allocations.items() if holds.lapsed(a, now)]:
        held = held.without(uid)
    existing = held.allocations.get(pod.uid)
    target = _with_entry(written, entry, existing, holds=holds, now=now, nvidia=nvidia)
    if isinstance(target, Refused):
        return target
    if target is None:
        return Reserved(existing or entry, None)
    after = held.without(pod.uid).with_allocation(target)
    problems = check_write(held, after, node, memory_factor=nvidia.gpu_memory_factor)
    if problems:
        factor = nvidia.gpu_memory_factor
        lines = dict.fromkeys(
            _gpu_line(p, before=held, entry=target, node=node, factor=factor, pod=key) for p in problems
        )
        return _refused(written, *lines)
    if written.effect == "propose" and existing is None:
        return Reserved(target, None)  # fits now; reserved when the pod is bound with it
    dropped = tuple(
        a for uid, a in ledger.allocations.items() if uid not in held.allocations and uid != pod.uid
    )
    return Reserved(target, after, dropped)
