"""Diagnose an unplaceable pod once per change that could make it fit, not on every pass.

A pod that fits nowhere costs a full search plus a diagnosis over every node (~186 ms at 5,000
nodes), and a flood of such pods would make every pass slow for the pods that do fit. The answer
can only change when (kube-scheduler's queueing hints make the same argument per event):

- the pod itself changed (its resourceVersion);
- a node, Queue or PodGroup changed (the cache's versions of those informers);
- capacity was freed: a ledger entry disappeared or a placed pod ended (``Changes.freed``);
- for a pod with required pod affinity, any pod was placed (it may be the one it needs).

Anything else (another pod reserved, bound or confirmed) only takes capacity away, so the old
answer still holds. With the listed inputs of ``simulate`` there are no versions: no memo.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from vgpu_guard.engine.pod_request import PodRequest

__all__ = ["Signature", "UnplaceableMemo"]

Signature = tuple[object, ...]


@dataclass
class UnplaceableMemo:
    """The last reason per pod UID, valid while its signature holds."""

    # Moves whenever capacity may have been freed anywhere (World's ``Changes.freed``).
    freed: int = 0
    _known: dict[str, tuple[Signature, tuple[str, str]]] = field(default_factory=dict)

    def capacity_freed(self) -> None:
        """An entry or a placed pod went: every remembered answer may be wrong now."""
        self.freed += 1

    def signature(self, generation: Signature | None, *, placed_pods: int) -> Signature | None:
        """What this pass's answers depend on; None when the inputs carry no versions."""
        if generation is None:
            return None
        return (generation, self.freed, placed_pods)

    @staticmethod
    def _key(pod: PodRequest, version: str, memo: Signature) -> Signature:
        generation, epoch, placed = memo
        needs_peers = pod.facts is not None and bool(pod.facts.affinity)
        return (generation, epoch, placed if needs_peers else None, version)

    def known(self, pod: PodRequest, version: str, memo: Signature | None) -> tuple[str, str] | None:
        """The remembered (message, cause), unless something that could change it changed."""
        if memo is None or not version:
            return None
        hit = self._known.get(pod.uid)
        return hit[1] if hit is not None and hit[0] == self._key(pod, version, memo) else None

    def remember(
        self, pod: PodRequest, version: str, memo: Signature | None, message: tuple[str, str]
    ) -> None:
        if memo is not None and version:
            self._known[pod.uid] = (self._key(pod, version, memo), message)

    def forget_others(self, pending: Mapping[str, object]) -> None:
        """Drop pods no longer pending (bound, gone): the memo stays as small as the backlog."""
        for uid in [u for u in self._known if u not in pending]:
            del self._known[uid]
