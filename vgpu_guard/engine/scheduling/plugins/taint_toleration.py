"""TaintToleration: every NoSchedule and NoExecute taint of the node must be tolerated
(tainttoleration/taint_toleration.go, 1.20); the first one that is not is named in the reason.
PreferNoSchedule only scores there, so it is not checked.
"""

from __future__ import annotations

from vgpu_guard.engine.cluster import NodeInfo, Taint
from vgpu_guard.engine.node_terms import Toleration, tolerates
from vgpu_guard.engine.placement_reason import NodeFailure
from vgpu_guard.engine.scheduling.facts import PodFacts
from vgpu_guard.engine.scheduling.plugin import Snapshot

NAME = "TaintToleration"
CODE = "taint"
_EFFECTS = ("NoSchedule", "NoExecute")


def taint_text(taint: Taint) -> str:
    """How the reason names the taint: ``{key: value}``, or ``{key}`` without a value."""
    return f"{{{taint.key}: {taint.value}}}" if taint.value else f"{{{taint.key}}}"


class TaintToleration:
    name = NAME

    def prepare(self, pod: PodFacts, snapshot: Snapshot) -> tuple[Toleration, ...]:
        return pod.tolerations

    def filter(self, state: tuple[Toleration, ...], node: NodeInfo) -> NodeFailure | None:
        for taint in node.taints:
            if taint.effect in _EFFECTS and not tolerates(state, taint):
                return NodeFailure(CODE, taint_text(taint))
        return None


PLUGIN = TaintToleration()
