"""NodeUnschedulable: a cordoned node (``spec.unschedulable``) takes only pods that tolerate
``node.kubernetes.io/unschedulable:NoSchedule`` (nodeunschedulable/node_unschedulable.go, 1.20).

Whether the pod tolerates it is decided once per pod (``prepare``; a pod that does has nothing to
check); the filter reads only the node's flag.
"""

from __future__ import annotations

from vgpu_guard.engine.cluster import NodeInfo, Taint
from vgpu_guard.engine.node_terms import tolerates
from vgpu_guard.engine.placement_reason import NodeFailure
from vgpu_guard.engine.scheduling.facts import PodFacts
from vgpu_guard.engine.scheduling.plugin import Snapshot

NAME = "NodeUnschedulable"
UNSCHEDULABLE = NodeFailure("unschedulable")
UNSCHEDULABLE_TAINT = Taint(key="node.kubernetes.io/unschedulable", value="", effect="NoSchedule")


class NodeUnschedulable:
    name = NAME

    def prepare(self, pod: PodFacts, snapshot: Snapshot) -> bool | None:
        return None if tolerates(pod.tolerations, UNSCHEDULABLE_TAINT) else True

    def filter(self, state: bool, node: NodeInfo) -> NodeFailure | None:
        return UNSCHEDULABLE if node.unschedulable else None


PLUGIN = NodeUnschedulable()
