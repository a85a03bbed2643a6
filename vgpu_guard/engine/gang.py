"""One InfiniBand cluster per gang: the choice, its record, and when the record goes.

Seed 004: a PodGroup's pods must all land inside one IB cluster. Choosing at random inside a
scheduler plugin failed because the plugin could not see the other filters. Here the choice is
global and deterministic: among the clusters whose eligible nodes can hold ``minMember`` pods of
the gang's shape (given the ledger and the reservations of other gangs), the one that leaves the
least free, ties broken by name. The first member's admission records the choice as a
GangPlacement object; every later member (on any webhook replica) reads it from the view, and a
race between two first members is settled by the API server's AlreadyExists on that object.

Capacity: for vGPU gangs the real allocator places ``minMember`` copies of the pod on the
cluster's nodes over the ledgers, after placing what other gangs still reserve there. For gangs
without vGPU it is the allocatable CPU and memory of the eligible nodes minus other gangs'
reservations; the webhook does not watch pods, so running non-GPU pods are not subtracted
(docs/topology.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from vgpu_guard.engine.allocator import Allocator, Placement
from vgpu_guard.engine.cluster import ClusterView, NodeInfo
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.ledger import LedgerError, NodeLedger, decode_ledger
from vgpu_guard.engine.objects import SUBDOMAIN_RULE, is_subdomain_name
from vgpu_guard.engine.pod_request import (
    GROUP_ANNOTATIONS,
    ContainerRequest,
    PodRequest,
    PodRequestError,
    pod_request,
)
from vgpu_guard.engine.quantity import QuantityError, format_quantity, parse_quantity
from vgpu_guard.engine.scheduling import node_cycle
from vgpu_guard.engine.topology import Clusters, allowed_clusters, ib_clusters
from vgpu_guard.engine.violations import Violation

__all__ = ["GangDecision", "decide_gang", "gang_of", "ib_enabled", "stale_placements"]

PLACEMENT_API = "vgpu-guard.io/v1alpha1"
_WHO = "vgpu-guard"


@dataclass(frozen=True)
class GangDecision:
    """What to do with one gang member: stamp ``cluster`` (None: leave unpinned), record
    ``persist`` first (the GangPlacement of a first member), or deny with ``violation``."""

    clusters: Clusters
    cluster: str | None = None
    persist: Mapping[str, Any] | None = None
    violation: Violation | None = None
    warnings: tuple[str, ...] = ()


def ib_enabled(config: GuardConfig) -> bool:
    topology = config.topology
    return bool(topology.ib_cluster_label) or topology.hyper_node_tier is not None


def gang_of(pod: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(namespace, group, annotation key) of a gang member, else None."""
    metadata = pod.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    if not isinstance(annotations, Mapping):
        return None
    for key in GROUP_ANNOTATIONS:
        group = annotations.get(key)
        if isinstance(group, str) and group:
            namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
            return str(namespace or "default"), group, key
    return None


def _pin_path(pod: Mapping[str, Any], clusters: Clusters) -> str:
    """The field that pins the pod's cluster: its nodeSelector entry, else its required affinity."""
    spec = pod.get("spec")
    selector = spec.get("nodeSelector") if isinstance(spec, Mapping) else None
    if clusters.by_label and isinstance(selector, Mapping) and clusters.by_label in selector:
        return f"spec.nodeSelector[{clusters.by_label}]"
    return "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


def _min_member(view: ClusterView, namespace: str, group: str) -> int | None:
    podgroup = view.podgroups.get((namespace, group))
    spec = podgroup.get("spec") if podgroup is not None else None
    value = spec.get("minMember") if isinstance(spec, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _requests(pod: Mapping[str, Any], resource: str) -> Fraction:
    """Sum of a resource over a pod's containers (requests, else limits), exactly."""
    total = Fraction(0)
    spec = pod.get("spec")
    for container in (spec.get("containers") if isinstance(spec, Mapping) else None) or []:
        resources = container.get("resources") if isinstance(container, Mapping) else None
        if not isinstance(resources, Mapping):
            continue
        for part in ("requests", "limits"):
            values = resources.get(part)
            if isinstance(values, Mapping) and resource in values:
                with contextlib.suppress(QuantityError):  # validation reports bad quantities
                    total += parse_quantity(values[resource]).value
                break
    return total


@dataclass(frozen=True)
class _Room:
    """One cluster's capacity for a gang: members that fit, free capacity before and after them."""

    fits: int
    free_now: Fraction
    free_after: Fraction
    nodes: int
    unit: str


def _ledgers(view: ClusterView, names: frozenset[str]) -> dict[str, NodeLedger]:
    out = {}
    for name in names:
        raw = view.ledgers.get(name)
        if raw is None:
            continue
        try:
            out[name] = decode_ledger(raw)
        except LedgerError:
            continue  # the controller reports a broken ledger; capacity math skips it
    return out


def _held(view: ClusterView, namespace: str, group: str) -> int:
    """Members of a gang that already hold ledger entries (they no longer need a reservation)."""
    held = 0
    for raw in view.ledgers.values():
        try:
            ledger = decode_ledger(raw)
        except LedgerError:
            continue
        held += sum(1 for a in ledger.allocations.values() if a.namespace == namespace and a.group == group)
    return held


def _spec(placement: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = placement.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _others_in(
    view: ClusterView, cluster: str, key: tuple[str, str]
) -> list[tuple[tuple[str, str], Mapping[str, Any], int]]:
    """Other gangs recorded in ``cluster`` with the members they still reserve (not yet in a ledger)."""
    out = []
    for other, placement in sorted(view.gang_placements.items()):
        spec = _spec(placement)
        if other == key or spec.get("cluster") != cluster:
            continue
        minimum = spec.get("minMember")
        outstanding = max(0, (minimum if isinstance(minimum, int) else 0) - _held(view, *other))
        if outstanding:
            out.append((other, placement, outstanding))
    return out


def _placement_gpus(placement: Mapping[str, Any]) -> tuple[ContainerRequest, ...]:
    per_pod = _spec(placement).get("perPod")
    gpus = per_pod.get("gpus") if isinstance(per_pod, Mapping) else None
    out = []
    for index, raw in enumerate(gpus if isinstance(gpus, list) else []):
        if not isinstance(raw, Mapping):
            continue
        memory, percentage = raw.get("memoryMiB"), raw.get("percentage")
        count, cores = raw.get("count"), raw.get("cores")
        out.append(
            ContainerRequest(
                index=index,
                name=f"c{index}",
                count=count if isinstance(count, int) and count > 0 else 1,
                memory=memory if isinstance(memory, int) else None,
                percentage=percentage if isinstance(percentage, int) else None,
                cores=cores if isinstance(cores, int) else 0,
            )
        )
    return tuple(out)


def _copies(template: PodRequest, n: int, tag: str) -> list[PodRequest]:
    return [replace(template, uid=f"{tag}#{i}", name=f"{template.name or tag}#{i}") for i in range(n)]


def _free_gpu_memory(allocator: Allocator, nodes: Mapping[str, NodeInfo], factor: int) -> Fraction:
    capacity = sum(g.memory * factor for info in nodes.values() if info.vgpu_capable for g in info.gpus)
    used = sum(
        grant.memory
        for name in nodes
        for a in allocator.ledger(name).allocations.values()
        for grant in a.grants()
    )
    return Fraction(capacity - used)


def _gpu_room(
    request: PodRequest,
    cluster: str,
    members: frozenset[str],
    *,
    key: tuple[str, str],
    min_member: int,
    view: ClusterView,
    config: GuardConfig,
) -> _Room:
    """Place what other gangs reserve, then ``min_member`` copies of the pod, with the real allocator."""
    nodes = {n: view.nodes[n] for n in sorted(members) if n in view.nodes}
    allocator = Allocator(replace(view, nodes=nodes), _ledgers(view, frozenset(nodes)), config=config)
    for (namespace, group), placement, outstanding in _others_in(view, cluster, key):
        containers = _placement_gpus(placement)
        if containers:
            mode = _spec(placement).get("mode")
            phantom = PodRequest(
                uid="",
                namespace=namespace,
                name=group,
                containers=containers,
                mode=mode if isinstance(mode, str) and mode else None,
            )
            allocator.place_gang(
                _copies(phantom, outstanding, f"reserved:{namespace}/{group}"), min_member=outstanding
            )
    factor = config.nvidia.gpu_memory_factor
    free_now = _free_gpu_memory(allocator, nodes, factor)
    fits = 0
    for member in _copies(request, min_member, f"gang:{key[0]}/{key[1]}"):
        placed = allocator.place(member)
        if not isinstance(placed, Placement):
            break
        allocator.commit(placed)
        fits += 1
    return _Room(
        fits=fits,
        free_now=free_now,
        free_after=_free_gpu_memory(allocator, nodes, factor),
        nodes=len(nodes),
        unit="MiB GPU memory",
    )


def _cpu_room(
    request: PodRequest,
    pod: Mapping[str, Any],
    cluster: str,
    members: frozenset[str],
    *,
    key: tuple[str, str],
    min_member: int,
    view: ClusterView,
) -> _Room:
    """Allocatable CPU and memory of the eligible nodes, less what other gangs reserve."""
    cycle = node_cycle(request.node_facts())
    eligible = [
        view.nodes[n] for n in sorted(members) if n in view.nodes and cycle.filter(view.nodes[n]) is None
    ]
    need = {"cpu": _requests(pod, "cpu"), "memory": _requests(pod, "memory")}
    totals = {r: sum((n.allocatable.get(r, Fraction(0)) for n in eligible), Fraction(0)) for r in need}
    for _, placement, outstanding in _others_in(view, cluster, key):
        per_pod = _spec(placement).get("perPod")
        for resource in need:
            raw = per_pod.get(resource) if isinstance(per_pod, Mapping) else None
            try:
                totals[resource] -= parse_quantity(raw).value * outstanding if raw is not None else 0
            except QuantityError:
                continue
    by_node = sum(
        min(int(node.allocatable.get(r, Fraction(0)) // need[r]) if need[r] else min_member for r in need)
        for node in eligible
    )
    by_total = min(int(totals[r] // need[r]) if need[r] else min_member for r in need)
    fits = max(0, min(min_member, by_node, by_total))
    return _Room(
        fits=fits,
        free_now=totals["cpu"],
        free_after=totals["cpu"] - need["cpu"] * min_member,
        nodes=len(eligible),
        unit="CPU",
    )


def _persist(
    pod: Mapping[str, Any],
    request: PodRequest,
    *,
    key: tuple[str, str],
    cluster: str,
    min_member: int,
    view: ClusterView,
    factor: int,
) -> dict[str, Any]:
    namespace, group = key
    metadata: dict[str, Any] = {
        "name": group,
        "namespace": namespace,
        "labels": {"app.kubernetes.io/managed-by": "vgpu-guard"},
    }
    podgroup = view.podgroups.get(key)
    owner_uid = (podgroup or {}).get("metadata", {}).get("uid") if podgroup else None
    if isinstance(owner_uid, str) and owner_uid:
        # The garbage collector then deletes the placement with its PodGroup.
        metadata["ownerReferences"] = [
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "PodGroup",
                "name": group,
                "uid": owner_uid,
            }
        ]
    gpus = [
        {
            "count": c.count,
            "cores": c.cores,
            **({"memoryMiB": c.memory // factor if factor else c.memory} if c.memory is not None else {}),
            **({"percentage": c.percentage} if c.percentage is not None else {}),
        }
        for c in request.containers
    ]
    per_pod: dict[str, Any] = {"gpus": gpus} if gpus else {}
    for resource in ("cpu", "memory"):
        amount = _requests(pod, resource)
        if amount:
            per_pod[resource] = str(amount.numerator) if amount.denominator == 1 else f"{int(amount * 1000)}m"
    return {
        "apiVersion": PLACEMENT_API,
        "kind": "GangPlacement",
        "metadata": metadata,
        "spec": {
            "group": group,
            "cluster": cluster,
            "minMember": min_member,
            "perPod": per_pod,
            # Left out for a gang without vGPU: kube-apiserver 1.20 refuses "" in a custom resource.
            **({"mode": request.mode} if request.mode else {}),
        },
    }


def decide_gang(pod: Mapping[str, Any], *, view: ClusterView, config: GuardConfig) -> GangDecision | None:
    """The IB decision for a (normalised) pod; None when it is not a gang member or IB is off.

    A gang with a recorded placement follows it; otherwise each cluster the pod allows is sized
    (``_rooms``) and the best fit with room for minMember members is chosen and recorded."""
    member = gang_of(pod)
    if member is None or not ib_enabled(config):
        return None
    namespace, group, annotation = member
    key = (namespace, group)
    clusters = ib_clusters(view, config.topology)
    allowed = allowed_clusters(pod, clusters)
    recorded = view.gang_placements.get(key)
    if recorded is not None:
        return _follow_recorded(pod, recorded, key=key, clusters=clusters, allowed=allowed)
    if not clusters.members:
        return None  # no node belongs to an IB cluster: nothing to choose
    try:
        request = pod_request(pod, config.nvidia, with_no_gpu=True)
    except PodRequestError:
        return None  # validation denies the pod for its own fields
    assert request is not None
    if not _fits_an_ib_node(request, clusters, allowed, view):
        # The pod's own constraints keep it off every IB node (a gang meant for other nodes):
        # not an IB gang, so nothing to choose, record or deny.
        return None
    if not is_subdomain_name(group):
        return _unrecordable(key, annotation, clusters)
    minimum = _min_member(view, namespace, group)
    min_member = minimum or 1
    rooms = _rooms(pod, request, clusters, allowed, key=key, min_member=min_member, view=view, config=config)
    fitting = [c for c, room in rooms.items() if room.fits >= min_member]
    notes = () if minimum else (f"{_WHO}: PodGroup {namespace}/{group} not found; gang sized as 1 member",)
    if not fitting:
        path = f"metadata.annotations[{annotation}]"
        return _no_room(
            rooms, key=key, min_member=min_member, clusters=clusters, notes=notes, path=path, config=config
        )
    chosen = min(fitting, key=lambda c: (rooms[c].free_after, c))
    persist = _persist(
        pod,
        request,
        key=key,
        cluster=chosen,
        min_member=min_member,
        view=view,
        factor=config.nvidia.gpu_memory_factor,
    )
    return GangDecision(
        clusters=clusters,
        cluster=chosen,
        persist=persist,
        warnings=(
            *notes,
            f"{_WHO}: chose IB cluster {chosen} for gang {namespace}/{group} "
            f"({f'best fit of {len(fitting)}' if len(fitting) > 1 else 'the only one that fits'}); "
            "required node affinity added",
        ),
    )


def _unrecordable(key: tuple[str, str], annotation: str, clusters: Clusters) -> GangDecision:
    """A group name no PodGroup can have: the gang's IB cluster cannot be recorded under it (the
    API server refuses the GangPlacement's name), so retrying would never help; say what to fix."""
    namespace, group = key
    message = (
        f"{annotation} {group!r} is not a valid PodGroup name ({SUBDOMAIN_RULE}): no PodGroup can be "
        f"named so, and the IB cluster of gang {namespace}/{group} cannot be recorded under it; set "
        "the annotation to the name of the pod's PodGroup"
    )
    return GangDecision(
        clusters=clusters, violation=Violation("ib-cluster", f"metadata.annotations[{annotation}]", message)
    )


def _follow_recorded(
    pod: Mapping[str, Any],
    recorded: Mapping[str, Any],
    *,
    key: tuple[str, str],
    clusters: Clusters,
    allowed: frozenset[str],
) -> GangDecision:
    """A later member of a gang whose cluster is recorded: pinned there, or denied when the pod
    pins itself to another cluster (a gang split across clusters is what we prevent)."""
    namespace, group = key
    cluster = _spec(recorded).get("cluster")
    if not isinstance(cluster, str) or not cluster:
        return GangDecision(
            clusters=clusters,
            warnings=(f"{_WHO}: GangPlacement {namespace}/{group} names no cluster; member left unpinned",),
        )
    if cluster not in allowed and cluster in clusters.members:
        pins = ", ".join(sorted(allowed)) or "no cluster"
        return GangDecision(
            clusters=clusters,
            violation=Violation(
                "ib-cluster",
                _pin_path(pod, clusters),
                f"pins {pins} but gang {namespace}/{group} runs in IB cluster {cluster}; "
                f"remove the pod's own cluster pin or pin {cluster}",
            ),
        )
    return GangDecision(
        clusters=clusters,
        cluster=cluster,
        warnings=(f"{_WHO}: gang {namespace}/{group} runs in IB cluster {cluster}; node affinity added",),
    )


def _fits_an_ib_node(
    request: PodRequest, clusters: Clusters, allowed: Iterable[str], view: ClusterView
) -> bool:
    """Whether the pod's own node constraints admit any node of a cluster it allows."""
    cycle = node_cycle(request.node_facts())
    return any(
        cycle.filter(view.nodes[n]) is None for c in allowed for n in clusters.members[c] if n in view.nodes
    )


def _rooms(
    pod: Mapping[str, Any],
    request: PodRequest,
    clusters: Clusters,
    allowed: Iterable[str],
    *,
    key: tuple[str, str],
    min_member: int,
    view: ClusterView,
    config: GuardConfig,
) -> dict[str, _Room]:
    """How many members each allowed cluster can hold: by GPUs for a vGPU gang, else by CPU."""
    rooms: dict[str, _Room] = {}
    for cluster in sorted(allowed):
        members = clusters.members[cluster]
        if request.containers:
            rooms[cluster] = _gpu_room(
                request, cluster, members, key=key, min_member=min_member, view=view, config=config
            )
        else:
            rooms[cluster] = _cpu_room(
                request, pod, cluster, members, key=key, min_member=min_member, view=view
            )
    return rooms


def _no_room(
    rooms: Mapping[str, _Room],
    *,
    key: tuple[str, str],
    min_member: int,
    clusters: Clusters,
    notes: tuple[str, ...],
    path: str,
    config: GuardConfig,
) -> GangDecision:
    """No cluster holds minMember members: denied with each cluster's room, or admitted unpinned
    when ``topology.onNoFit`` says so."""
    namespace, group = key
    if config.topology.on_no_fit == "unpinned":
        return GangDecision(
            clusters=clusters,
            warnings=(
                *notes,
                f"{_WHO}: no IB cluster holds gang {namespace}/{group} ({min_member} members); unpinned",
            ),
        )
    detail = (
        "; ".join(
            f"{c} has room for {r.fits} ({r.nodes} eligible nodes, "
            f"{format_quantity(r.free_now)} {r.unit} free)"
            for c, r in sorted(rooms.items())
        )
        or "the pod's own node constraints allow no cluster"
    )
    message = (
        f"gang {namespace}/{group} needs {min_member} members in one IB cluster but none can hold them "
        f"({detail}); lower minMember, free capacity in one cluster, or add nodes"
    )
    return GangDecision(clusters=clusters, violation=Violation("ib-cluster", path, message))


def stale_placements(view: ClusterView, *, live_groups: frozenset[tuple[str, str]]) -> list[tuple[str, str]]:
    """GangPlacements to delete: the PodGroup is gone or Completed and no live pod is in the group.

    ``live_groups`` are (namespace, group) of pods that are neither Succeeded nor Failed.
    """
    out = []
    for key in sorted(view.gang_placements):
        podgroup = view.podgroups.get(key)
        status = podgroup.get("status") if podgroup is not None else None
        phase = status.get("phase") if isinstance(status, Mapping) else None
        if (podgroup is None or phase == "Completed") and key not in live_groups:
            out.append(key)
    return out
