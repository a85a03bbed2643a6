"""A pod's node constraints as kube-scheduler reads them: node selector terms and tolerations,
parsed from the pod and matched against a node.

A leaf below both readers of a pod: ``pod_request`` (the allocator's view) and
``scheduling.facts`` (the filters' view: NodeAffinity, TaintToleration and NodeUnschedulable judge
these terms, PodTopologySpread and VolumeBinding match the same ones). When the terms lived in
``pod_request`` and their matching in a ``node_filter`` module that read ``pod_request``,
``pod_request`` and ``scheduling.facts`` imported each other; the ``.importlinter`` contract
``node-terms-below-pod-readers`` keeps this module below both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vgpu_guard.engine.cluster import NodeInfo, Taint
from vgpu_guard.engine.untrusted import as_list, as_mapping

__all__ = [
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "Toleration",
    "affinity_terms",
    "matches_node_terms",
    "matches_selector_and_affinity",
    "node_selector_terms",
    "tolerates",
    "tolerations_of",
]


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    key: str
    operator: str
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """Requirements ANDed; terms of a pod are ORed (kube-scheduler semantics)."""

    expressions: tuple[NodeSelectorRequirement, ...] = ()
    fields: tuple[NodeSelectorRequirement, ...] = ()


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str
    value: str
    effect: str


def _requirements(raw: object) -> tuple[NodeSelectorRequirement, ...]:
    return tuple(
        NodeSelectorRequirement(
            key=str(r.get("key") or ""),
            operator=str(r.get("operator") or ""),
            values=tuple(str(v) for v in as_list(r.get("values"))),
        )
        for r in as_list(raw)
        if isinstance(r, Mapping)
    )


def affinity_terms(spec: Mapping[str, Any]) -> tuple[NodeSelectorTerm, ...] | None:
    """Required node affinity terms (None: none required; () would match no node)."""
    required = as_mapping(
        as_mapping(as_mapping(spec.get("affinity")).get("nodeAffinity")).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
    )
    if "nodeSelectorTerms" not in required:
        return None
    return node_selector_terms(required.get("nodeSelectorTerms"))


def node_selector_terms(raw: object) -> tuple[NodeSelectorTerm, ...]:
    """A ``nodeSelectorTerms`` list (pod node affinity, a PersistentVolume's node affinity)."""
    return tuple(
        NodeSelectorTerm(
            expressions=_requirements(term.get("matchExpressions")),
            fields=_requirements(term.get("matchFields")),
        )
        for term in as_list(raw)
        if isinstance(term, Mapping)
    )


def tolerations_of(spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    return tuple(
        Toleration(
            key=str(t.get("key") or ""),
            operator=str(t.get("operator") or "Equal"),
            value=str(t.get("value") or ""),
            effect=str(t.get("effect") or ""),
        )
        for t in as_list(spec.get("tolerations"))
        if isinstance(t, Mapping)
    )


# --- matching against a node (kube-scheduler semantics) ------------------------------------------


def tolerates(tolerations: tuple[Toleration, ...], taint: Taint) -> bool:
    """True when one toleration matches the taint (key, operator Exists/Equal, effect)."""
    for t in tolerations:
        if t.effect and t.effect != taint.effect:
            continue
        if t.operator == "Exists":
            if not t.key or t.key == taint.key:
                return True
        elif t.key == taint.key and t.value == taint.value:
            return True
    return False


def _requirement(req: NodeSelectorRequirement, value: str | None) -> bool:
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(req.values) == 1:
        try:
            have, want = int(value), int(req.values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def _term(term: NodeSelectorTerm, node: NodeInfo) -> bool:
    if not term.expressions and not term.fields:
        return False  # an empty term matches no objects (k8s.io/component-helpers nodeaffinity)
    return all(_requirement(r, node.labels.get(r.key)) for r in term.expressions) and all(
        _requirement(r, node.name if r.key == "metadata.name" else None) for r in term.fields
    )


def matches_node_terms(terms: tuple[NodeSelectorTerm, ...], node: NodeInfo) -> bool:
    """Node selector terms ORed (required node affinity, a PersistentVolume's node affinity)."""
    return any(_term(t, node) for t in terms)


def matches_selector_and_affinity(
    selector: Mapping[str, str], affinity: tuple[NodeSelectorTerm, ...] | None, node: NodeInfo
) -> bool:
    """kube-scheduler's PodMatchesNodeSelectorAndAffinityTerms."""
    if any(node.labels.get(k) != v for k, v in selector.items()):
        return False
    return affinity is None or matches_node_terms(affinity, node)
