"""PodTopologySpread: ``whenUnsatisfiable: DoNotSchedule`` constraints and their ``maxSkew``.

podtopologyspread/filtering.go: the domains are the values of the topology key on the nodes that
match the pod's node selector and required affinity and carry every constraint's key; each domain
counts the pods (in the pod's namespace, not terminating) its selector matches. A node fails when
it lacks a key (reason "(missing required label)"), or when its domain's count plus the pod itself
(if the selector matches it) exceeds the smallest domain's count by more than ``maxSkew``.

Later releases (not in 1.20, read as documented): ``minDomains`` (fewer eligible domains than that
make the global minimum 0), ``nodeAffinityPolicy: Ignore`` (every node's domain counts) and
``nodeTaintsPolicy: Honor`` (nodes whose taints the pod does not tolerate do not count).

As ``calPreFilterState`` does, the domains' counts and each constraint's minimum (the critical
path) are computed once per pod in ``prepare``; the filter is then a lookup per constraint.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.node_terms import matches_selector_and_affinity, tolerates
from vgpu_guard.engine.placement_reason import NodeFailure
from vgpu_guard.engine.scheduling.facts import PodFacts, SpreadConstraint
from vgpu_guard.engine.scheduling.plugin import Snapshot, rejected
from vgpu_guard.engine.scheduling.workloads import Workloads

NAME = "PodTopologySpread"
REASON = "node(s) didn't match pod topology spread constraints"
MISSING_LABEL = REASON + " (missing required label)"
_SKEW = rejected(REASON)
_MISSING = rejected(MISSING_LABEL)


@dataclass(frozen=True, slots=True)
class Critical:
    """One constraint as its filter reads it: the domains' counts and their minimum."""

    topology_key: str
    max_skew: int
    # Matching pods per domain value (only eligible domains are keys).
    counts: Counter[str]
    # The smallest count (0 when fewer domains than minDomains); None: no eligible domain, so
    # kube's minimum is MaxInt32 and nothing can exceed it.
    minimum: int | None
    # 1 when the constraint's selector matches the incoming pod itself.
    self_match: int


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


def _counts(
    pod: PodFacts, constraint: SpreadConstraint, complete: list[NodeInfo], snapshot: Snapshot
) -> Counter[str]:
    key = constraint.topology_key
    eligible = [n for n in complete if _eligible(pod, constraint, n)]
    domains: Counter[str] = Counter({n.labels[key]: 0 for n in eligible})
    # 1.20 counts the pods of every node whose value names an eligible domain; releases with
    # the inclusion policies count only the eligible nodes' pods.
    counted = eligible if _new_policies(constraint) else list(snapshot.nodes.values())
    workloads: Workloads = snapshot.workloads
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
    return domains


def _critical(pod: PodFacts, constraint: SpreadConstraint, domains: Counter[str]) -> Critical:
    minimum = min(domains.values()) if domains else None
    if minimum is not None and constraint.min_domains is not None and len(domains) < constraint.min_domains:
        minimum = 0
    selector = constraint.selector
    self_match = 1 if selector is not None and selector.matches(pod.labels) else 0
    return Critical(constraint.topology_key, constraint.max_skew, domains, minimum, self_match)


class PodTopologySpread:
    name = NAME

    def prepare(self, pod: PodFacts, snapshot: Snapshot) -> tuple[Critical, ...] | None:
        if not pod.spread:
            return None
        complete = [n for n in snapshot.nodes.values() if all(c.topology_key in n.labels for c in pod.spread)]
        return tuple(_critical(pod, c, _counts(pod, c, complete, snapshot)) for c in pod.spread)

    def filter(self, state: tuple[Critical, ...], node: NodeInfo) -> NodeFailure | None:
        for c in state:
            value = node.labels.get(c.topology_key)
            if value is None:
                return _MISSING
            if c.minimum is not None and c.counts.get(value, 0) + c.self_match - c.minimum > c.max_skew:
                return _SKEW
        return None


PLUGIN = PodTopologySpread()
