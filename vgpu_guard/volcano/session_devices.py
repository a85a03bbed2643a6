"""One Volcano session's nodes and cards: predicate, node order and Allocate for one task at a time.

actions/allocate/allocate.go asks, for each task: which nodes pass the predicates
(``PredicateNodes``), which is best (``prioritizeNodes`` -> ``SelectBestNodeAndScore``), then
``Statement.Allocate`` on it, whose AllocateFunc (plugins/predicates/predicates.go) calls
``GPUDevices.Allocate``. This class is that loop over the session's copy of the cache (see
allocate.py's docstring for the rules, deviceshare.py for the fit); it writes nothing. A node's
verdict is kept per kind of task and taken again only when its cards change (node_ranking.py):
the same choices as judging every node for every task, at N + P fits instead of N x P.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import astuple, dataclass
from fractions import Fraction
from math import floor
from typing import Any

from vgpu_guard.engine.cluster import NodeInfo, node_info
from vgpu_guard.engine.config import GuardConfig, NvidiaConfig
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
from vgpu_guard.volcano.deviceshare import (
    GROUP_POLICY,
    MODE_ANNOTATION,
    NO_USE_TYPE,
    USE_TYPE,
    Fit,
    container_requests,
    fit,
)
from vgpu_guard.volcano.node_ranking import NodeRanking, Verdict

__all__ = ["POLICY", "Placed", "SessionDevices", "task_kind"]

# deviceshare.SchedulePolicy in Volcano's vGPU guide (docs/user-guide/how_to_use_volcano_vgpu.md).
POLICY = "binpack"
_HARD = ("NoSchedule", "NoExecute")
_READ_ANNOTATIONS = (MODE_ANNOTATION, GROUP_POLICY, USE_TYPE, NO_USE_TYPE)


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


def task_kind(pod: Obj, nvidia: NvidiaConfig) -> str:
    """What a node's verdict reads of a task (``_node_reason`` and deviceshare's ``fit``): its node
    selector, affinity and tolerations, the annotations ``fit`` reads, its PodGroup where the group
    policy counts it, and its containers' device requests. Tasks of one kind get one verdict per
    node (node_ranking.py)."""
    spec, notes = as_mapping(pod.get("spec")), as_mapping(as_mapping(pod.get("metadata")).get("annotations"))
    read = {name: notes.get(name) for name in _READ_ANNOTATIONS}
    requests = [astuple(r) for r in container_requests(pod, nvidia)]
    group = group_key(pod) if read[GROUP_POLICY] is not None else ""
    facts = [spec.get("nodeSelector"), spec.get("affinity"), spec.get("tolerations"), read, group, requests]
    return json.dumps(facts, sort_keys=True, default=str)


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
        self._rankings: dict[str, NodeRanking] = {}  # by task kind

    def place(self, pod: Obj, *, count: bool) -> Placed | str:
        """Predicate, order and Allocate for ``pod``; its assignment, or the FitErrors message.
        ``count=False`` leaves the session's cards as they were (#3616's stale session)."""
        kind = task_kind(pod, self.config.nvidia)
        ranking = self._rankings.get(kind)
        if ranking is None:
            ranking = self._rankings[kind] = NodeRanking(functools.partial(self._judge, pod), self.nodes)
        name = ranking.best()
        if name is None:
            histogram = ", ".join(sorted(f"{n} {r}" for r, n in ranking.reasons.items()))
            return f"0/{len(self.nodes)} nodes are unavailable: {histogram}."
        verdict = ranking.verdicts[name]
        assert verdict.trial is not None and verdict.fit is not None
        meta = as_mapping(pod.get("metadata"))
        placed = Placed(str(meta.get("uid") or ""), name, encode(verdict.fit))
        if count:
            self.cards[name] = verdict.trial  # Allocate's fit on the session's cards finds the same devices
            self._bookkeeping(pod, placed)
            self._changed(name)
        return placed

    def _judge(self, pod: Obj, name: str) -> Verdict:
        """One node for ``pod`` (and every task of its kind): kube-scheduler's filters, then
        deviceshare's fit on a copy of its cards (FilterNode's ``getGPUDeviceSnapShot``)."""
        reason = _node_reason(self.nodes[name], as_mapping(pod.get("spec")))
        devices = self.cards.get(name)
        if reason is None and devices is None:
            reason = f"Insufficient {self.config.nvidia.resource_count_name}"
        if reason is not None or devices is None:
            return Verdict(reason or "")
        trial = devices.copy()
        result = fit(pod, trial, nvidia=self.config.nvidia, version=self.version, policy=POLICY)
        if isinstance(result, str):
            return Verdict(f"hami-vgpuDeviceSharing {result}")
        return Verdict(None, floor(result.score + Fraction(1, 2)), trial, result)

    def _changed(self, name: str) -> None:
        """The node's cards changed: every kind of task judges it again."""
        for ranking in self._rankings.values():
            ranking.judge_again(name)

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
            self._changed(placed.node)
