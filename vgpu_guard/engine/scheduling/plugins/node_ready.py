"""NodeReady: a node whose Ready condition is not True takes no new pod.

Not a kube-scheduler plugin: there the node lifecycle controller taints such a node
``node.kubernetes.io/not-ready`` (TaintNodesByCondition) and TaintToleration refuses it. vgpu-guard
reads the condition itself, first, so that a node that is down is counted as such ("is not
ready") whatever the pod tolerates: binding a vGPU pod there would reserve GPUs nobody can use.
"""

from __future__ import annotations

from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.placement_reason import NodeFailure
from vgpu_guard.engine.scheduling.facts import PodFacts
from vgpu_guard.engine.scheduling.plugin import Snapshot

NAME = "NodeReady"
NOT_READY = NodeFailure("not-ready")


class NodeReady:
    name = NAME

    def prepare(self, pod: PodFacts, snapshot: Snapshot) -> bool:
        return True  # nothing of the pod matters: every node is checked

    def filter(self, state: bool, node: NodeInfo) -> NodeFailure | None:
        return None if node.ready else NOT_READY


PLUGIN = NodeReady()
