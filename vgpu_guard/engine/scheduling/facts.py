"""What kube-scheduler's filters read of a pod, parsed once: ``PodFacts``.

The same form serves the pod being placed and the pods already on nodes (their requests, host
ports, labels and required anti-affinity count against later pods). Fields 1.20 does not know
(spread ``minDomains``, ``nodeAffinityPolicy``, ``nodeTaintsPolicy``, ``matchLabelKeys``; affinity
``namespaceSelector``, ``matchLabelKeys``, ``mismatchLabelKeys``) are read with the semantics the
current kube-scheduler documents. What no filter here can judge is listed in ``unsupported`` and
the pod is refused with those words instead of being bound blindly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from vgpu_guard.engine.node_terms import NodeSelectorTerm, Toleration, affinity_terms, tolerations_of
from vgpu_guard.engine.resources import Resources, pod_requests
from vgpu_guard.engine.scheduling.labels import LabelSelector, Requirement, parse_selector
from vgpu_guard.engine.untrusted import as_list, as_mapping

__all__ = [
    "INLINE_DISKS",
    "AffinityTerm",
    "FactsMemo",
    "HostPort",
    "PodFacts",
    "SpreadConstraint",
    "has_required_anti_affinity",
    "pod_facts",
]

DEFAULT_HOST_IP = "0.0.0.0"


@dataclass(frozen=True, slots=True)
class HostPort:
    ip: str
    protocol: str
    port: int


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """One required pod (anti-)affinity term, resolved against the pod that carries it."""

    selector: LabelSelector | None
    topology_key: str
    # Namespaces named in the term (or the carrier's own when none and no namespaceSelector).
    namespaces: frozenset[str]
    # 1.21+: namespaces whose labels match also count; an empty selector means every namespace.
    namespace_selector: LabelSelector | None = None

    def matches(self, pod: PodFacts, namespace_labels: Mapping[str, Mapping[str, str]]) -> bool:
        """kube-scheduler's PodMatchesTermsNamespaceAndSelector."""
        in_scope = pod.namespace in self.namespaces or (
            self.namespace_selector is not None
            and self.namespace_selector.matches(namespace_labels.get(pod.namespace, {}))
        )
        return in_scope and self.selector is not None and self.selector.matches(pod.labels)


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """A ``whenUnsatisfiable: DoNotSchedule`` topology spread constraint."""

    max_skew: int
    topology_key: str
    selector: LabelSelector | None
    min_domains: int | None = None
    honor_node_affinity: bool = True  # nodeAffinityPolicy Honor (the default)
    honor_node_taints: bool = False  # nodeTaintsPolicy Ignore (the default)


@dataclass(frozen=True, slots=True)
class PodFacts:
    uid: str
    namespace: str
    name: str
    labels: Mapping[str, str]
    node_name: str = ""
    requests: Resources = field(default_factory=dict)
    host_ports: tuple[HostPort, ...] = ()
    affinity: tuple[AffinityTerm, ...] = ()
    anti_affinity: tuple[AffinityTerm, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()
    claims: tuple[str, ...] = ()
    deleting: bool = False
    node_selector: Mapping[str, str] = field(default_factory=dict)
    node_affinity: tuple[NodeSelectorTerm, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()
    unsupported: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _host_ports(spec: Mapping[str, Any]) -> tuple[HostPort, ...]:
    # Only app containers: nodeports (and the kubelet) ignore init containers' ports.
    out = []
    for container in as_list(spec.get("containers")):
        for item in as_list(as_mapping(container).get("ports")):
            port = as_mapping(item)
            number = port.get("hostPort")
            if isinstance(number, int) and not isinstance(number, bool) and number > 0:
                ip = str(port.get("hostIP") or DEFAULT_HOST_IP)
                out.append(HostPort(ip, str(port.get("protocol") or "TCP"), number))
    return tuple(out)


def _with_label_keys(
    selector: LabelSelector | None, labels: Mapping[str, str], keys: object, operator: str
) -> LabelSelector | None:
    """``matchLabelKeys`` (In) / ``mismatchLabelKeys`` (NotIn): the carrier's own label values."""
    extra = tuple(
        Requirement(str(k), operator, frozenset({labels[str(k)]})) for k in as_list(keys) if str(k) in labels
    )
    if selector is None or not extra:
        return selector
    return LabelSelector(selector.requirements + extra)


def _affinity_terms(raw: object, namespace: str, labels: Mapping[str, str]) -> tuple[AffinityTerm, ...]:
    terms = []
    for item in as_list(raw):
        term = as_mapping(item)
        named = frozenset(str(n) for n in as_list(term.get("namespaces")))
        ns_selector = parse_selector(term.get("namespaceSelector"))
        if not named and ns_selector is None:
            named = frozenset({namespace})
        selector = _with_label_keys(
            parse_selector(term.get("labelSelector")), labels, term.get("matchLabelKeys"), "In"
        )
        selector = _with_label_keys(selector, labels, term.get("mismatchLabelKeys"), "NotIn")
        terms.append(AffinityTerm(selector, str(term.get("topologyKey") or ""), named, ns_selector))
    return tuple(terms)


def _spread(spec: Mapping[str, Any], labels: Mapping[str, str]) -> tuple[SpreadConstraint, ...]:
    out = []
    for item in as_list(spec.get("topologySpreadConstraints")):
        raw = as_mapping(item)
        if raw.get("whenUnsatisfiable") != "DoNotSchedule":
            continue  # ScheduleAnyway only scores
        skew = raw.get("maxSkew")
        min_domains = raw.get("minDomains")
        out.append(
            SpreadConstraint(
                max_skew=skew if isinstance(skew, int) and not isinstance(skew, bool) else 1,
                topology_key=str(raw.get("topologyKey") or ""),
                selector=_with_label_keys(
                    parse_selector(raw.get("labelSelector")), labels, raw.get("matchLabelKeys"), "In"
                ),
                min_domains=min_domains
                if isinstance(min_domains, int) and not isinstance(min_domains, bool)
                else None,
                honor_node_affinity=raw.get("nodeAffinityPolicy") != "Ignore",
                honor_node_taints=raw.get("nodeTaintsPolicy") == "Honor",
            )
        )
    return tuple(out)


# Inline volumes that VolumeRestrictions (one writer per disk on a node) and NodeVolumeLimits
# (attach limits per node) judge: they need the other pods' disks and the nodes' limits.
INLINE_DISKS = ("gcePersistentDisk", "awsElasticBlockStore", "azureDisk", "rbd", "iscsi", "cinder", "csi")


def _unsupported(spec: Mapping[str, Any]) -> tuple[str, ...]:
    out = []
    volumes = [as_mapping(v) for v in as_list(spec.get("volumes"))]
    if as_list(spec.get("resourceClaims")):
        out.append("dynamic resource allocation (spec.resourceClaims)")
    if any(v.get("ephemeral") for v in volumes):
        out.append("generic ephemeral volumes (spec.volumes[].ephemeral)")
    disks = sorted({kind for v in volumes for kind in INLINE_DISKS if kind in v})
    if disks:
        out.append(f"inline {', '.join(disks)} volumes (VolumeRestrictions, NodeVolumeLimits)")
    return tuple(out)


_NO_STRINGS: Mapping[str, str] = MappingProxyType({})


def _strings(raw: object) -> Mapping[str, str]:
    """A string map: the decoded one itself when it already is one (cached objects are never
    mutated), so 100,000 pods' facts do not each copy their labels; one shared empty map."""
    mapping = as_mapping(raw)
    if not mapping:
        return _NO_STRINGS
    if isinstance(mapping, dict) and all(type(k) is str and type(v) is str for k, v in mapping.items()):
        return mapping
    return {str(k): str(v) for k, v in mapping.items()}


def pod_facts(pod: Mapping[str, Any]) -> PodFacts:
    """The pod as the filters read it (never raises: unreadable parts read as absent)."""
    metadata, spec = as_mapping(pod.get("metadata")), as_mapping(pod.get("spec"))
    namespace = str(metadata.get("namespace") or "default")
    labels = _strings(metadata.get("labels"))
    affinity = as_mapping(spec.get("affinity"))
    required = "requiredDuringSchedulingIgnoredDuringExecution"
    return PodFacts(
        uid=str(metadata.get("uid") or ""),
        namespace=namespace,
        name=str(metadata.get("name") or ""),
        labels=labels,
        node_name=str(spec.get("nodeName") or ""),
        requests=pod_requests(spec),
        host_ports=_host_ports(spec),
        affinity=_affinity_terms(as_mapping(affinity.get("podAffinity")).get(required), namespace, labels),
        anti_affinity=_affinity_terms(
            as_mapping(affinity.get("podAntiAffinity")).get(required), namespace, labels
        ),
        spread=_spread(spec, labels),
        claims=tuple(
            str(claim)
            for v in as_list(spec.get("volumes"))
            if (claim := as_mapping(as_mapping(v).get("persistentVolumeClaim")).get("claimName"))
        ),
        deleting=bool(metadata.get("deletionTimestamp")),
        node_selector=_strings(spec.get("nodeSelector")),
        node_affinity=affinity_terms(spec),
        tolerations=tolerations_of(spec),
        unsupported=_unsupported(spec),
    )


def has_required_anti_affinity(pod: Mapping[str, Any]) -> bool:
    """``bool(pod_facts(pod).anti_affinity)`` without deriving the rest: every item of the required
    list becomes one term, so the list being non-empty is the whole answer."""
    spec = pod.get("spec")
    if type(spec) is dict and not spec.get("affinity"):
        return False  # most pods, decided without the generic walk (a start asks for 100,000)
    affinity = as_mapping(as_mapping(as_mapping(spec).get("affinity")).get("podAntiAffinity"))
    return bool(as_list(affinity.get("requiredDuringSchedulingIgnoredDuringExecution")))


# What ``pod_facts`` reads of the spec besides the node name (with the namespace and labels).
_SHAPE_SPEC = ("containers", "initContainers", "overhead", "affinity", "topologySpreadConstraints",
               "volumes", "resourceClaims", "nodeSelector", "tolerations")  # fmt: skip


class FactsMemo:
    """``pod_facts``, reused for pods whose spec pieces are the very objects of an earlier pod's.

    A watch cache that hands out one shared object for equal pieces (kube/sharing.py) makes the
    replicas of a workload share their containers, affinity, tolerations, labels...: everything
    but their identity is then derived once. Identity, not equality, is compared, so a hit is
    never wrong (cached objects are never mutated); at most ``limit`` shapes are kept.
    """

    def __init__(self, limit: int = 10_000) -> None:
        self.limit = limit
        self._shapes: dict[tuple[object, ...], tuple[tuple[object, ...], PodFacts]] = {}

    def __call__(self, pod: Mapping[str, Any]) -> PodFacts:
        metadata, spec = as_mapping(pod.get("metadata")), as_mapping(pod.get("spec"))
        pieces = (metadata.get("labels"), *(spec.get(k) for k in _SHAPE_SPEC))
        key = (metadata.get("namespace"), *map(id, pieces))
        known = self._shapes.get(key)
        if known is not None and all(a is b for a, b in zip(known[0], pieces, strict=True)):
            return replace(
                known[1],
                uid=str(metadata.get("uid") or ""),
                name=str(metadata.get("name") or ""),
                node_name=str(spec.get("nodeName") or ""),
                deleting=bool(metadata.get("deletionTimestamp")),
            )
        facts = pod_facts(pod)
        if len(self._shapes) >= self.limit:
            self._shapes.clear()
        self._shapes[key] = (pieces, facts)
        return facts
