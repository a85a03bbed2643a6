"""Validity and renewal windows, plus the injected time seams.

Why these defaults: they follow open-policy-agent/cert-controller (pkg/rotator/rotator.go, used by
Gatekeeper and Kueue): CA 10 years, serving certificate 1 year, renew 90 days ahead, check every
12 hours. Kyverno (pkg/tls/renewer.go) is shorter (CA 365 d, TLS 150 d, renew when expiry falls
within 5 × the 12 h check interval). We take cert-controller's longer lookahead because a 90-day
window survives a long outage of every replica, and Kyverno's habit of keeping still-valid old CAs in
the caBundle. The CA rolls over 1 year ahead: that is the longest a serving certificate it signed can
live, so the old CA never expires under a certificate it issued.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

__all__ = ["DEFAULT_POLICY", "Clock", "RenewalPolicy", "Sleep"]

Clock = Callable[[], datetime]
"""Returns the current time, timezone-aware (UTC). Injected so tests fast-forward."""

Sleep = Callable[[float], Awaitable[None]]
"""Waits the given number of seconds (``asyncio.sleep`` in production)."""


@dataclass(frozen=True, slots=True)
class RenewalPolicy:
    """How long certificates live and how early they are replaced."""

    ca_validity: timedelta = timedelta(days=3650)
    serving_validity: timedelta = timedelta(days=365)
    # Renew the serving certificate when less than this remains.
    serving_renew_before: timedelta = timedelta(days=90)
    # Start a CA rollover when less than this remains (≥ serving_validity, see module docstring).
    ca_renew_before: timedelta = timedelta(days=365)
    # notBefore is backdated so nodes whose clocks lag a little still accept a fresh certificate
    # (cert-controller backdates by one hour too).
    backdate: timedelta = timedelta(hours=1)
    check_interval: timedelta = timedelta(hours=12)

    def __post_init__(self) -> None:
        if self.serving_renew_before >= self.serving_validity:
            raise ValueError(
                f"serving_renew_before ({self.serving_renew_before}) must be shorter than "
                f"serving_validity ({self.serving_validity}), or every certificate is renewed at once"
            )
        if self.ca_renew_before >= self.ca_validity:
            raise ValueError(
                f"ca_renew_before ({self.ca_renew_before}) must be shorter than "
                f"ca_validity ({self.ca_validity})"
            )


DEFAULT_POLICY = RenewalPolicy()
