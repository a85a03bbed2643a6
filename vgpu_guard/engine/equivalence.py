"""Pods the per-node checks cannot tell apart, so one evaluation of a node serves them all.

A burst of replicas (a Deployment, a Job, a Volcano job's tasks) asks the same of every node, and
spread weighs up to ``TIE_CANDIDATES`` equally packed nodes per pod: evaluating each node again
for each replica is most of what a placement costs. kube-scheduler once kept an equivalence class
cache for the same reason; here it is narrower, and safe by construction:

- the class holds everything the node checks read of the pod (GPU requests, mode, node selector,
  affinity and tolerations, uuid and type filters, the PodGroup for Volcano's spread, and what
  kube-scheduler's node-local filters read: requests, host ports, a preset node name), and nothing
  of its identity (name, UID, priority, creation time);
- pods whose answer on one node depends on other nodes or on other objects get no class and are
  always evaluated: pod (anti-)affinity, topology spread, volumes, and any pod at all while a
  placed pod carries required anti-affinity (it can refuse a newcomer on every node of its domain);
- the memo remembers a node's answer with the node's epochs (its cards and ledger, its counted
  pods) and is used only while both are unchanged (``NodeSearch._judge``).
"""

from __future__ import annotations

from collections.abc import Hashable

from vgpu_guard.engine.pod_request import PodRequest

__all__ = ["equivalence_class"]


def equivalence_class(pod: PodRequest, *, anti_affinity_pods: int) -> Hashable | None:
    """What a node's verdict on ``pod`` depends on, or None when it depends on more than the node."""
    facts = pod.facts
    if facts is not None:
        if facts.affinity or facts.anti_affinity or facts.spread or facts.claims or anti_affinity_pods:
            return None
        node_facts: Hashable = (
            frozenset(facts.requests.items()),
            facts.host_ports,
            facts.node_name,
            frozenset(facts.node_selector.items()),
            facts.node_affinity,
            facts.tolerations,
            facts.unsupported,
        )
    else:
        node_facts = None
    return (
        pod.namespace,
        pod.containers,
        pod.mode,
        frozenset(pod.node_selector.items()),
        pod.affinity,
        pod.tolerations,
        pod.use_types,
        pod.nouse_types,
        pod.use_uuids,
        pod.nouse_uuids,
        pod.group,
        pod.podgroup_spread,
        node_facts,
    )
