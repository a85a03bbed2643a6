"""InterPodAffinity: required pod affinity and anti-affinity, the pod's and the existing pods'.

interpodaffinity/filtering.go: counts per (topology key, value) are taken over every node once per
pod (``prepare``); a node then fails when
- an affinity term's topology key is missing on it, or some term has no matching pod in its
  domain (unless no pod anywhere matches and the pod matches all its own terms: the first of a
  group that wants to be together may go anywhere that has the keys);
- an anti-affinity term's domain on it holds a matching pod;
- an existing pod's anti-affinity term matches this pod and the node is in that pod's domain.
Each failure gives two reasons, the general one and the specific one, as kube-scheduler does.
A pod with no terms of its own skips the plugin while no placed pod has required anti-affinity.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.placement_reason import NodeFailure
from vgpu_guard.engine.scheduling.facts import AffinityTerm, PodFacts
from vgpu_guard.engine.scheduling.plugin import Snapshot, rejected
from vgpu_guard.engine.scheduling.workloads import Workloads

NAME = "InterPodAffinity"
GENERAL = "node(s) didn't match pod affinity/anti-affinity"
AFFINITY = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
_AFFINITY = rejected(GENERAL, AFFINITY)
_ANTI_AFFINITY = rejected(GENERAL, ANTI_AFFINITY)
_EXISTING_ANTI_AFFINITY = rejected(GENERAL, EXISTING_ANTI_AFFINITY)

Pair = tuple[str, str]


@dataclass(frozen=True)
class AffinityState:
    pod: PodFacts
    affinity: Counter[Pair]
    anti_affinity: Counter[Pair]
    existing_anti_affinity: Counter[Pair]
    # No pod anywhere matches the affinity terms, and the pod matches all of them itself.
    first_of_group: bool


def _matches_all(
    pod: PodFacts, terms: tuple[AffinityTerm, ...], labels: Mapping[str, Mapping[str, str]]
) -> bool:
    return bool(terms) and all(t.matches(pod, labels) for t in terms)


def _counts(pod: PodFacts, nodes: Mapping[str, NodeInfo], workloads: Workloads) -> AffinityState:
    affinity: Counter[Pair] = Counter()
    anti: Counter[Pair] = Counter()
    existing: Counter[Pair] = Counter()
    ns_labels = workloads.namespace_labels
    for name, usage in workloads.nodes_with_pods():
        node = nodes.get(name)
        if node is None:
            continue
        for other in usage.pods.values():
            if other.uid == pod.uid:
                continue
            if pod.affinity and _matches_all(other, pod.affinity, ns_labels):
                for term in pod.affinity:
                    if term.topology_key in node.labels:
                        affinity[(term.topology_key, node.labels[term.topology_key])] += 1
            for term in pod.anti_affinity:
                if term.topology_key in node.labels and term.matches(other, ns_labels):
                    anti[(term.topology_key, node.labels[term.topology_key])] += 1
            for term in other.anti_affinity:
                if term.topology_key in node.labels and term.matches(pod, ns_labels):
                    existing[(term.topology_key, node.labels[term.topology_key])] += 1
    first = not affinity and _matches_all(pod, pod.affinity, ns_labels)
    return AffinityState(pod, affinity, anti, existing, first)


def _satisfies_affinity(state: AffinityState, node: NodeInfo) -> bool:
    pods_exist = True
    for term in state.pod.affinity:
        value = node.labels.get(term.topology_key)
        if value is None:
            return False
        if state.affinity[(term.topology_key, value)] <= 0:
            pods_exist = False
    return pods_exist or state.first_of_group


class InterPodAffinity:
    name = NAME

    def prepare(self, pod: PodFacts, snapshot: Snapshot) -> AffinityState | None:
        workloads = snapshot.workloads
        if not (pod.affinity or pod.anti_affinity or workloads.anti_affinity_pods):
            return None
        return _counts(pod, snapshot.nodes, workloads)

    def filter(self, state: AffinityState, node: NodeInfo) -> NodeFailure | None:
        if not _satisfies_affinity(state, node):
            return _AFFINITY
        for term in state.pod.anti_affinity:
            value = node.labels.get(term.topology_key)
            if value is not None and state.anti_affinity[(term.topology_key, value)] > 0:
                return _ANTI_AFFINITY
        if state.existing_anti_affinity and any(
            state.existing_anti_affinity[pair] > 0 for pair in node.labels.items()
        ):
            return _EXISTING_ANTI_AFFINITY
        return None


PLUGIN = InterPodAffinity()
