"""Prometheus metrics of the allocation controller, on a registry the caller chooses.

Tests pass their own ``CollectorRegistry`` so runs do not share counters; production uses the
process registry served by the metrics endpoint.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge

__all__ = ["AllocationMetrics"]


class AllocationMetrics:
    """The counters and gauges named in issue 4, created once per registry."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.allocations = Counter(
            "vgpu_guard_allocations_total",
            "Pods bound with a GPU assignment by the controller.",
            ["node"],
            registry=registry,
        )
        self.releases = Counter(
            "vgpu_guard_releases_total",
            "Ledger entries released, by reason (deleted, succeeded, failed, moved, gang).",
            ["reason"],
            registry=registry,
        )
        self.adoptions = Counter(
            "vgpu_guard_adoptions_total",
            "Bound pods with an assignment but no ledger entry, taken into the ledger.",
            registry=registry,
        )
        self.conflicts = Counter(
            "vgpu_guard_ledger_conflicts_total",
            "Ledger writes that lost an optimistic-concurrency race (409) and were re-decided.",
            registry=registry,
        )
        self.unschedulable = Counter(
            "vgpu_guard_unschedulable_total",
            "Times a pod was reported Unschedulable with a new message.",
            registry=registry,
        )
        self.pending = Gauge(
            "vgpu_guard_pending_pods",
            "Pods for our scheduler that are not bound yet (after the last pass).",
            registry=registry,
        )
        self.memory_used = Gauge(
            "vgpu_guard_gpu_memory_used_mib",
            "GPU memory reserved in the ledger, MiB.",
            ["node", "gpu"],
            registry=registry,
        )
        self.memory_total = Gauge(
            "vgpu_guard_gpu_memory_total_mib",
            "GPU memory the device plugin registered, MiB.",
            ["node", "gpu"],
            registry=registry,
        )
        self.cores_used = Gauge(
            "vgpu_guard_gpu_cores_used_percent",
            "GPU cores reserved in the ledger, percent of the card.",
            ["node", "gpu"],
            registry=registry,
        )
        self.violations = Gauge(
            "vgpu_guard_ledger_violations",
            "Broken capacity invariants found in a node's ledger (pre-existing overcommit).",
            ["node"],
            registry=registry,
        )
        self.leader = Gauge(
            "vgpu_guard_leader",
            "1 while this replica holds the controller Lease.",
            registry=registry,
        )
