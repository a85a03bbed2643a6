"""VolumeZone: a bound volume labelled with a zone or region needs a node in one of them.

volumezone (1.20): only nodes that carry a zone or region label are checked; for each such label
on the volume (a ``__``-separated set of values, each trimmed; a set with an empty member is
ignored, as LabelZonesToSet's error is), the node's value must be in the set. The volumes'
labels are read once per pod (``prepare``); a pod whose volumes carry none has nothing to check.
"""

from __future__ import annotations

from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.placement_reason import NodeFailure
from vgpu_guard.engine.scheduling.facts import PodFacts
from vgpu_guard.engine.scheduling.plugin import Snapshot, rejected
from vgpu_guard.engine.untrusted import as_mapping

NAME = "VolumeZone"
REASON = "node(s) had no available volume zone"
_FAILURE = rejected(REASON)
ZONE_LABELS = (
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
)


def _zones(value: str) -> frozenset[str] | None:
    """volumehelpers.LabelZonesToSet: ``__``-separated, members trimmed; None when a member is
    empty (VolumeZone then logs a warning and ignores the label)."""
    members = [m.strip() for m in value.split("__")]
    return None if "" in members else frozenset(members)


# Per zone or region label of the pod's bound volumes: the label and the values it allows.
State = tuple[tuple[str, frozenset[str]], ...]


class VolumeZone:
    name = NAME

    def prepare(self, pod: PodFacts, snapshot: Snapshot) -> State | None:
        wanted = []
        for claim in pod.claims:
            volume = snapshot.workloads.volume_of(pod.namespace, claim)
            labels = as_mapping(as_mapping(as_mapping(volume).get("metadata")).get("labels"))
            for key, value in labels.items():
                zones = _zones(str(value)) if key in ZONE_LABELS else None
                if zones is not None:
                    wanted.append((str(key), zones))
        return tuple(wanted) or None

    def filter(self, state: State, node: NodeInfo) -> NodeFailure | None:
        labels = node.labels
        if not any(k in labels for k in ZONE_LABELS):
            return None  # only nodes with a zone or region label are checked
        return _FAILURE if any(labels.get(key, "") not in zones for key, zones in state) else None


PLUGIN = VolumeZone()
