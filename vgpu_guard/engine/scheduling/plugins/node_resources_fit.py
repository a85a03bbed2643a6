"""NodeResourcesFit: the node's allocatable covers what its pods request plus this pod.

fitsRequest in noderesources/fit.go: the pod count against ``pods``; then, unless the pod requests
nothing, cpu, memory, ephemeral-storage and every scalar resource it requests (extended resources
such as ``volcano.sh/vgpu-memory``, hugepages). Every shortfall is its own reason, as there.

The resources in the snapshot's ``later`` are left out of ``filter`` and judged by ``later``: the
allocator fits vGPU resources per GPU first (reasons that name the card and the numbers), then
as node sums against allocatable, as the kubelet admits them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.placement_reason import NodeFailure
from vgpu_guard.engine.resources import Resources
from vgpu_guard.engine.scheduling.facts import PodFacts
from vgpu_guard.engine.scheduling.plugin import Snapshot, rejected
from vgpu_guard.engine.scheduling.workloads import NodeUsage, Workloads

NAME = "NodeResourcesFit"
TOO_MANY_PODS = "Too many pods"
_NATIVE = ("cpu", "memory", "ephemeral-storage")


def _scalar(name: str) -> bool:
    return name not in (*_NATIVE, "pods") and (
        "/" in name or name.startswith(("hugepages-", "attachable-volumes-"))
    )


def insufficient(
    request: Resources,
    allocatable: Mapping[str, int],
    usage: NodeUsage,
    *,
    only: frozenset[str] | None = None,
    skip: frozenset[str] = frozenset(),
) -> tuple[str, ...]:
    """The shortfalls, each as kube-scheduler words it; ``only``/``skip`` split the check so the
    allocator can judge vGPU resources after its per-GPU fit (whose reasons say more)."""
    reasons = []
    if only is None and len(usage.pods) + 1 > allocatable.get("pods", 0):
        reasons.append(TOO_MANY_PODS)
    scalars = [name for name in request if _scalar(name)]
    if not any(request.get(name, 0) for name in _NATIVE) and not scalars:
        return tuple(reasons)
    for name in (*_NATIVE, *sorted(scalars)):
        if name in skip or (only is not None and name not in only):
            continue
        if allocatable.get(name, 0) < request.get(name, 0) + usage.requested.get(name, 0):
            reasons.append(f"Insufficient {name}")
    return tuple(reasons)


@dataclass(frozen=True, slots=True)
class FitState:
    requests: Resources
    workloads: Workloads
    later: frozenset[str]


class NodeResourcesFit:
    name = NAME

    def prepare(self, pod: PodFacts, snapshot: Snapshot) -> FitState:
        return FitState(pod.requests, snapshot.workloads, snapshot.later)

    def filter(self, state: FitState, node: NodeInfo) -> NodeFailure | None:
        usage = state.workloads.usage(node.name)
        reasons = insufficient(state.requests, node.allocatable_units, usage, skip=state.later)
        return rejected(*reasons) if reasons else None

    def later(self, state: FitState, node: NodeInfo) -> NodeFailure | None:
        """The resources ``filter`` left for later, alone (after the allocator's per-GPU fit)."""
        usage = state.workloads.usage(node.name)
        reasons = insufficient(state.requests, node.allocatable_units, usage, only=state.later)
        return rejected(*reasons) if reasons else None

    def least_allocated(self, state: FitState, node: NodeInfo) -> int:
        """kube-scheduler's NodeResourcesLeastAllocated score (0..100): the share of cpu and memory
        left free after this pod, averaged. Used only to break ties between equally packed GPUs."""
        usage = state.workloads.usage(node.name)
        scores = []
        for name in ("cpu", "memory"):
            capacity = node.allocatable_units.get(name, 0)
            requested = usage.requested.get(name, 0) + state.requests.get(name, 0)
            scores.append(
                0 if capacity == 0 or requested > capacity else (capacity - requested) * 100 // capacity
            )
        return sum(scores) // len(scores)


PLUGIN = NodeResourcesFit()
