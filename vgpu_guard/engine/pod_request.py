"""What the allocator needs to know about one pod, read once from the pod object.

Why a separate, parsed form: the allocator evaluates a pod against thousands of cards; reading
quantities and annotations out of nested dicts each time would dominate the cost, and parsing in
one place means every decision (and every message) sees the same values.

Volcano's reading of a vGPU request (deviceshare ``resourcereqs``): only ``spec.containers``
(not init containers); a container takes part when it sets the number or the memory resource; the
count defaults to 1 when only memory is set; no memory and no percentage means the whole card;
cores default to 0 (share with anything). Limits first, then requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vgpu_guard.engine.annotations import (
    NOUSE_GPUTYPE,
    NOUSE_GPUUUID,
    PODGROUP_POLICY,
    PODGROUP_POLICY_SPREAD,
    USE_GPUTYPE,
    USE_GPUUUID,
    VGPU_MODE,
)
from vgpu_guard.engine.config import NvidiaConfig
from vgpu_guard.engine.node_terms import NodeSelectorTerm, Toleration, affinity_terms, tolerations_of
from vgpu_guard.engine.scheduling.facts import PodFacts
from vgpu_guard.engine.untrusted import as_list, as_mapping
from vgpu_guard.engine.vgpu_request import VgpuValue, vgpu_containers

__all__ = [
    "GROUP_ANNOTATIONS",
    "QUEUE_ANNOTATION",
    "ContainerRequest",
    "PodRequest",
    "PodRequestError",
    "pod_request",
    "whole_card_gpus",
]

GROUP_ANNOTATIONS = ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name")
QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
WHOLE_CARD_RESOURCE = "nvidia.com/gpu"


class PodRequestError(ValueError):
    """Raised when a pod's vGPU request cannot be read; the message names the field and the fix."""


@dataclass(frozen=True, slots=True)
class ContainerRequest:
    """One container's request: ``count`` distinct GPUs, each with ``memory`` MiB (or a percentage)."""

    index: int
    name: str
    count: int
    # MiB per GPU (plugin units x gpuMemoryFactor); None when a percentage (or the whole card) applies.
    memory: int | None
    # Percent of each card's memory; used when set (Volcano >= 1.14: it overrides the MiB request).
    percentage: int | None
    cores: int

    def memory_on(self, card_units: int, factor: int) -> int:
        """MiB this container needs on a card of ``card_units`` plugin units."""
        if self.percentage is not None:
            return card_units * self.percentage // 100 * factor
        if self.memory is None:
            return card_units * factor
        return self.memory


@dataclass(frozen=True)
class PodRequest:
    """A pod as the allocator sees it."""

    uid: str
    namespace: str
    name: str
    containers: tuple[ContainerRequest, ...]
    priority: int = 0
    # RFC 3339 creation timestamp: sorts chronologically as a string.
    created: str = ""
    mode: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    # None: no required node affinity; () would mean "matches nothing".
    affinity: tuple[NodeSelectorTerm, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()
    use_types: tuple[str, ...] = ()
    nouse_types: tuple[str, ...] = ()
    use_uuids: frozenset[str] | None = None
    nouse_uuids: frozenset[str] = frozenset()
    # From the pod annotation; the PodGroup's spec.queue wins (resolved by the allocator).
    queue: str = ""
    group: str = ""
    # ``volcano.sh/vgpu-podgroup-policy: spread``: no GPU another member of ``group`` holds. Volcano
    # compares the value exactly ("Spread" is not "spread") and ignores it for a pod without a group.
    podgroup_spread: bool = False
    # kube-scheduler's view of the pod (requests, ports, pod affinity, spread, claims), when the
    # caller checks those constraints (the controller does; GPU-only callers leave it None).
    facts: PodFacts | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def order(self) -> tuple[int, str, str, str]:
        """Sort key: higher priority first, then older, then name (a total, stable order)."""
        return (-self.priority, self.created, self.namespace, self.name)

    def node_facts(self) -> PodFacts:
        """The pod as the node's own filters (readiness, cordon, selector, taints) read it, for
        callers that parsed no ``facts``: its node selector, required node affinity and tolerations."""
        return PodFacts(
            uid=self.uid,
            namespace=self.namespace,
            name=self.name,
            labels={},
            node_selector=self.node_selector,
            node_affinity=self.affinity,
            tolerations=self.tolerations,
        )


def _csv(raw: object) -> tuple[str, ...]:
    if not isinstance(raw, str):
        return ()
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def _int_value(cv_value: VgpuValue, what: str) -> int:
    integer = cv_value.integer
    if integer is None or integer < 0:
        raise PodRequestError(f"{cv_value.path}: {cv_value.raw!r} is not a whole number; fix the {what}")
    return integer


def pod_request(
    pod: Mapping[str, Any], nvidia: NvidiaConfig, *, with_no_gpu: bool = False
) -> PodRequest | None:
    """The pod's request, or None when no container asks for vGPU; raises ``PodRequestError``.

    ``with_no_gpu`` returns the request with no containers instead of None: the node constraints
    of a pod without vGPU (IB cluster choice for CPU-only gangs).
    """
    metadata, spec = as_mapping(pod.get("metadata")), as_mapping(pod.get("spec"))
    annotations = {str(k): str(v) for k, v in as_mapping(metadata.get("annotations")).items()}
    containers: list[ContainerRequest] = []
    for cv in vgpu_containers(spec, nvidia):
        if cv.list_name != "containers" or not ("number" in cv.values or "memory" in cv.values):
            continue
        count = _int_value(cv.values["number"], "GPU count") if "number" in cv.values else 1
        memory = _int_value(cv.values["memory"], "memory") if "memory" in cv.values else None
        percentage = _int_value(cv.values["percentage"], "percentage") if "percentage" in cv.values else None
        cores = _int_value(cv.values["cores"], "cores") if "cores" in cv.values else 0
        if count < 1:
            continue
        if cores > 100 or (percentage is not None and percentage > 100):
            raise PodRequestError(f"{cv.path}: vgpu-cores and memory percentage are percents (0..100)")
        if memory == 0 and percentage is None:
            memory = None
        containers.append(
            ContainerRequest(
                index=cv.index,
                name=cv.name,
                count=count,
                memory=memory * nvidia.gpu_memory_factor if memory is not None else None,
                percentage=percentage,
                cores=cores,
            )
        )
    if not containers and not with_no_gpu:
        return None
    uuids_use = _csv(annotations.get(USE_GPUUUID))
    group = next((annotations[a] for a in GROUP_ANNOTATIONS if annotations.get(a)), "")
    priority = spec.get("priority")
    return PodRequest(
        uid=str(metadata.get("uid") or ""),
        namespace=str(metadata.get("namespace") or "default"),
        name=str(metadata.get("name") or ""),
        containers=tuple(containers),
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        created=str(metadata.get("creationTimestamp") or ""),
        mode=annotations.get(VGPU_MODE),
        node_selector={str(k): str(v) for k, v in as_mapping(spec.get("nodeSelector")).items()},
        affinity=affinity_terms(spec),
        tolerations=tolerations_of(spec),
        use_types=_csv(annotations.get(USE_GPUTYPE)),
        nouse_types=_csv(annotations.get(NOUSE_GPUTYPE)),
        # Volcano reads an empty or separator-only list as "no restriction", not "no GPU allowed".
        use_uuids=frozenset(uuids_use) if uuids_use else None,
        nouse_uuids=frozenset(_csv(annotations.get(NOUSE_GPUUUID))),
        queue=annotations.get(QUEUE_ANNOTATION, ""),
        group=group,
        podgroup_spread=bool(group) and annotations.get(PODGROUP_POLICY) == PODGROUP_POLICY_SPREAD,
    )


def whole_card_gpus(pod: Mapping[str, Any]) -> int:
    """Whole cards (``nvidia.com/gpu`` limits, else requests) a pod holds: they share the node's GPUs."""
    total = 0
    for container in as_list(as_mapping(pod.get("spec")).get("containers")):
        resources = as_mapping(as_mapping(container).get("resources"))
        raw = as_mapping(resources.get("limits")).get(
            WHOLE_CARD_RESOURCE, as_mapping(resources.get("requests")).get(WHOLE_CARD_RESOURCE)
        )
        try:
            total += int(str(raw)) if raw is not None else 0
        except ValueError:
            continue
    return total
