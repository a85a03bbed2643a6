"""NodeAffinity: the pod's ``nodeSelector`` and required node affinity (nodeaffinity, 1.20:
PodMatchesNodeSelectorAndAffinityTerms; terms ORed, requirements ANDed, matchFields on
``metadata.name``). Matching is ``node_terms``' (PodTopologySpread and VolumeBinding share it).

A pod with neither has nothing to check. The allocator finds the nodes a nodeSelector admits from
its label index and counts every other node as this plugin's failure without running it.
"""

from __future__ import annotations

from collections.abc import Mapping

from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.node_terms import NodeSelectorTerm, matches_selector_and_affinity
from vgpu_guard.engine.placement_reason import NodeFailure
from vgpu_guard.engine.scheduling.facts import PodFacts
from vgpu_guard.engine.scheduling.plugin import Snapshot

NAME = "NodeAffinity"
SELECTOR = NodeFailure("selector")

State = tuple[Mapping[str, str], tuple[NodeSelectorTerm, ...] | None]


class NodeAffinity:
    name = NAME

    def prepare(self, pod: PodFacts, snapshot: Snapshot) -> State | None:
        if not pod.node_selector and pod.node_affinity is None:
            return None
        return (pod.node_selector, pod.node_affinity)

    def filter(self, state: State, node: NodeInfo) -> NodeFailure | None:
        return None if matches_selector_and_affinity(state[0], state[1], node) else SELECTOR


PLUGIN = NodeAffinity()
