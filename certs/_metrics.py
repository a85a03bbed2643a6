"""Prometheus metrics of the certificates module."""

from __future__ import annotations

from prometheus_client import Gauge

__all__ = ["CERTIFICATE_EXPIRY"]

# Alert on `vgpu_guard_certificate_expiry_timestamp_seconds - time() < 30 * 86400`: renewal starts
# 90 days ahead, so a value this close means renewal has been failing for two months.
CERTIFICATE_EXPIRY = Gauge(
    "vgpu_guard_certificate_expiry_timestamp_seconds",
    "notAfter (Unix time) of the serving certificate currently loaded into the TLS server.",
    ["source"],
)
