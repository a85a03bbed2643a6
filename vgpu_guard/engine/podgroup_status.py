"""The PodGroup status vgpu-guard writes for a gang it schedules (routing mode), as Volcano would.

Why: users and tools (``kubectl get podgroup``, Volcano's job controller, dashboards) read a gang's
state from its PodGroup. Volcano's scheduler writes it for the gangs it schedules; for a gang our
controller schedules, Volcano never sees the pending members, so without this the PodGroup would
say nothing about why the gang waits.

The shapes are Volcano's (volcano-sh/volcano pkg/scheduler/plugins/gang/gang.go ``OnSessionClose``
and pkg/scheduler/cache/cache.go ``RecordJobStatusEvent``; the API's PodGroupConditionType):
a gang that cannot start gets condition ``Unschedulable`` (status True, reason
``NotEnoughResources``, message ``<pending>/<members> tasks in gang unschedulable: <why>``); a gang
with ``minMember`` members bound gets phase ``Running`` and condition ``Scheduled`` (reason
``tasks in gang are ready to be scheduled``). A waiting gang keeps the phase it has (Volcano's
``enqueue`` may have made it ``Inqueue``; the job controller creates a Volcano Job's pods only
then), or gets ``Pending`` when it has none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["READY_REASON", "GangState", "podgroup_status"]

UNSCHEDULABLE = "Unschedulable"
SCHEDULED = "Scheduled"
NOT_ENOUGH = "NotEnoughResources"
READY_REASON = "tasks in gang are ready to be scheduled"
_WAITING_PHASES = ("Pending", "Inqueue")


@dataclass(frozen=True, slots=True)
class GangState:
    """What the controller knows of one gang it schedules, this pass."""

    min_member: int
    bound: int  # members bound to a node (by anyone) and not ended
    pending: int  # members waiting for our controller
    # Why the pending members cannot start (the gang decision's message); None: they can.
    why: str | None = None


def _condition(type_: str, reason: str, message: str, now: str, uid: str) -> dict[str, Any]:
    out: dict[str, Any] = {"type": type_, "status": "True", "reason": reason, "lastTransitionTime": now}
    out["transitionID"] = uid
    if message:
        out["message"] = message
    return out


def _same(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    return old is not None and all(old.get(k) == new.get(k) for k in ("status", "reason", "message"))


def podgroup_status(
    current: Mapping[str, Any] | None, state: GangState, *, now: str, transition_id: str
) -> dict[str, Any] | None:
    """The status to write over ``current`` (the PodGroup's status), or None when it already says it.

    ``now`` (RFC 3339) and ``transition_id`` stamp a condition that changes, as Volcano stamps it.
    """
    status = dict(current or {})
    raw = status.get("conditions")
    conditions = [dict(c) for c in raw if isinstance(c, Mapping)] if isinstance(raw, list) else []
    by_type = {c.get("type"): c for c in conditions}
    phase = status.get("phase") if isinstance(status.get("phase"), str) else ""
    if state.bound >= state.min_member:
        wanted_phase, drop = "Running", UNSCHEDULABLE
        condition = _condition(SCHEDULED, READY_REASON, "", now, transition_id)
    elif state.why is not None:
        wanted_phase = phase if phase in _WAITING_PHASES else "Pending"
        drop = SCHEDULED
        members = state.bound + state.pending
        message = f"{state.pending}/{members} tasks in gang unschedulable: {state.why}"
        condition = _condition(UNSCHEDULABLE, NOT_ENOUGH, message, now, transition_id)
    else:
        return None  # placed, bindings under way: the next pass says Running
    old = by_type.get(condition["type"])
    if _same(old, condition) and phase == wanted_phase and drop not in by_type:
        return None
    if old is not None and old.get("status") == condition["status"]:
        # Only the message changed: the transition is the one already recorded.
        condition["lastTransitionTime"] = old.get("lastTransitionTime", now)
        condition["transitionID"] = old.get("transitionID", transition_id)
    kept = [c for c in conditions if c.get("type") not in (condition["type"], drop)]
    status["conditions"] = [*kept, condition]
    status["phase"] = wanted_phase
    return status
