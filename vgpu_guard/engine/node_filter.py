"""Node-level predicates: may this pod run on this node at all, and if not, why (one reason).

kube-scheduler semantics for the parts our pods use: Ready, ``spec.unschedulable`` (tolerable via
``node.kubernetes.io/unschedulable:NoSchedule``), ``nodeSelector``, required node affinity (terms
ORed, requirements ANDed; In, NotIn, Exists, DoesNotExist, Gt, Lt; matchFields on metadata.name),
and NoSchedule/NoExecute taints against tolerations. The reason strings are grouped and counted
by ``placement_reason`` into the ``0/N nodes are available`` message.
"""

from __future__ import annotations

from collections.abc import Mapping

from vgpu_guard.engine.cluster import NodeInfo, Taint
from vgpu_guard.engine.pod_request import NodeSelectorRequirement, NodeSelectorTerm, PodRequest, Toleration

__all__ = [
    "matches_node_terms",
    "matches_selector_and_affinity",
    "node_rejection",
    "readiness_rejection",
    "tolerates",
]

_UNSCHEDULABLE_TAINT = Taint(key="node.kubernetes.io/unschedulable", value="", effect="NoSchedule")


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


def _taint_text(taint: Taint) -> str:
    return f"{{{taint.key}: {taint.value}}}" if taint.value else f"{{{taint.key}}}"


def readiness_rejection(pod: PodRequest, node: NodeInfo) -> str | None:
    """The checks before the node selector's: Ready, and a cordon the pod does not tolerate.

    Apart so that a node a nodeSelector leaves out can be counted without the rest (the
    allocator's label index); ``node_rejection`` runs them first.
    """
    if not node.ready:
        return "not-ready"
    if node.unschedulable and not tolerates(pod.tolerations, _UNSCHEDULABLE_TAINT):
        return "unschedulable"
    return None


def node_rejection(pod: PodRequest, node: NodeInfo) -> str | None:
    """Why ``pod`` cannot use ``node`` regardless of its GPUs, or None; phrased for counting.

    Each reason is written for one node ("is not ready"); ``placement_reason`` pluralises.
    """
    early = readiness_rejection(pod, node)
    if early is not None:
        return early
    if not matches_selector_and_affinity(pod.node_selector, pod.affinity, node):
        return "selector"
    for taint in node.taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not tolerates(pod.tolerations, taint):
            return "taint:" + _taint_text(taint)
    return None
