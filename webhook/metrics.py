"""Prometheus metrics of the admission server.

Names follow the Prometheus conventions (``_total`` counters, ``_seconds`` histograms) and the
labels Kyverno and Gatekeeper users already alert on. Buckets resolve milliseconds: admission sits
on the API server's request path, where a few ms matter.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["OTHER_RESOURCE", "AdmissionMetrics"]

# The ``resource`` label of a review whose resource its path does not decide. Labels come only from
# the fixed route table, so a caller cannot mint series (20,000 random values once made 20,001).
OTHER_RESOURCE = "other"

# Up to 10 s: the longest timeoutSeconds a webhook configuration allows (ours are 3-5 s).
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass(frozen=True)
class AdmissionMetrics:
    """The admission server's metrics, bound to one registry (tests use their own)."""

    requests: Counter
    duration: Histogram
    bad_requests: Counter
    connections_open: Gauge
    connections_refused: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> AdmissionMetrics:
        return cls(
            requests=Counter(
                "vgpu_guard_admission_requests_total",
                "Admission reviews answered, by webhook path (one pod create is a mutating and a "
                "validating review), resource, operation, outcome and dry run. A subresource write "
                "counts under its resource: a pods/binding as pods CREATE, a pods/status as pods "
                "UPDATE (both on /validate/pod-allocations); other: a resource its path does not decide.",
                ["webhook", "resource", "operation", "allowed", "dry_run"],
                registry=registry,
            ),
            duration=Histogram(
                "vgpu_guard_admission_duration_seconds",
                "Time from the request's arrival (its body read included) to the response encoded.",
                ["webhook", "resource", "operation"],
                buckets=_BUCKETS,
                registry=registry,
            ),
            bad_requests=Counter(
                "vgpu_guard_admission_bad_requests_total",
                "Requests answered 4xx because they were not a usable AdmissionReview.",
                registry=registry,
            ),
            connections_open=Gauge(
                "vgpu_guard_admission_connections_open",
                "Admission connections open now (TLS handshake done).",
                registry=registry,
            ),
            connections_refused=Counter(
                "vgpu_guard_admission_connections_refused_total",
                "Admission connections closed at once because webhook.maxConnections were open.",
                registry=registry,
            ),
        )
