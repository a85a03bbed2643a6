"""Prometheus metrics of the allocation controller, on a registry the caller chooses.

Tests pass their own ``CollectorRegistry`` so runs do not share counters; production uses the
process registry served by the metrics endpoint.

The per-GPU series (memory, cores) and the per-node violation counts mirror the last pass's
ledgers, so they come from a custom collector (``LedgerCollector``) that reads that snapshot at
scrape time, as prometheus-client recommends for state kept elsewhere: a pass only swaps a
reference (5,000 nodes x 8 GPUs would otherwise be 120,000 ``labels().set()`` per pass), and the
series of a node or GPU that is gone disappear with it instead of lingering at their last value.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.ledger import NodeLedger, gpu_usage

__all__ = ["AllocationMetrics", "LedgerCollector", "LedgerSnapshot"]


@dataclass(frozen=True)
class LedgerSnapshot:
    """What one pass read: the registered nodes, their ledgers, broken invariants per node."""

    nodes: Mapping[str, NodeInfo] = field(default_factory=dict)
    ledgers: Mapping[str, NodeLedger] = field(default_factory=dict)
    violations: Mapping[str, int] = field(default_factory=dict)
    memory_factor: int = 1


class LedgerCollector(Collector):
    """Per-GPU usage and per-node violations of the latest ``LedgerSnapshot``, built at scrape."""

    def __init__(self) -> None:
        self.snapshot = LedgerSnapshot()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        snap = self.snapshot  # one reference read: a pass swapping it mid-scrape changes nothing here
        used = GaugeMetricFamily(
            "vgpu_guard_gpu_memory_used_mib",
            "GPU memory reserved in the ledger, MiB.",
            labels=["node", "gpu"],
        )
        total = GaugeMetricFamily(
            "vgpu_guard_gpu_memory_total_mib",
            "GPU memory the device plugin registered, MiB.",
            labels=["node", "gpu"],
        )
        cores = GaugeMetricFamily(
            "vgpu_guard_gpu_cores_used_percent",
            "GPU cores reserved in the ledger, percent of the card.",
            labels=["node", "gpu"],
        )
        violations = GaugeMetricFamily(
            "vgpu_guard_ledger_violations",
            "Broken capacity invariants found in a node's ledger (pre-existing overcommit).",
            labels=["node"],
        )
        for name in sorted(snap.nodes):
            ledger = snap.ledgers.get(name)
            usage = gpu_usage(ledger.allocations.values()) if ledger is not None else {}
            for gpu in snap.nodes[name].gpus:
                u = usage.get(gpu.uuid)
                total.add_metric([name, gpu.uuid], gpu.memory * snap.memory_factor)
                used.add_metric([name, gpu.uuid], u.memory if u else 0)
                cores.add_metric([name, gpu.uuid], u.cores if u else 0)
            violations.add_metric([name], snap.violations.get(name, 0))
        yield from (used, total, cores, violations)


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
        self.ledgers = LedgerCollector()
        registry.register(self.ledgers)
        self.leader = Gauge(
            "vgpu_guard_leader",
            "1 while this replica holds the controller Lease.",
            registry=registry,
        )
