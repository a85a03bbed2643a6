"""The filters kube-scheduler runs beyond the node's own labels and taints, for one pod at a time.

``prepare`` does what kube-scheduler's PreFilter does once per pod (spread and affinity counts
over the whole cluster, claims that fail the pod everywhere); ``reasons`` is the Filter phase for
one node: the first failing plugin's reasons, in kube-scheduler's order (NodeName, NodePorts,
NodeResourcesFit, VolumeBinding, VolumeZone, PodTopologySpread, InterPodAffinity). Nothing is
cached across pods: each placement changes the counts (``Workloads.assume``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.scheduling.facts import PodFacts
from vgpu_guard.engine.scheduling.plugins import (
    inter_pod_affinity,
    node_name,
    node_ports,
    node_resources_fit,
    pod_topology_spread,
    volume_binding,
    volume_zone,
)
from vgpu_guard.engine.scheduling.workloads import Workloads

__all__ = ["NodeConstraints", "Prepared", "unsupported_message"]


@dataclass(frozen=True)
class Prepared:
    """One pod's PreFilter results."""

    pod: PodFacts
    refusal: str | None = None
    spread: pod_topology_spread.SpreadState | None = None
    affinity: inter_pod_affinity.AffinityState | None = None


def unsupported_message(pod: PodFacts) -> str | None:
    """The Unschedulable message for a pod using what no filter here evaluates, else None."""
    if not pod.unsupported:
        return None
    return (
        f"vgpu-guard does not place pods that use {' and '.join(pod.unsupported)}: it cannot check "
        "them the way kube-scheduler does, and it never binds blindly; schedule this pod with a "
        "scheduler that supports them"
    )


class NodeConstraints:
    """kube-scheduler's remaining filters over the nodes of a view and the pods on them."""

    def __init__(self, nodes: Mapping[str, NodeInfo], workloads: Workloads) -> None:
        self.nodes = nodes
        self.workloads = workloads

    def prepare(self, pod: PodFacts) -> Prepared:
        refusal = volume_binding.refusal(pod, self.workloads) if pod.claims else None
        spread = pod_topology_spread.prepare(pod, self.nodes, self.workloads) if pod.spread else None
        needs_affinity = pod.affinity or pod.anti_affinity or self.workloads.anti_affinity_pods
        affinity = inter_pod_affinity.prepare(pod, self.nodes, self.workloads) if needs_affinity else None
        return Prepared(pod, refusal, spread, affinity)

    def reasons(
        self, prepared: Prepared, node: NodeInfo, *, later: frozenset[str] = frozenset()
    ) -> tuple[str, ...]:
        """The node's failing reasons; resources in ``later`` are left to ``fits_later``."""
        if prepared.refusal is not None:
            return (prepared.refusal,)
        pod = prepared.pod
        usage = self.workloads.usage(node.name)
        return (
            node_name.node_name(pod, node)
            or node_ports.node_ports(pod, usage.ports)
            or node_resources_fit.insufficient(pod.requests, node.allocatable_units, usage, skip=later)
            or volume_binding.volume_binding(pod, node, self.workloads)
            or volume_zone.volume_zone(pod, node, self.workloads)
            or (pod_topology_spread.pod_topology_spread(prepared.spread, node) if prepared.spread else ())
            or (
                inter_pod_affinity.inter_pod_affinity(prepared.affinity, node, self.workloads)
                if prepared.affinity
                else ()
            )
        )

    def least_allocated(self, prepared: Prepared, node: NodeInfo) -> int:
        """kube-scheduler's NodeResourcesLeastAllocated score (0..100): the share of cpu and memory
        left free after this pod, averaged. Used only to break ties between equally packed GPUs."""
        usage = self.workloads.usage(node.name)
        scores = []
        for name in ("cpu", "memory"):
            capacity = node.allocatable_units.get(name, 0)
            requested = usage.requested.get(name, 0) + prepared.pod.requests.get(name, 0)
            scores.append(
                0 if capacity == 0 or requested > capacity else (capacity - requested) * 100 // capacity
            )
        return sum(scores) // len(scores)

    def fits_later(self, prepared: Prepared, node: NodeInfo, resources: frozenset[str]) -> tuple[str, ...]:
        """NodeResourcesFit for ``resources`` alone (the vGPU ones, after the per-GPU fit)."""
        usage = self.workloads.usage(node.name)
        return node_resources_fit.insufficient(
            prepared.pod.requests, node.allocatable_units, usage, only=resources
        )
