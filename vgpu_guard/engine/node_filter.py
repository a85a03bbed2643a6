"""Node-level predicates: may this pod run on this node at all, and if not, why (one reason).

kube-scheduler semantics for the parts our pods use: Ready, ``spec.unschedulable`` (tolerable via
``node.kubernetes.io/unschedulable:NoSchedule``), ``nodeSelector``, required node affinity (terms
ORed, requirements ANDed; In, NotIn, Exists, DoesNotExist, Gt, Lt; matchFields on metadata.name),
and NoSchedule/NoExecute taints against tolerations. The reason strings are grouped and counted
by ``placement_reason`` into the ``0/N nodes are available`` message. Matching terms and
tolerations is ``node_terms``' (shared with the scheduling plugins); this module gives the reasons.
"""

from __future__ import annotations

from vgpu_guard.engine.cluster import NodeInfo, Taint
from vgpu_guard.engine.node_terms import matches_selector_and_affinity, tolerates
from vgpu_guard.engine.pod_request import PodRequest

__all__ = ["node_rejection", "readiness_rejection"]

_UNSCHEDULABLE_TAINT = Taint(key="node.kubernetes.io/unschedulable", value="", effect="NoSchedule")


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
