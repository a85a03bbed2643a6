"""The pods on each node, as the filters count them: ``Workloads``.

kube-scheduler's cache holds every pod assigned to a node and not terminal (its informer's field
selector is ``status.phase!=Succeeded,status.phase!=Failed``), whoever scheduled it. We count the
same, plus the pods our ledger holds a node for but has not bound yet: two controller replicas
serialise on the node's ledger (compare-and-swap), so counting reservations there is what keeps
CPU and memory from being promised twice, as the ledger does for GPUs.

Mutable on purpose: a pass places pods one after another, and each later pod must see the earlier
ones (``assume``), and a gang that cannot start gives its places back (``forget``).

Counting can wait (``defer``): a controller that starts on 100,000 bound pods would otherwise derive
every pod's facts before its first decision (~3.5 s at that size), while a decision reads only the
few nodes it weighs. A deferred pod is placed at once (``node_of``, the node's epoch, the count of
pods with required anti-affinity, read off the raw pod), and its facts are derived when its node
is first read (``usage``), or every node's when a filter needs the whole cluster
(``nodes_with_pods``). What a reader sees is the same either way; a test holds them equal.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from vgpu_guard.engine.objects import ObjMap
from vgpu_guard.engine.resources import Resources, add_into
from vgpu_guard.engine.scheduling.facts import HostPort, PodFacts, has_required_anti_affinity
from vgpu_guard.engine.untrusted import as_mapping

__all__ = ["NodeUsage", "Workloads"]

P = TypeVar("P", bound=ObjMap)
# A deferred pod: the object as it was when placed, and what derives its facts.
Deferred = tuple[Any, Callable[[Any], PodFacts]]


@dataclass
class NodeUsage:
    """What the pods on one node take: their facts, summed requests and host ports in use."""

    pods: dict[str, PodFacts] = field(default_factory=dict)
    requested: Resources = field(default_factory=dict)
    ports: Counter[HostPort] = field(default_factory=Counter)


_EMPTY = NodeUsage()


class Workloads:
    """Pods by node, PersistentVolumeClaims and PersistentVolumes, namespace labels."""

    def __init__(
        self,
        placed: Iterable[tuple[PodFacts, str]] = (),
        *,
        claims: Iterable[ObjMap] = (),
        volumes: Iterable[ObjMap] = (),
        namespaces: Iterable[ObjMap] = (),
    ) -> None:
        self._usage: dict[str, NodeUsage] = {}
        self._where: dict[str, str] = {}
        self._deferred: dict[str, dict[str, Deferred]] = {}  # node -> uid -> not yet counted
        self._anti: set[str] = set()  # uids of placed pods with required anti-affinity
        # Moves on every change of a node's pods: an evaluation of the node remembered at an
        # earlier count is stale (the allocator's equivalence memo compares it).
        self._epochs: dict[str, int] = {}
        self.claims: dict[tuple[str, str], ObjMap] = {}
        for claim in claims:
            meta = as_mapping(claim.get("metadata"))
            self.claims[(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))] = claim
        self.volumes: dict[str, ObjMap] = {
            str(as_mapping(v.get("metadata")).get("name") or ""): v for v in volumes
        }
        self.namespace_labels: dict[str, Mapping[str, str]] = {
            str(as_mapping(n.get("metadata")).get("name") or ""): {
                str(k): str(v) for k, v in as_mapping(as_mapping(n.get("metadata")).get("labels")).items()
            }
            for n in namespaces
        }
        for facts, node in placed:
            self.assume(facts, node)

    def set_objects(
        self,
        *,
        claims: Iterable[ObjMap] = (),
        volumes: Iterable[ObjMap] = (),
        namespaces: Iterable[ObjMap] = (),
    ) -> None:
        """Replace the claims, volumes and namespace labels (a long-lived instance, read per pass)."""
        fresh = Workloads(claims=claims, volumes=volumes, namespaces=namespaces)
        self.claims, self.volumes, self.namespace_labels = fresh.claims, fresh.volumes, fresh.namespace_labels

    def volume_of(self, namespace: str, claim: str) -> ObjMap | None:
        """The PersistentVolume a claim is bound to (None: no claim, unbound, or no such volume)."""
        spec = as_mapping(as_mapping(self.claims.get((namespace, claim))).get("spec"))
        return self.volumes.get(str(spec.get("volumeName") or ""))

    @property
    def anti_affinity_pods(self) -> int:
        """How many placed pods carry required anti-affinity: when none do, pods without affinity
        terms of their own skip InterPodAffinity's cluster-wide count."""
        return len(self._anti)

    def usage(self, node: str) -> NodeUsage:
        if node in self._deferred:
            self._fold(node)
        return self._usage.get(node, _EMPTY)

    def nodes_with_pods(self) -> Iterable[tuple[str, NodeUsage]]:
        for node in list(self._deferred):
            self._fold(node)
        return self._usage.items()

    def node_of(self, uid: str) -> str | None:
        return self._where.get(uid)

    def epoch(self, node: str) -> int:
        """How often the pods counted on ``node`` changed (only equality is meaningful)."""
        return self._epochs.get(node, 0)

    def assume(self, facts: PodFacts, node: str) -> None:
        """Count ``facts`` on ``node`` (moving it there if it was counted elsewhere)."""
        if facts.uid in self._where:
            self.forget(facts.uid)
        self._epochs[node] = self._epochs.get(node, 0) + 1
        self._where[facts.uid] = node
        self._count(facts.uid, facts, node)

    def defer(self, uid: str, node: str, pod: P, derive: Callable[[P], PodFacts]) -> None:
        """``assume(derive(pod), node)``, with ``derive`` called only when ``node`` is read."""
        if uid in self._where:
            self.forget(uid)
        self._epochs[node] = self._epochs.get(node, 0) + 1
        self._where[uid] = node
        self._deferred.setdefault(node, {})[uid] = (pod, derive)
        if has_required_anti_affinity(pod):
            self._anti.add(uid)

    def refresh(self, uid: str, pod: ObjMap) -> None:
        """A newer version of a pod not counted yet: derive from it when its node is read, and do
        not keep the old version alive meanwhile (at 100,000 pods, every status update would)."""
        node = self._where.get(uid)
        waiting = self._deferred.get(node) if node is not None else None
        if waiting is None or uid not in waiting:
            return
        waiting[uid] = (pod, waiting[uid][1])
        if has_required_anti_affinity(pod):
            self._anti.add(uid)
        else:
            self._anti.discard(uid)

    def forget(self, uid: str) -> None:
        node = self._where.pop(uid, None)
        if node is None:
            return
        self._epochs[node] = self._epochs.get(node, 0) + 1
        self._anti.discard(uid)
        waiting = self._deferred.get(node)
        if waiting is not None and waiting.pop(uid, None) is not None:
            if not waiting:
                del self._deferred[node]
            return
        usage = self._usage[node]
        facts = usage.pods.pop(uid)
        add_into(usage.requested, facts.requests, sign=-1)
        usage.ports.subtract(facts.host_ports)
        usage.ports += Counter()  # drop ports no pod uses any more

    def _count(self, uid: str, facts: PodFacts, node: str) -> None:
        usage = self._usage.setdefault(node, NodeUsage())
        usage.pods[uid] = facts
        add_into(usage.requested, facts.requests)
        usage.ports.update(facts.host_ports)
        if facts.anti_affinity:
            self._anti.add(uid)
        else:
            self._anti.discard(uid)

    def _fold(self, node: str) -> None:
        """Count the node's deferred pods (no epoch moves: what the node holds did not change)."""
        for uid, (pod, derive) in self._deferred.pop(node).items():
            self._count(uid, derive(pod), node)
