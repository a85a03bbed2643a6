"""The pods on each node, as the filters count them: ``Workloads``.

kube-scheduler's cache holds every pod assigned to a node and not terminal (its informer's field
selector is ``status.phase!=Succeeded,status.phase!=Failed``), whoever scheduled it. We count the
same, plus the pods our ledger holds a node for but has not bound yet: two controller replicas
serialise on the node's ledger (compare-and-swap), so counting reservations there is what keeps
CPU and memory from being promised twice, as the ledger does for GPUs.

Mutable on purpose: a pass places pods one after another, and each later pod must see the earlier
ones (``assume``), and a gang that cannot start gives its places back (``forget``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vgpu_guard.engine.resources import Resources, add_into
from vgpu_guard.engine.scheduling.facts import HostPort, PodFacts
from vgpu_guard.engine.untrusted import as_mapping

__all__ = ["NodeUsage", "Workloads"]

Obj = Mapping[str, Any]


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
        claims: Iterable[Obj] = (),
        volumes: Iterable[Obj] = (),
        namespaces: Iterable[Obj] = (),
    ) -> None:
        self._usage: dict[str, NodeUsage] = {}
        self._where: dict[str, str] = {}
        # Moves on every change of a node's pods: an evaluation of the node remembered at an
        # earlier count is stale (the allocator's equivalence memo compares it).
        self._epochs: dict[str, int] = {}
        # How many counted pods carry required anti-affinity: when none do, pods without affinity
        # terms of their own skip InterPodAffinity's cluster-wide count.
        self.anti_affinity_pods = 0
        self.claims: dict[tuple[str, str], Obj] = {}
        for claim in claims:
            meta = as_mapping(claim.get("metadata"))
            self.claims[(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))] = claim
        self.volumes: dict[str, Obj] = {
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
        self, *, claims: Iterable[Obj] = (), volumes: Iterable[Obj] = (), namespaces: Iterable[Obj] = ()
    ) -> None:
        """Replace the claims, volumes and namespace labels (a long-lived instance, read per pass)."""
        fresh = Workloads(claims=claims, volumes=volumes, namespaces=namespaces)
        self.claims, self.volumes, self.namespace_labels = fresh.claims, fresh.volumes, fresh.namespace_labels

    def volume_of(self, namespace: str, claim: str) -> Obj | None:
        """The PersistentVolume a claim is bound to (None: no claim, unbound, or no such volume)."""
        spec = as_mapping(as_mapping(self.claims.get((namespace, claim))).get("spec"))
        return self.volumes.get(str(spec.get("volumeName") or ""))

    def usage(self, node: str) -> NodeUsage:
        return self._usage.get(node, _EMPTY)

    def nodes_with_pods(self) -> Iterable[tuple[str, NodeUsage]]:
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
        usage = self._usage.setdefault(node, NodeUsage())
        self._epochs[node] = self._epochs.get(node, 0) + 1
        usage.pods[facts.uid] = facts
        add_into(usage.requested, facts.requests)
        usage.ports.update(facts.host_ports)
        self._where[facts.uid] = node
        self.anti_affinity_pods += bool(facts.anti_affinity)

    def forget(self, uid: str) -> None:
        node = self._where.pop(uid, None)
        if node is None:
            return
        usage = self._usage[node]
        self._epochs[node] = self._epochs.get(node, 0) + 1
        facts = usage.pods.pop(uid)
        add_into(usage.requested, facts.requests, sign=-1)
        usage.ports.subtract(facts.host_ports)
        usage.ports += Counter()  # drop ports no pod uses any more
        self.anti_affinity_pods -= bool(facts.anti_affinity)
