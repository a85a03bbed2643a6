"""Prometheus metrics of the allocation controller, on a registry the caller chooses.

Tests pass their own ``CollectorRegistry`` so runs do not share counters; production uses the
process registry served by the metrics endpoint.

The per-GPU series (memory, cores) and the per-node violation counts mirror the last pass's
ledgers, so they come from a custom collector (``LedgerCollector``) that turns a snapshot of plain
numbers into series at scrape time, as prometheus-client recommends for state kept elsewhere: a
pass builds one row per GPU (5,000 nodes x 8 GPUs would otherwise be 120,000 ``labels().set()``
per pass), the series of a node or GPU that is gone disappear with it instead of lingering at
their last value, and a replica that stops leading exports nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from vgpu_guard.controller.node_queue import FAILURE_REASONS
from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.ledger import GpuUsage
from vgpu_guard.kube.ledger_writer import LedgerWriteMetrics

__all__ = ["PENDING_REASONS", "AllocationMetrics", "GpuRow", "LedgerCollector", "LedgerSnapshot", "gpu_rows"]

# Why a pod for our scheduler is still pending, as the ``reason`` label of
# ``vgpu_guard_pending_pods_by_reason``: a fixed set, so a pass cannot mint series. The first four
# are the allocator's ``Unplaceable.cause``; ``invalid-request``: the vGPU request does not parse or
# there is none (a pod that names our scheduler without asking for a vGPU); ``ledger-unwritable``:
# the node chosen for it refused the ledger write (the pod is placed again on the next pass).
PENDING_REASONS = ("capacity", "queue", "gang", "unsupported", "invalid-request", "ledger-unwritable")
# The ledger counts GPU memory in MiB, as the device plugin registers it; the gauges are in bytes.
_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class GpuRow:
    """One GPU as the last pass saw it: registered memory, and what the ledger reserves on it."""

    node: str
    gpu: str
    memory_total: int
    memory_used: int
    cores_used: int
    mig_instances: int = 0


def gpu_rows(
    name: str, info: NodeInfo, used: Mapping[str, GpuUsage], memory_factor: int
) -> tuple[GpuRow, ...]:
    """One node's rows, from its ``gpu_usage`` (computed once per pass, for the invariants too)."""
    rows = []
    for gpu in info.gpus:
        u = used.get(gpu.uuid)
        rows.append(
            GpuRow(
                name,
                gpu.uuid,
                gpu.memory * memory_factor,
                u.memory if u else 0,
                u.cores if u else 0,
                len(u.mig) if u else 0,
            )
        )
    return tuple(rows)


@dataclass(frozen=True)
class LedgerSnapshot:
    """Plain numbers from one pass (no ledger objects: a snapshot must not keep a pass alive).

    Kept per node (``rows``) so that a pass rebuilds the rows of the nodes that changed only, and
    the snapshot is a shallow copy of that mapping: building 40,000 rows for 5,000 nodes took the
    event loop ~130 ms every few seconds under churn (issue 44); the scrape orders them."""

    rows: Mapping[str, tuple[GpuRow, ...]] = field(default_factory=dict)
    violations: Mapping[str, int] = field(default_factory=dict)
    # Nodes whose GPU registration annotation does not parse (their Events say why).
    bad_registrations: tuple[str, ...] = ()

    @property
    def gpus(self) -> Iterator[GpuRow]:
        """Every GPU's row, by node name."""
        for name in sorted(self.rows):
            yield from self.rows[name]

    @classmethod
    def of(
        cls,
        nodes: Mapping[str, NodeInfo],
        usage: Mapping[str, Mapping[str, GpuUsage]],
        violations: Mapping[str, int],
        memory_factor: int,
    ) -> LedgerSnapshot:
        """The snapshot of every node from scratch (tests, and what the per-node rows must equal)."""
        rows = {
            name: gpu_rows(name, info, usage.get(name, {}), memory_factor) for name, info in nodes.items()
        }
        bad = tuple(sorted(n for n, info in nodes.items() if info.gpu_problem is not None and not info.gpus))
        return cls({n: r for n, r in rows.items() if r}, dict(violations), bad)


class LedgerCollector(Collector):
    """Per-GPU usage and per-node violations of the latest ``LedgerSnapshot``, built at scrape."""

    def __init__(self) -> None:
        self.snapshot = LedgerSnapshot()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        snap = self.snapshot  # one reference read: a pass swapping it mid-scrape changes nothing here
        used = GaugeMetricFamily(
            "vgpu_guard_gpu_memory_used_bytes",
            "GPU memory reserved in the ledger, bytes.",
            labels=["node", "gpu"],
        )
        total = GaugeMetricFamily(
            "vgpu_guard_gpu_memory_total_bytes",
            "GPU memory the device plugin registered, bytes.",
            labels=["node", "gpu"],
        )
        cores = GaugeMetricFamily(
            "vgpu_guard_gpu_cores_used_ratio",
            "GPU cores (SMs) reserved in the ledger, as a share of the card (1 = the whole card).",
            labels=["node", "gpu"],
        )
        mig = GaugeMetricFamily(
            "vgpu_guard_gpu_mig_instances",
            "MIG instances in use on the GPU (ledger entries with a MIG slot).",
            labels=["node", "gpu"],
        )
        violations = GaugeMetricFamily(
            "vgpu_guard_ledger_violations",
            "Broken capacity invariants found in a node's ledger (pre-existing overcommit), plus "
            "entries found below their pod's assignment and raised (until the pod ends).",
            labels=["node"],
        )
        for row in snap.gpus:
            # The ledger counts MiB (as the device plugin registers them); Prometheus wants base units.
            total.add_metric([row.node, row.gpu], row.memory_total * _MIB)
            used.add_metric([row.node, row.gpu], row.memory_used * _MIB)
            cores.add_metric([row.node, row.gpu], row.cores_used / 100)  # the ledger counts percent
            mig.add_metric([row.node, row.gpu], row.mig_instances)
        registrations = GaugeMetricFamily(
            "vgpu_guard_node_registration_invalid",
            "1 for each node whose volcano.sh/node-vgpu-register annotation cannot be read (a record "
            "out of range or malformed); no vGPU pod is placed there, and the node's Warning Event "
            "InvalidGPURegistration says which record and why.",
            labels=["node"],
        )
        for node, count in sorted(snap.violations.items()):
            violations.add_metric([node], count)
        for node in snap.bad_registrations:
            registrations.add_metric([node], 1)
        yield from (used, total, cores, mig, violations, registrations)


class AllocationMetrics:
    """The counters and gauges named in issue 4, created once per registry."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self._ledger_series(registry)
        self._write_series(registry)
        self._pod_series(registry)

    def _ledger_series(self, registry: CollectorRegistry) -> None:
        """What the ledger took in: allocations, releases, adoptions, mismatched assignments."""
        self.allocations = Counter(
            "vgpu_guard_allocations_total",
            "Pods bound with a GPU assignment by the controller, by node (a deleted node's series "
            "goes with it).",
            ["node"],
            registry=registry,
        )
        self.releases = Counter(
            "vgpu_guard_releases_total",
            "Ledger entries released, by reason (deleted, succeeded, failed, moved, gang).",
            ["reason"],
            registry=registry,
        )
        self.unlanded_holds = Counter(
            "vgpu_guard_unlanded_holds_total",
            "Holds announced of GPUs reserved at admission for a Binding that did not land (another "
            "admission webhook or the API server refused it), each bounded by arbiter.unboundReleaseSeconds.",
            registry=registry,
        )
        self.ledgers_deleted = Counter(
            "vgpu_guard_ledgers_deleted_total",
            "GPULedgers deleted because their node is gone and they held no entry any more.",
            registry=registry,
        )
        self.adoptions = Counter(
            "vgpu_guard_adoptions_total",
            "Bound pods with an assignment but no ledger entry, taken into the ledger.",
            registry=registry,
        )
        # Fixed label values only: invalid-entry, ledger-below-assignment, ledger-above-assignment,
        # adopted-over-capacity.
        self.assignment_mismatches = Counter(
            "vgpu_guard_assignment_mismatches_total",
            "Assignment annotations the ledger could not take as they are, by kind: invalid-entry "
            "(malformed devices skipped, the valid ones held), ledger-below-assignment (a ledger entry "
            "held less than its bound pod's annotation and was raised), ledger-above-assignment (a "
            "ledger entry held more than its bound pod's annotation and was lowered to it), "
            "adopted-over-capacity (an adopted assignment takes more than the GPU registered).",
            ["kind"],
            registry=registry,
        )

    def _write_series(self, registry: CollectorRegistry) -> None:
        """How the ledger writes went (the node's failures, the races lost) and the Events dropped."""
        self.ledger_writes = LedgerWriteMetrics.for_registry(registry)
        # Fixed label values for reason (controller/node_queue.py FAILURE_REASONS); the node's
        # series go with the node.
        self.ledger_write_failures = Counter(
            "vgpu_guard_ledger_write_failures_total",
            "GPULedger writes of the controller that the API server refused for that node (not "
            "conflicts), by node and reason: invalid (422, the CRD schema), forbidden (403, an "
            "admission webhook or RBAC), not-found, unavailable (5xx or a timeout), other. The node "
            "gets no new pod until its retry (with backoff); other nodes are not affected.",
            ["node", "reason"],
            registry=registry,
        )
        self.allocator_rebuilds = Counter(
            "vgpu_guard_allocator_rebuilds_total",
            "Times the controller dropped its whole picture of the fleet (allocator and workloads) to "
            "rebuild it at the next pass, by reason: api-error (a pass failed on the API), conflict (a "
            "race outside the per-node ledger writes), refused-write (a ledger write the capacity "
            "check refused). A ledger race on one node never rebuilds it.",
            ["reason"],
            registry=registry,
        )
        self.conflicts = Counter(
            "vgpu_guard_ledger_conflicts_total",
            "Ledger writes that lost an optimistic-concurrency race (409) and were re-decided.",
            registry=registry,
        )
        self.events_dropped = Counter(
            "vgpu_guard_events_dropped_total",
            "Events not sent because too many were already waiting for the Events rate limit "
            "(VGPU_GUARD_EVENTS_QPS); the audit log and the pods' conditions still carry them.",
            registry=registry,
        )

    def _pod_series(self, registry: CollectorRegistry) -> None:
        """What waits (pending pods by reason, Unschedulable reports), the GPUs, and leadership."""
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
        self.pending_by_reason = Gauge(
            "vgpu_guard_pending_pods_by_reason",
            "Pods for our scheduler left Pending by the last pass, by reason: "
            + ", ".join(PENDING_REASONS)
            + " (the pod's PodScheduled condition has the full message).",
            ["reason"],
            registry=registry,
        )
        for reason in PENDING_REASONS:  # every series exists from the start, at 0
            self.pending_by_reason.labels(reason)
        self.stale_picks = Gauge(
            "vgpu_guard_device_plugin_stale_picks",
            "Bound pods whose container the device plugin would hand another pod's assignment when "
            "it starts (an assignment the kubelet never admits on that node: left by a discarded "
            "Volcano 1.10-1.15 session, or of a pod bound elsewhere, ended or running), after the "
            "last pass; Warning Events DevicePluginStalePick on both pods and the Node say which.",
            registry=registry,
        )
        self.ledgers = LedgerCollector()
        registry.register(self.ledgers)
        self.leader = Gauge(
            "vgpu_guard_leader",
            "1 while this replica holds the controller Lease.",
            registry=registry,
        )

    def forget_node(self, node: str) -> None:
        """A deleted node's own series go with it (as kube-state-metrics drops a deleted object's)."""
        self.allocations.remove(node)  # a label set never seen: nothing to remove, no error
        for reason in FAILURE_REASONS:
            self.ledger_write_failures.remove(node, reason)

    def clear_leader_gauges(self) -> None:
        """What only the leader knows, at 0 on a standby: pending pods, by reason too, stale picks."""
        self.pending.set(0)
        self.set_pending_reasons(())
        self.stale_picks.set(0)

    def set_pending_reasons(self, reasons: Iterable[str]) -> None:
        """One pass's reasons, one per pod left Pending; every reason the pass did not see drops to 0.

        A reason outside ``PENDING_REASONS`` is a bug in the caller: it raises rather than mint a series.
        """
        counts = dict.fromkeys(PENDING_REASONS, 0)
        for reason in reasons:
            if reason not in counts:
                raise ValueError(f"pending reason {reason!r} is not one of {', '.join(PENDING_REASONS)}")
            counts[reason] += 1
        for reason, count in counts.items():
            self.pending_by_reason.labels(reason).set(count)
