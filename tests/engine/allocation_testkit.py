"""Builders for allocator and ledger tests: nodes with registered GPUs, vGPU pods, configs."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from vgpu_guard.configfile import load_config
from vgpu_guard.engine.allocator import Allocator, Placement, Unplaceable
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.ledger import NodeLedger, check_invariants
from vgpu_guard.engine.pod_request import PodRequest, pod_request

_uids = itertools.count(1)

A10 = "NVIDIA-NVIDIA A10"
A30 = "NVIDIA-NVIDIA A30"
A100_40 = "NVIDIA-NVIDIA A100-SXM4-40GB"


def config(**scheduling: Any) -> GuardConfig:
    """The default config (plugin's shipped device config, MIG geometries included)."""
    base = load_config(env={})
    if not scheduling:
        return base
    return base.model_copy(update={"scheduling": base.scheduling.model_copy(update=scheduling)})


def gpu_node(
    name: str,
    gpus: int | Sequence[int] = 8,
    *,
    memory: int = 24576,
    card_type: str = A10,
    mode: str = "hami-core",
    split: int = 10,
    unhealthy: Iterable[int] = (),
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    ready: bool = True,
    unschedulable: bool = False,
) -> dict[str, Any]:
    """A Node with a plugin registration; ``gpus`` is a count or a list of per-card memories."""
    memories = [memory] * gpus if isinstance(gpus, int) else list(gpus)
    bad = set(unhealthy)
    records = "".join(
        f"GPU-{name}-{i},{split},{mem},{card_type},{'false' if i in bad else 'true'},{mode}:"
        for i, mem in enumerate(memories)
    )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, **(labels or {})},
            "annotations": {"volcano.sh/node-vgpu-register": records},
        },
        "spec": {"unschedulable": unschedulable, "taints": [dict(t) for t in taints]},
        "status": {
            "allocatable": {
                "cpu": "64",
                "pods": "110",
                "volcano.sh/vgpu-number": str(split * len(memories)),
                "volcano.sh/vgpu-memory": str(sum(memories)),
                "volcano.sh/vgpu-cores": str(100 * len(memories)),
            },
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def cpu_node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "allocatable": {"cpu": "32", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def vgpu_pod(
    name: str,
    *,
    memory: int | None = None,
    number: int | None = None,
    cores: int | None = None,
    percentage: int | None = None,
    priority: int | None = None,
    created: str = "2025-06-12T19:00:00Z",
    mode: str | None = None,
    annotations: Mapping[str, str] | None = None,
    namespace: str = "default",
    uid: str | None = None,
    node_selector: Mapping[str, str] | None = None,
    tolerations: Sequence[Mapping[str, str]] = (),
    affinity: Mapping[str, Any] | None = None,
    containers: int = 1,
) -> dict[str, Any]:
    """A pod as the webhook leaves it: limits and requests equal, schedulerName ours."""
    limits: dict[str, str] = {}
    if number is not None:
        limits["volcano.sh/vgpu-number"] = str(number)
    if memory is not None:
        limits["volcano.sh/vgpu-memory"] = str(memory)
    if cores is not None:
        limits["volcano.sh/vgpu-cores"] = str(cores)
    if percentage is not None:
        limits["volcano.sh/vgpu-memory-percentage"] = str(percentage)
    notes = dict(annotations or {})
    if mode is not None:
        notes["volcano.sh/vgpu-mode"] = mode
    spec: dict[str, Any] = {
        "schedulerName": "vgpu-guard",
        "containers": [
            {
                "name": f"c{i}",
                "image": "cuda",
                "resources": {"limits": dict(limits), "requests": dict(limits)},
            }
            for i in range(containers)
        ],
    }
    if priority is not None:
        spec["priority"] = priority
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    if affinity:
        spec["affinity"] = dict(affinity)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{name}-{next(_uids)}",
            "creationTimestamp": created,
            "annotations": notes,
        },
        "spec": spec,
    }


def request(pod: Mapping[str, Any], cfg: GuardConfig | None = None) -> PodRequest:
    parsed = pod_request(pod, (cfg or config()).nvidia)
    assert parsed is not None
    return parsed


def view(objects: Iterable[Mapping[str, Any]], cfg: GuardConfig | None = None) -> ClusterView:
    return ClusterView.from_objects(list(objects), cfg or config())


def place_all(allocator: Allocator, pods: Iterable[Mapping[str, Any]]) -> list[Placement | Unplaceable]:
    """Place and commit pods one after the other, in the order given."""
    out: list[Placement | Unplaceable] = []
    for pod in pods:
        result = allocator.place(request(pod, allocator.config))
        if isinstance(result, Placement):
            allocator.commit(result)
        out.append(result)
    return out


def assert_within_capacity(allocator: Allocator) -> None:
    """No GPU of any node is over capacity in the allocator's ledgers."""
    factor = allocator.config.nvidia.gpu_memory_factor
    for name, info in allocator.view.nodes.items():
        ledger = allocator.ledger(name)
        violations = check_invariants(ledger, info, memory_factor=factor)
        assert violations == [], [v.message for v in violations]


def ledgers_of(allocator: Allocator) -> dict[str, NodeLedger]:
    return {name: allocator.ledger(name) for name in allocator.view.nodes}
