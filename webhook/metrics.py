"""Prometheus metrics of the admission server.

Names follow the Prometheus conventions (``_total`` counters, ``_seconds`` histograms) and the
labels Kyverno and Gatekeeper users already alert on. Buckets resolve milliseconds: admission sits
on the API server's request path, where a few ms matter.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram

__all__ = ["AdmissionMetrics"]

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


@dataclass(frozen=True)
class AdmissionMetrics:
    """The admission server's metrics, bound to one registry (tests use their own)."""

    requests: Counter
    duration: Histogram
    bad_requests: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> AdmissionMetrics:
        return cls(
            requests=Counter(
                "vgpu_guard_admission_requests_total",
                "Admission reviews answered, by resource, operation, outcome and dry run.",
                ["resource", "operation", "allowed", "dry_run"],
                registry=registry,
            ),
            duration=Histogram(
                "vgpu_guard_admission_duration_seconds",
                "Time from request body received to response encoded.",
                ["resource", "operation"],
                buckets=_BUCKETS,
                registry=registry,
            ),
            bad_requests=Counter(
                "vgpu_guard_admission_bad_requests_total",
                "Requests answered 400/413 because they were not a usable AdmissionReview.",
                registry=registry,
            ),
        )
