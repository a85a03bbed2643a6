"""What a placement decision returns: where a pod goes, why it cannot go anywhere, a gang's result.

Values only, so the allocator's parts (search, gang placement) and its callers (controller,
simulate, the webhook's gang checks) share them without importing the allocator itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from vgpu_guard.engine.ledger import Allocation
from vgpu_guard.engine.pod_request import PodRequest

__all__ = ["GangOutcome", "Placement", "Unplaceable"]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a pod goes and what it holds there (not yet in any ledger until committed)."""

    pod: PodRequest
    node: str
    allocation: Allocation


@dataclass(frozen=True, slots=True)
class Unplaceable:
    """Why a pod cannot be placed now; ``message`` is the user-facing condition message."""

    pod: PodRequest
    message: str
    # capacity: no node fits; queue: the queue refuses; gang: the group cannot start together;
    # unsupported: the pod uses what only kube-scheduler evaluates, so it is never bound here.
    cause: Literal["capacity", "queue", "gang", "unsupported"] = "capacity"


@dataclass(frozen=True, slots=True)
class GangOutcome:
    """A gang decision: ``placements`` are committed only when at least minMember can run."""

    placements: tuple[Placement, ...] = ()
    failures: tuple[Unplaceable, ...] = ()
    ok: bool = False
    # Pod UIDs whose earlier reservations were released because the gang cannot start.
    released: tuple[str, ...] = ()
