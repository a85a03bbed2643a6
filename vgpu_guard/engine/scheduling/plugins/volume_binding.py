"""VolumeBinding, for claims that are already bound: the PersistentVolume's node affinity.

volumebinding (1.20): a claim that does not exist, or is being deleted, fails the pod on every
node with kube-scheduler's words. Binding an unbound claim (finding or provisioning a volume,
WaitForFirstConsumer) is kube-scheduler's own work, which vgpu-guard does not repeat: such a pod
is refused with a message that says so (``refusal``), never bound blindly. A claim is bound when it
names a volume and carries ``pv.kubernetes.io/bind-completed`` (``isPVCFullyBound``: until then a
pre-bound claim is "unbound immediate" there). For bound claims, a node fails when the volume's
``spec.nodeAffinity.required`` does not select it: each volume's terms are parsed once per pod
(``prepare``), not per node.
"""

from __future__ import annotations

from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.node_terms import NodeSelectorTerm, matches_node_terms, node_selector_terms
from vgpu_guard.engine.placement_reason import NodeFailure
from vgpu_guard.engine.scheduling.facts import PodFacts
from vgpu_guard.engine.scheduling.plugin import Refusal, Snapshot, rejected
from vgpu_guard.engine.scheduling.workloads import Workloads
from vgpu_guard.engine.untrusted import as_mapping

NAME = "VolumeBinding"
CONFLICT = "node(s) had volume node affinity conflict"
# Set by the PV controller when it completes a binding (pkg/controller/volume/persistentvolume/util).
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
_CONFLICT = rejected(CONFLICT)

# Per bound volume that has a required node affinity: its node selector terms (ORed).
State = tuple[tuple[NodeSelectorTerm, ...], ...]


def refusal(pod: PodFacts, workloads: Workloads) -> str | None:
    """Why no node can take the pod because of its claims (the same reason on every node).

    In kube-scheduler's order: every claim must exist and not be deleted (``podHasPVCs``), then be
    fully bound, naming a volume and annotated ``pv.kubernetes.io/bind-completed``
    (``isPVCFullyBound``), then its volume must exist."""
    found = []
    for claim in pod.claims:
        obj = workloads.claims.get((pod.namespace, claim))
        if obj is None:
            return f'persistentvolumeclaim "{claim}" not found'
        if as_mapping(obj.get("metadata")).get("deletionTimestamp"):
            return f'persistentvolumeclaim "{claim}" is being deleted'
        found.append((claim, obj))
    for claim, obj in found:
        annotations = as_mapping(as_mapping(obj.get("metadata")).get("annotations"))
        if not as_mapping(obj.get("spec")).get("volumeName") or BIND_COMPLETED not in annotations:
            return (
                f'persistentvolumeclaim "{claim}" is not bound yet: binding volumes is left to '
                "kube-scheduler, so vgpu-guard does not place this pod; bind the claim first or "
                "let the pod's volumes be bound by a scheduler that provisions them"
            )
    for claim, obj in found:
        volume = str(as_mapping(obj.get("spec")).get("volumeName"))
        if volume not in workloads.volumes:
            return f'persistentvolume "{volume}" of persistentvolumeclaim "{claim}" not found'
    return None


def _required_terms(pod: PodFacts, workloads: Workloads) -> State:
    terms = []
    for claim in pod.claims:
        volume = workloads.volume_of(pod.namespace, claim)
        required = as_mapping(as_mapping(as_mapping(volume).get("spec")).get("nodeAffinity")).get("required")
        if required is not None:
            terms.append(node_selector_terms(as_mapping(required).get("nodeSelectorTerms")))
    return tuple(terms)


class VolumeBinding:
    name = NAME

    def prepare(self, pod: PodFacts, snapshot: Snapshot) -> State | Refusal | None:
        if not pod.claims:
            return None
        reason = refusal(pod, snapshot.workloads)
        if reason is not None:
            return Refusal(reason)
        return _required_terms(pod, snapshot.workloads) or None

    def filter(self, state: State, node: NodeInfo) -> NodeFailure | None:
        return None if all(matches_node_terms(terms, node) for terms in state) else _CONFLICT


PLUGIN = VolumeBinding()
