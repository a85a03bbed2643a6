"""One Volcano session's nodes and cards: predicate, node order and Allocate for one task at a time.

actions/allocate/allocate.go asks, for each task: which nodes pass the predicates
(``PredicateNodes``), which is best (``prioritizeNodes`` -> ``SelectBestNodeAndScore``), then
``Statement.Allocate`` on it, whose AllocateFunc (plugins/predicates/predicates.go) calls
``GPUDevices.Allocate``. This class is that loop over the session's copy of the cache (see
allocate.py's docstring for the rules, deviceshare.py for the fit); it writes nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from math import floor
from typing import Any

from vgpu_guard.engine.cluster import NodeInfo, node_info
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.node_terms import (
    affinity_terms,
    matches_selector_and_affinity,
    tolerates,
    tolerations_of,
)
from vgpu_guard.engine.objects import Obj
from vgpu_guard.engine.untrusted import as_mapping
from vgpu_guard.volcano.binder import VolcanoVersion
from vgpu_guard.volcano.device_cache import NodeDevices
from vgpu_guard.volcano.device_usage import (
    add_resource,
    add_to_pod_map,
    group_key,
    sub_resource,
    volcano_cache,
)
from vgpu_guard.volcano.deviceshare import Fit, fit

__all__ = ["POLICY", "Placed", "SessionDevices"]

# deviceshare.SchedulePolicy in Volcano's vGPU guide (docs/user-guide/how_to_use_volcano_vgpu.md).
POLICY = "binpack"
_HARD = ("NoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class Placed:
    """A task's node and its ``vgpu-ids-new`` (utils.go ``encodePodDevices``)."""

    uid: str
    node: str
    ids: str


def encode(result: Fit) -> str:
    """``encodePodDevices``: ``UUID,NVIDIA,mem,cores:`` per device, containers joined by ``;``."""
    return ";".join(
        "".join(f"{d.uuid},{d.type},{d.memory},{d.cores}:" for d in container)
        for container in result.containers
    )


def _node_reason(info: NodeInfo, spec: Mapping[str, Any]) -> str | None:
    """kube-scheduler's filter that refuses the node, in its words, or None."""
    if info.unschedulable:
        return "node(s) were unschedulable"
    selector = {str(k): str(v) for k, v in as_mapping(spec.get("nodeSelector")).items()}
    if not matches_selector_and_affinity(selector, affinity_terms(spec), info):
        return "node(s) didn't match Pod's node affinity/selector"
    tolerations = tolerations_of(spec)
    for taint in info.taints:
        if taint.effect in _HARD and not tolerates(tolerations, taint):
            return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"
    return None


class SessionDevices:
    """The session's nodes (Ready ones, by name) and its copy of the cache's cards."""

    def __init__(
        self, nodes: Iterable[Obj], pods: Iterable[Obj], config: GuardConfig, version: VolcanoVersion
    ):
        self.config, self.version = config, version
        nodes = list(nodes)
        infos = (node_info(n, config) for n in nodes)
        self.nodes = {i.name: i for i in sorted(infos, key=lambda i: i.name) if i.ready}
        self.cards: dict[str, NodeDevices] = volcano_cache(
            nodes,
            pods,
            version=version,
            known_mig=config.nvidia.known_mig_geometries,
            factor=config.nvidia.gpu_memory_factor,
        )

    def place(self, pod: Obj, *, count: bool) -> Placed | str:
        """Predicate, order and Allocate for ``pod``; its assignment, or the FitErrors message.
        ``count=False`` leaves the session's cards as they were (#3616's stale session)."""
        spec = as_mapping(pod.get("spec"))
        reasons: Counter[str] = Counter()
        best: tuple[int, str, NodeDevices, Fit] | None = None
        for name, info in self.nodes.items():
            reason = _node_reason(info, spec)
            devices = self.cards.get(name)
            if reason is None and devices is None:
                reason = f"Insufficient {self.config.nvidia.resource_count_name}"
            if reason is not None or devices is None:
                reasons[reason or ""] += 1
                continue
            trial = devices.copy()  # FilterNode's getGPUDeviceSnapShot
            result = fit(pod, trial, nvidia=self.config.nvidia, version=self.version, policy=POLICY)
            if isinstance(result, str):
                reasons[f"hami-vgpuDeviceSharing {result}"] += 1
                continue
            score = floor(result.score + Fraction(1, 2))
            if best is None or score > best[0]:
                best = (score, name, trial, result)
        if best is None:
            histogram = ", ".join(sorted(f"{n} {r}" for r, n in reasons.items()))
            return f"0/{len(self.nodes)} nodes are unavailable: {histogram}."
        _, name, trial, result = best
        meta = as_mapping(pod.get("metadata"))
        placed = Placed(str(meta.get("uid") or ""), name, encode(result))
        if count:
            self.cards[name] = trial  # Allocate's fit on the session's cards finds the same devices
            self._bookkeeping(pod, placed)
        return placed

    def _bookkeeping(self, pod: Obj, placed: Placed) -> None:
        """What ``GPUDevices.Allocate`` adds after its fit (device_usage.py)."""
        node, group, factor = self.cards[placed.node], group_key(pod), self.config.nvidia.gpu_memory_factor
        if self.version.minor in (12, 13):
            add_resource(
                node, uid=placed.uid, group=group, ids=placed.ids, version=self.version, factor=factor
            )
        elif self.version.minor >= 14:
            add_to_pod_map(node, uid=placed.uid, group=group, ids=placed.ids, version=self.version)

    def discard(self, placed: Placed) -> None:
        """A discarded statement's task: ``Release`` -> ``SubResource`` from v1.15.0, else nothing."""
        if self.version.at_least(1, 15) and placed.node in self.cards:
            factor = self.config.nvidia.gpu_memory_factor
            sub_resource(
                self.cards[placed.node], uid=placed.uid, ids=placed.ids, version=self.version, factor=factor
            )
