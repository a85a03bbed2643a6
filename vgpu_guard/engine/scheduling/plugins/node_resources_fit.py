"""NodeResourcesFit: the node's allocatable covers what its pods request plus this pod.

fitsRequest in noderesources/fit.go: the pod count against ``pods``; then, unless the pod requests
nothing, cpu, memory, ephemeral-storage and every scalar resource it requests (extended resources
such as ``volcano.sh/vgpu-memory``, hugepages). Every shortfall is its own reason, as there.
"""

from __future__ import annotations

from collections.abc import Mapping

from vgpu_guard.engine.resources import Resources
from vgpu_guard.engine.scheduling.workloads import NodeUsage

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
