"""VolumeZone: a bound volume labelled with a zone or region needs a node in one of them.

volumezone (1.20): only nodes that carry a zone or region label are checked; for each such label
on the volume (a ``__``-separated set of values, each trimmed; a set with an empty member is
ignored, as LabelZonesToSet's error is), the node's value must be in the set.
"""

from __future__ import annotations

from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.scheduling.facts import PodFacts
from vgpu_guard.engine.scheduling.workloads import Workloads
from vgpu_guard.engine.untrusted import as_mapping

NAME = "VolumeZone"
REASON = "node(s) had no available volume zone"
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


def volume_zone(pod: PodFacts, node: NodeInfo, workloads: Workloads) -> tuple[str, ...]:
    constraints = {k: node.labels[k] for k in ZONE_LABELS if k in node.labels}
    if not constraints or not pod.claims:
        return ()
    for claim in pod.claims:
        volume = workloads.volume_of(pod.namespace, claim)
        labels = as_mapping(as_mapping(as_mapping(volume).get("metadata")).get("labels"))
        for key, value in labels.items():
            zones = _zones(str(value)) if key in ZONE_LABELS else None
            if zones is not None and constraints.get(key, "") not in zones:
                return (REASON,)
    return ()
