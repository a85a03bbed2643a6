"""PodTopologySpread: ``whenUnsatisfiable: DoNotSchedule`` constraints and their ``maxSkew``.

podtopologyspread/filtering.go: the domains are the values of the topology key on the nodes that
match the pod's node selector and required affinity and carry every constraint's key; each domain
counts the pods (in the pod's namespace, not terminating) its selector matches. A node fails when
it lacks a key (reason "(missing required label)"), or when its domain's count plus the pod itself
(if the selector matches it) exceeds the smallest domain's count by more than ``maxSkew``.

Later releases (not in 1.20, read as documented): ``minDomains`` (fewer eligible domains than that
make the global minimum 0), ``nodeAffinityPolicy: Ignore`` (every node's domain counts) and
``nodeTaintsPolicy: Honor`` (nodes whose taints the pod does not tolerate do not count).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.node_terms import matches_selector_and_affinity, tolerates
from vgpu_guard.engine.scheduling.facts import PodFacts, SpreadConstraint
from vgpu_guard.engine.scheduling.workloads import Workloads

NAME = "PodTopologySpread"
REASON = "node(s) didn't match pod topology spread constraints"
MISSING_LABEL = REASON + " (missing required label)"


@dataclass(frozen=True)
class SpreadState:
    pod: PodFacts
    # Per constraint: matching pods per domain value (only eligible domains are keys).
    counts: tuple[Counter[str], ...]


def _eligible(pod: PodFacts, constraint: SpreadConstraint, node: NodeInfo) -> bool:
    if constraint.honor_node_affinity and not matches_selector_and_affinity(
        pod.node_selector, pod.node_affinity, node
    ):
        return False
    return not constraint.honor_node_taints or all(
        tolerates(pod.tolerations, t) for t in node.taints if t.effect in ("NoSchedule", "NoExecute")
    )


def _new_policies(constraint: SpreadConstraint) -> bool:
    return not constraint.honor_node_affinity or constraint.honor_node_taints


def prepare(pod: PodFacts, nodes: Mapping[str, NodeInfo], workloads: Workloads) -> SpreadState:
    complete = [n for n in nodes.values() if all(c.topology_key in n.labels for c in pod.spread)]
    counts: list[Counter[str]] = []
    for constraint in pod.spread:
        key = constraint.topology_key
        eligible = [n for n in complete if _eligible(pod, constraint, n)]
        domains: Counter[str] = Counter({n.labels[key]: 0 for n in eligible})
        # 1.20 counts the pods of every node whose value names an eligible domain; releases with
        # the inclusion policies count only the eligible nodes' pods.
        counted = eligible if _new_policies(constraint) else list(nodes.values())
        for node in counted:
            value = node.labels.get(key, "")
            if value not in domains or constraint.selector is None:
                continue
            for other in workloads.usage(node.name).pods.values():
                if (
                    other.uid != pod.uid
                    and not other.deleting
                    and other.namespace == pod.namespace
                    and constraint.selector.matches(other.labels)
                ):
                    domains[value] += 1
        counts.append(domains)
    return SpreadState(pod, tuple(counts))


def pod_topology_spread(state: SpreadState, node: NodeInfo) -> tuple[str, ...]:
    for constraint, domains in zip(state.pod.spread, state.counts, strict=True):
        value = node.labels.get(constraint.topology_key)
        if value is None:
            return (MISSING_LABEL,)
        if not domains:
            continue  # no eligible domain: kube's minimum is MaxInt32, nothing can exceed it
        minimum = min(domains.values())
        if constraint.min_domains is not None and len(domains) < constraint.min_domains:
            minimum = 0
        selector = constraint.selector
        self_match = 1 if selector is not None and selector.matches(state.pod.labels) else 0
        if domains.get(value, 0) + self_match - minimum > constraint.max_skew:
            return (REASON,)
    return ()
