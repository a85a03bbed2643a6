"""A pod's vGPU request and kube-scheduler facts, parsed once per pod version.

Why a cache: a pass reads every pending pod and every bound pod's facts; parsing quantities,
affinity terms and annotations again each pass would cost what the cluster holds, not what
changed. Entries are keyed by the pod's resourceVersion (and node, for facts), so a changed pod is
parsed again and an unchanged one never is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.objects import Obj, ObjMap
from vgpu_guard.engine.pod_request import GROUP_ANNOTATIONS, PodRequest, PodRequestError, pod_request
from vgpu_guard.engine.scheduling import FactsMemo, PodFacts

__all__ = ["PodParser"]


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


def _node_name(pod: Mapping[str, Any]) -> str:
    spec = pod.get("spec")
    return str(spec.get("nodeName") or "") if isinstance(spec, Mapping) else ""


class PodParser:
    """``facts`` and ``request`` of a pod, remembered per version; ``forget`` the pods that went."""

    def __init__(
        self, config: GuardConfig, podgroups: Callable[[], Mapping[tuple[str, str], ObjMap]]
    ) -> None:
        self.config = config
        # The PodGroups known now (the World's view): a pod of one is placed with its gang.
        self._podgroups = podgroups
        self._facts: dict[str, tuple[str, str, PodFacts]] = {}
        # Replicas sharing their spec pieces (the pod cache's SharedParts) are parsed once.
        self._derive_facts = FactsMemo()
        self._requests: dict[str, tuple[str, PodRequest | PodRequestError | None]] = {}

    def facts(self, pod: Obj) -> PodFacts:
        """kube-scheduler's view of the pod (requests, ports, affinity, spread, claims)."""
        meta = _meta(pod)
        uid = str(meta.get("uid"))
        rv, node = str(meta.get("resourceVersion") or ""), _node_name(pod)
        cached = self._facts.get(uid)
        if cached is not None and rv and cached[0] == rv and cached[1] == node:
            return cached[2]
        facts = self._derive_facts(pod)
        self._facts[uid] = (rv, node, facts)
        return facts

    def request(self, pod: Obj) -> PodRequest | None:
        """``pod_request`` (with its facts) once per pending pod version; raises as it does."""
        meta = _meta(pod)
        member = self._gang_member(pod)
        # Keyed by whether its PodGroup is known too: a group that appears later changes the answer.
        uid, rv = str(meta.get("uid")), str(meta.get("resourceVersion") or "") + ("+gang" if member else "")
        cached = self._requests.get(uid)
        if cached is not None and rv and cached[0] == rv:
            if isinstance(cached[1], PodRequestError):
                raise cached[1]
            return cached[1]
        try:
            request = pod_request(pod, self.config.nvidia, with_no_gpu=member)
        except PodRequestError as e:
            self._requests[uid] = (rv, e)
            raise
        if request is not None:
            request = replace(request, facts=self.facts(pod))
        self._requests[uid] = (rv, request)
        return request

    def _gang_member(self, pod: Obj) -> bool:
        """A pod of a PodGroup we know: routed to us, it is placed with its gang even without vGPU
        (routing routes a gang whole, so a mixed gang never waits for a scheduler it was not sent
        to)."""
        notes = _meta(pod).get("annotations")
        if not isinstance(notes, Mapping):
            return False
        group = next((str(notes[a]) for a in GROUP_ANNOTATIONS if notes.get(a)), "")
        namespace = str(_meta(pod).get("namespace") or "default")
        return bool(group) and (namespace, group) in self._podgroups()

    def forget(self, gone: set[str]) -> None:
        for uid in gone:
            self._facts.pop(uid, None)
            self._requests.pop(uid, None)
