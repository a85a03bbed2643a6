"""The controller's scheduling queue: keyed units, in scheduling order, parked while unplaceable.

kube-scheduler's SchedulingQueue (pkg/scheduler/internal/queue/scheduling_queue.go) keeps pods in
an active queue in priority order, and moves a pod that did not fit to an unschedulable set until a
cluster event that could make it fit (its queueing hints). Ours does the same for this controller:

- **Units, keyed and de-duplicated**: a pod (by UID), or a gang (by namespace and PodGroup) as one
  decision with its pending members; a pod appears in one unit only.
- **In scheduling order**: units sorted by their first member's order (higher priority, then
  older, then name), the order the allocator decides them in, each on what the ones before left.
- **Parked while unplaceable**: a unit that fits nowhere is not judged again until something that
  could change the answer changed (kube-scheduler's queueing hints make the same argument per
  event): a member changed (its resourceVersion), a node, Queue or PodGroup changed (the informers'
  generation), capacity was freed (an entry went, a placed pod ended), a gang member started
  running, or, for a pod with required pod affinity, any pod was placed (it may be the one it
  needs). Anything else (another pod reserved, bound or confirmed) only takes capacity away, so the
  parked answer still holds (a test's fresh LISTs have no versions: nothing is parked there). A
  pod that fits nowhere costs a search and a diagnosis over every node (~186 ms at 5,000
  nodes); a flood of them would otherwise slow every pass for the pods that do fit.

What the informers feed it is the World's set of our pending pods (``World.pending``, kept by the
pod handler's changes); a failed binding backs off per pod in the Binder (controller/binder.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.objects import Obj
from vgpu_guard.engine.pod_request import PodRequest

__all__ = ["Answer", "SchedulingQueue", "Signature", "Unit"]

Signature = tuple[object, ...]
# What a parked unit was told: (message, cause) per member UID, and the gang's first reason.
Answer = tuple[dict[str, tuple[str, str]], str | None]


@dataclass(frozen=True)
class Unit:
    """One decision: a pod, or a gang's pending members (``min_member`` > 1 or several members)."""

    key: tuple[str, ...]  # ("pod", uid) or ("gang", namespace, PodGroup name)
    members: list[PodRequest]
    min_member: int = 1
    running: int = 0  # members of the gang already bound

    @property
    def single(self) -> bool:
        return self.min_member <= 1 and len(self.members) == 1


def _version(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("resourceVersion") or "") if isinstance(meta, Mapping) else ""


def _min_member(podgroup: Mapping[str, Any]) -> int:
    spec = podgroup.get("spec")
    raw = spec.get("minMember") if isinstance(spec, Mapping) else None
    return raw if isinstance(raw, int) and raw > 0 else 1


@dataclass
class SchedulingQueue:
    """Units of our pending pods each pass; the parked ones' answers across passes."""

    # Moves whenever capacity may have been freed anywhere (World's ``Changes.freed``).
    freed: int = 0
    _parked: dict[tuple[str, ...], tuple[Signature, Answer]] = field(default_factory=dict)

    def capacity_freed(self) -> None:
        """An entry or a placed pod went: every parked answer may be wrong now."""
        self.freed += 1

    def signature(self, generation: Signature | None, *, placed_pods: int) -> Signature | None:
        """What this pass's answers depend on; None when the inputs carry no versions."""
        if generation is None:
            return None
        return (generation, self.freed, placed_pods)

    def units(
        self,
        pending: Sequence[tuple[PodRequest, Obj]],
        view: ClusterView,
        running: Mapping[tuple[str, str], int],
    ) -> list[Unit]:
        """Our pending pods as decisions, in scheduling order; parked units no longer pending go."""
        gangs: dict[tuple[str, str], list[PodRequest]] = {}
        units: list[Unit] = []
        for request, _ in pending:
            key = (request.namespace, request.group)
            if request.group and key in view.podgroups:
                gangs.setdefault(key, []).append(request)
            else:
                units.append(Unit(("pod", request.uid), [request]))
        for (namespace, group), members in gangs.items():
            min_member = _min_member(view.podgroups[(namespace, group)])
            units.append(
                Unit(("gang", namespace, group), members, min_member, running.get((namespace, group), 0))
            )
        units.sort(key=lambda u: min(m.order for m in u.members))
        live = {u.key for u in units}
        for gone in [k for k in self._parked if k not in live]:
            del self._parked[gone]
        return units

    def parked(self, unit: Unit, objects: Mapping[str, Obj], signature: Signature | None) -> Answer | None:
        """The answer the unit was parked with, unless something that could change it changed."""
        key = self._key(unit, objects, signature)
        hit = self._parked.get(unit.key)
        return hit[1] if key is not None and hit is not None and hit[0] == key else None

    def park(
        self, unit: Unit, objects: Mapping[str, Obj], signature: Signature | None, answer: Answer
    ) -> None:
        """The unit fits nowhere now: keep its answer until ``parked`` says something changed."""
        key = self._key(unit, objects, signature)
        if key is not None:
            self._parked[unit.key] = (key, answer)

    def activate(self, unit: Unit) -> None:
        """The unit was placed: it is no longer parked."""
        self._parked.pop(unit.key, None)

    @staticmethod
    def _key(unit: Unit, objects: Mapping[str, Obj], signature: Signature | None) -> Signature | None:
        if signature is None:
            return None
        versions = tuple((m.uid, _version(objects[m.uid])) for m in unit.members)
        if not all(v for _, v in versions):
            return None
        generation, epoch, placed = signature
        needs_peers = any(m.facts is not None and bool(m.facts.affinity) for m in unit.members)
        return (generation, epoch, placed if needs_peers else None, unit.running, versions)
