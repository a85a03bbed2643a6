"""A PodGroup's pending members placed in one decision: all that fit, if that reaches minMember.

Volcano's gang plugin starts a job only when minMember of its tasks can run (JobReady); a gang
bound half-way holds GPUs it cannot use while its other members wait. So the members are placed
one after another on one allocator state, each seeing the ones before it, and every placement is
rolled back when fewer than minMember could run; each member then gets one message naming the
first member that did not fit and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from vgpu_guard.engine.ledger import Allocation
from vgpu_guard.engine.placement_reason import judged_after
from vgpu_guard.engine.placements import GangOutcome, Placement, Unplaceable
from vgpu_guard.engine.pod_request import PodRequest

__all__ = ["GangPlacer", "place_gang"]


class GangPlacer(Protocol):
    """What gang placement needs of the allocator: decide, apply, undo, look up."""

    def place(self, pod: PodRequest, *, now: int = 0) -> Placement | Unplaceable: ...

    def commit(self, placement: Placement) -> None: ...

    def release(self, pod_uid: str) -> Allocation | None: ...

    def allocation_of(self, pod_uid: str) -> tuple[str, Allocation] | None: ...


def place_gang(
    allocator: GangPlacer, members: Sequence[PodRequest], *, min_member: int, running: int, now: int
) -> GangOutcome:
    """Place the members in priority/creation order; keep them only if minMember can run.

    ``running`` counts members already bound (they hold entries or whole cards elsewhere).
    Reservations members held from an earlier pass are released too when the gang cannot start
    (listed in ``released``: the caller removes them from the ledgers).
    """
    ordered = sorted(members, key=lambda p: p.order)
    placed: list[Placement] = []
    failures: list[Unplaceable] = []
    reserved = {pod.uid for pod in ordered if allocator.allocation_of(pod.uid) is not None}
    # The members the first failure was judged after that the ledger does not hold yet.
    tentative: list[str] = []
    for pod in ordered:
        result = allocator.place(pod, now=now)
        if isinstance(result, Placement):
            allocator.commit(result)
            placed.append(result)
        else:
            if not failures:
                tentative = [
                    p.pod.name for p in placed if p.pod.uid not in reserved and not p.allocation.committed
                ]
            failures.append(result)
    ready = running + len(placed)
    if ready >= min_member:
        return GangOutcome(placements=tuple(placed), failures=tuple(failures), ok=True)
    released = []
    for placement in placed:
        if placement.allocation.committed:
            continue  # about to be bound by some replica: only the pod's end releases it
        allocator.release(placement.pod.uid)
        if placement.pod.uid in reserved:
            released.append(placement.pod.uid)
    message = _refusal(ordered[0], ready, min_member, failures[0] if failures else None, tentative)
    return GangOutcome(
        failures=tuple(Unplaceable(pod=p, message=message, cause="gang") for p in ordered),
        released=tuple(released),
    )


def _refusal(
    first: PodRequest, ready: int, min_member: int, blocker: Unplaceable | None, tentative: list[str]
) -> str:
    """One message for every member, naming the first member that does not fit and why."""
    group = f"{first.namespace}/{first.group}" if first.group else first.key
    message = f"gang {group}: only {ready} of {min_member} members can run (minMember {min_member})"
    if blocker is not None:
        message += f"; {judged_after(blocker.pod.name, tentative)}: {blocker.message}"
    return message
