"""Builders for the scheduling filter tests: plain dict pods and nodes, the filters' verdict per node.

Pods get a uid from their namespace and name (Workloads keys pods by uid). ``verdicts`` runs
kube-scheduler's filters beyond the node's own checks (``POD_PLUGINS``: PreFilter once, then every
filter on every node) the way the allocator does, so each plugin test also exercises the order in
which kube-scheduler reports the first failure; ``judged`` runs one plugin alone, ``node_verdicts``
the node's own checks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tests.builders import default_config
from vgpu_guard.engine.cluster import NodeInfo, node_info
from vgpu_guard.engine.placement_reason import NodeFailure
from vgpu_guard.engine.scheduling import Framework, Workloads, pod_facts
from vgpu_guard.engine.scheduling.framework import NODE_PLUGINS
from vgpu_guard.engine.scheduling.plugin import Plugin, Refusal, Snapshot

Obj = dict[str, Any]

DEFAULT_ALLOCATABLE = {"cpu": "4", "memory": "8Gi", "pods": "110"}


def node_obj(
    name: str,
    labels: Mapping[str, str] | None = None,
    *,
    allocatable: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
) -> Obj:
    """A Node object; ``allocatable`` replaces the default (which has ``pods``: every node needs it)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {"taints": [dict(t) for t in taints]},
        "status": {
            "allocatable": dict(DEFAULT_ALLOCATABLE if allocatable is None else allocatable),
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def node(
    name: str,
    labels: Mapping[str, str] | None = None,
    *,
    allocatable: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
) -> NodeInfo:
    return node_info(node_obj(name, labels, allocatable=allocatable, taints=taints), default_config())


def container(
    name: str = "c",
    requests: Mapping[str, str] | None = None,
    ports: Sequence[Mapping[str, Any]] = (),
) -> Obj:
    out: Obj = {"name": name, "image": "busybox"}
    if requests is not None:
        out["resources"] = {"requests": dict(requests)}
    if ports:
        out["ports"] = [dict(p) for p in ports]
    return out


def pod(
    name: str = "p",
    *,
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    node: str | None = None,
    requests: Mapping[str, str] | None = None,
    containers: Sequence[Obj] | None = None,
    init_containers: Sequence[Obj] = (),
    affinity: Sequence[Obj] | None = None,
    anti_affinity: Sequence[Obj] | None = None,
    node_affinity: Sequence[Obj] | None = None,
    deleting: bool = False,
    **spec: Any,
) -> Obj:
    """A Pod; ``requests`` makes one container with those requests unless ``containers`` is given.

    ``affinity``/``anti_affinity`` are required pod (anti-)affinity terms, ``node_affinity`` the
    required node affinity's nodeSelectorTerms."""
    metadata: Obj = {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}"}
    if labels is not None:
        metadata["labels"] = dict(labels)
    if deleting:
        metadata["deletionTimestamp"] = "2025-06-12T19:00:00Z"
    body: Obj = {"containers": list(containers) if containers is not None else [container(requests=requests)]}
    if init_containers:
        body["initContainers"] = list(init_containers)
    if node is not None:
        body["nodeName"] = node
    if affinity is not None or anti_affinity is not None or node_affinity is not None:
        body["affinity"] = {}
        if node_affinity is not None:
            body["affinity"]["nodeAffinity"] = {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(node_affinity)}
            }
        if affinity is not None:
            body["affinity"]["podAffinity"] = {
                "requiredDuringSchedulingIgnoredDuringExecution": list(affinity)
            }
        if anti_affinity is not None:
            body["affinity"]["podAntiAffinity"] = {
                "requiredDuringSchedulingIgnoredDuringExecution": list(anti_affinity)
            }
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": body}


def term(
    selector: Obj | None,
    topology_key: str,
    *,
    namespaces: Sequence[str] | None = None,
    namespace_selector: Obj | None = None,
    **extra: Any,
) -> Obj:
    """A PodAffinityTerm; ``selector`` None leaves labelSelector out (which matches nothing)."""
    out: Obj = {"topologyKey": topology_key, **extra}
    if selector is not None:
        out["labelSelector"] = selector
    if namespaces is not None:
        out["namespaces"] = list(namespaces)
    if namespace_selector is not None:
        out["namespaceSelector"] = namespace_selector
    return out


def exists(*keys: str) -> Obj:
    return {"matchExpressions": [{"key": k, "operator": "Exists"} for k in keys]}


def expr(key: str, operator: str, *values: str) -> Obj:
    return {"matchExpressions": [{"key": key, "operator": operator, "values": list(values)}]}


def workloads(
    existing: Iterable[Obj] = (),
    *,
    claims: Iterable[Obj] = (),
    volumes: Iterable[Obj] = (),
    namespaces: Iterable[Obj] = (),
) -> Workloads:
    """Existing pods counted on their ``spec.nodeName``."""
    return Workloads(
        [(pod_facts(p), p["spec"]["nodeName"]) for p in existing],
        claims=claims,
        volumes=volumes,
        namespaces=namespaces,
    )


def verdicts(
    incoming: Obj,
    nodes: Sequence[NodeInfo],
    existing: Iterable[Obj] = (),
    *,
    later: frozenset[str] = frozenset(),
    **kw: Any,
) -> dict[str, tuple[str, ...]]:
    """Every node's failing reasons for ``incoming`` (empty: the node passes every filter)."""
    framework = Framework({n.name: n for n in nodes}, workloads(existing, **kw), node_plugins=())
    cycle = framework.prepare(pod_facts(incoming), later=later)
    return {n.name: _reasons(cycle.filter(n)) for n in nodes}


def _reasons(failure: NodeFailure | None) -> tuple[str, ...]:
    return () if failure is None else failure.reasons


def passing(incoming: Obj, nodes: Sequence[NodeInfo], existing: Iterable[Obj] = (), **kw: Any) -> list[str]:
    """The names of the nodes that pass, in the order given."""
    return [name for name, reasons in verdicts(incoming, nodes, existing, **kw).items() if not reasons]


def node_verdicts(incoming: Obj, nodes: Sequence[NodeInfo]) -> dict[str, NodeFailure | None]:
    """Every node's first failure of the node's own checks (NODE_PLUGINS, in order)."""
    framework = Framework({n.name: n for n in nodes}, None, node_plugins=NODE_PLUGINS)
    cycle = framework.prepare(pod_facts(incoming))
    return {n.name: cycle.filter(n) for n in nodes}


def judged(
    plugin: Plugin[Any],
    incoming: Obj,
    nodes: Sequence[NodeInfo],
    existing: Iterable[Obj] = (),
    **kw: Any,
) -> dict[str, NodeFailure | None] | Refusal | None:
    """One plugin alone: its ``prepare`` once, then its ``filter`` per node; the refusal, or None
    when it skips the pod (nothing to check)."""
    snapshot = Snapshot({n.name: n for n in nodes}, workloads(existing, **kw))
    state = plugin.prepare(pod_facts(incoming), snapshot)
    if state is None or isinstance(state, Refusal):
        return state
    return {n.name: plugin.filter(state, n) for n in nodes}
