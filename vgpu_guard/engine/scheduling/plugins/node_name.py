"""NodeName: a pod that already names a node fits only that node."""

from __future__ import annotations

from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.scheduling.facts import PodFacts

NAME = "NodeName"
REASON = "node(s) didn't match the requested hostname"


def node_name(pod: PodFacts, node: NodeInfo) -> tuple[str, ...]:
    return (REASON,) if pod.node_name and pod.node_name != node.name else ()
