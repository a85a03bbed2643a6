"""InfiniBand clusters: which nodes form one, what a pod already pins, and how a choice is stamped.

A cluster is either the value of a node label (``topology.ibClusterLabel``) or a Volcano HyperNode
of tier ``topology.hyperNodeTier`` resolved to its leaf nodes. A gang runs inside one cluster, so
the mutating webhook writes the group's cluster into the pod's *required* node affinity. Terms of
``nodeSelectorTerms`` are ORed: the cluster requirement is added to EVERY term (adding it to one
term only would leave the others free to land anywhere).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import TopologySettings

__all__ = ["Clusters", "allowed_clusters", "ib_clusters", "stamp_cluster"]


@dataclass(frozen=True)
class Clusters:
    """Cluster name -> member node names; ``by_label`` says how a choice is expressed on pods."""

    members: Mapping[str, frozenset[str]]
    by_label: str | None


def _label_selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    match_labels = selector.get("matchLabels")
    if isinstance(match_labels, Mapping) and any(labels.get(k) != v for k, v in match_labels.items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        if not isinstance(expression, Mapping):
            return False
        key, operator = str(expression.get("key")), expression.get("operator")
        values = expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def _member_names(member: Mapping[str, Any], view: ClusterView) -> list[str]:
    selector = member.get("selector")
    if not isinstance(selector, Mapping):
        return []
    candidates: Mapping[str, Any] = view.nodes if member.get("type") == "Node" else view.hypernodes
    if isinstance(selector.get("exactMatch"), Mapping):
        wanted = selector["exactMatch"].get("name")
        return [wanted] if isinstance(wanted, str) and wanted in candidates else []
    if isinstance(selector.get("regexMatch"), Mapping):
        try:
            pattern = re.compile(str(selector["regexMatch"].get("pattern") or ""))
        except re.error:
            return []
        return [name for name in candidates if pattern.fullmatch(name)]
    if isinstance(selector.get("labelMatch"), Mapping) and member.get("type") == "Node":
        return [
            name for name, info in view.nodes.items() if _label_selects(selector["labelMatch"], info.labels)
        ]
    return []


def _hypernode_leaves(name: str, view: ClusterView, seen: frozenset[str] = frozenset()) -> frozenset[str]:
    """Leaf nodes of a HyperNode: Node members directly, HyperNode members recursively (cycle-safe)."""
    hypernode = view.hypernodes.get(name)
    spec = hypernode.get("spec") if hypernode is not None else None
    if not isinstance(spec, Mapping) or name in seen:
        return frozenset()
    leaves: set[str] = set()
    for member in spec.get("members") or []:
        if not isinstance(member, Mapping):
            continue
        names = _member_names(member, view)
        if member.get("type") == "Node":
            leaves.update(names)
        else:
            for child in names:
                leaves |= _hypernode_leaves(child, view, seen | {name})
    return frozenset(leaves)


def ib_clusters(view: ClusterView, settings: TopologySettings) -> Clusters:
    """The IB clusters of the view: HyperNodes of the configured tier, else the label's values."""
    if settings.hyper_node_tier is not None:
        members: dict[str, frozenset[str]] = {}
        for name, hypernode in sorted(view.hypernodes.items()):
            spec = hypernode.get("spec")
            if isinstance(spec, Mapping) and spec.get("tier") == settings.hyper_node_tier:
                leaves = _hypernode_leaves(name, view)
                if leaves:
                    members[name] = leaves
        return Clusters(members=members, by_label=None)
    label = settings.ib_cluster_label
    grouped: dict[str, set[str]] = {}
    for node in view.nodes.values():
        value = node.labels.get(label)
        if value:
            grouped.setdefault(value, set()).add(node.name)
    return Clusters(members={k: frozenset(v) for k, v in sorted(grouped.items())}, by_label=label)


def _terms(pod: Mapping[str, Any]) -> list[Any] | None:
    node = pod
    for key in ("spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"):
        child = node.get(key)
        if not isinstance(child, Mapping):
            return None
        node = child
    terms = node.get("nodeSelectorTerms")
    return terms if isinstance(terms, list) and terms else None


def _term_allows(term: Any, cluster: str, clusters: Clusters) -> bool:
    """Could this term select a node of ``cluster``, as far as the cluster key is concerned?"""
    if not isinstance(term, Mapping):
        return False
    if clusters.by_label is not None:
        for expression in term.get("matchExpressions") or []:
            if not isinstance(expression, Mapping) or expression.get("key") != clusters.by_label:
                continue
            values = expression.get("values") or []
            operator = expression.get("operator")
            if (operator == "In" and cluster not in values) or (operator == "NotIn" and cluster in values):
                return False
            if operator == "DoesNotExist":
                return False
        return True
    members = clusters.members.get(cluster, frozenset())
    for requirement in term.get("matchFields") or []:
        if isinstance(requirement, Mapping) and requirement.get("key") == "metadata.name":
            values = set(requirement.get("values") or [])
            if requirement.get("operator") == "In" and not (values & members):
                return False
            if requirement.get("operator") == "NotIn" and members <= values:
                return False
    return True


def allowed_clusters(pod: Mapping[str, Any], clusters: Clusters) -> frozenset[str]:
    """The clusters the pod's own nodeSelector and required node affinity leave open."""
    spec = pod.get("spec")
    selector = spec.get("nodeSelector") if isinstance(spec, Mapping) else None
    allowed = set(clusters.members)
    if clusters.by_label is not None and isinstance(selector, Mapping) and clusters.by_label in selector:
        allowed &= {str(selector[clusters.by_label])}
    terms = _terms(pod)
    if terms is not None:
        allowed = {c for c in allowed if any(_term_allows(t, c, clusters) for t in terms)}
    return frozenset(allowed)


def _requirement(cluster: str, clusters: Clusters) -> tuple[str, dict[str, Any]]:
    if clusters.by_label is not None:
        return "matchExpressions", {"key": clusters.by_label, "operator": "In", "values": [cluster]}
    members = sorted(clusters.members.get(cluster, frozenset()))
    return "matchFields", {"key": "metadata.name", "operator": "In", "values": members}


def stamp_cluster(pod: MutableMapping[str, Any], cluster: str, clusters: Clusters) -> bool:
    """Require ``cluster`` in every nodeSelectorTerm (creating the affinity if needed).

    Everything else in the pod's affinity is kept. Returns whether anything changed, so a second
    pass over a stamped pod is a no-op.
    """
    field, requirement = _requirement(cluster, clusters)
    required = pod
    for key in ("spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"):
        child = required.setdefault(key, {})
        if not isinstance(child, MutableMapping):
            return False  # not a pod the API server would have accepted; validation reports it
        required = child
    terms = required.get("nodeSelectorTerms")
    if not isinstance(terms, list) or not terms:
        required["nodeSelectorTerms"] = [{field: [requirement]}]
        return True
    changed = False
    for term in terms:
        if not isinstance(term, MutableMapping):
            continue
        existing = term.setdefault(field, [])
        if isinstance(existing, list) and requirement not in existing:
            existing.append(requirement)
            changed = True
    return changed
