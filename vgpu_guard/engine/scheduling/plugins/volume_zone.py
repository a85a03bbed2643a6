"""VolumeZone: a bound volume labelled with a zone or region needs a node in one of them.

volumezone (1.20): only nodes that carry a zone or region label are checked; for each such label
on the volume (a ``__``-separated set of values), the node's value must be in the set.
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


def volume_zone(pod: PodFacts, node: NodeInfo, workloads: Workloads) -> tuple[str, ...]:
    constraints = {k: node.labels[k] for k in ZONE_LABELS if k in node.labels}
    if not constraints or not pod.claims:
        return ()
    for claim in pod.claims:
        volume = workloads.volume_of(pod.namespace, claim)
        labels = as_mapping(as_mapping(as_mapping(volume).get("metadata")).get("labels"))
        for key, value in labels.items():
            if key in ZONE_LABELS and constraints.get(key, "") not in str(value).split("__"):
                return (REASON,)
    return ()
