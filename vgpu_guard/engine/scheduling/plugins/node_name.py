"""NodeName: a pod that already names a node fits only that node."""

from __future__ import annotations

from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.placement_reason import NodeFailure
from vgpu_guard.engine.scheduling.facts import PodFacts
from vgpu_guard.engine.scheduling.plugin import Snapshot, rejected

NAME = "NodeName"
REASON = "node(s) didn't match the requested hostname"
_FAILURE = rejected(REASON)


class NodeName:
    name = NAME

    def prepare(self, pod: PodFacts, snapshot: Snapshot) -> str | None:
        return pod.node_name or None

    def filter(self, state: str, node: NodeInfo) -> NodeFailure | None:
        return _FAILURE if state != node.name else None


PLUGIN = NodeName()
