"""When to renew, and how a CA rolls over without an outage (pure; ``now`` is an argument).

CA rollover is staged in three steps so kube-apiserver never meets a certificate it cannot verify:

1. stage:   a new CA is generated into ``next_ca``; the caBundle becomes {current, next};
            serving certificates are still signed by the current CA.
2. promote: once the leader has injected that caBundle into every webhook configuration and
            acknowledged it on the Secret (digest annotation), ``next_ca`` becomes the CA, the old
            CA moves to ``previous_cas`` and a new serving certificate is issued from the new CA.
            If the old CA is about to expire the promotion is forced: waiting longer cannot help.
3. retire:  previous CAs drop out of the caBundle when they expire.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.exceptions import InvalidSignature

from vgpu_guard.certs._bundle import CertificateBundle, KeyPair, parse_certificates
from vgpu_guard.certs._errors import InvalidBundle
from vgpu_guard.certs._generate import ServingSpec, generate_ca, issue_serving_certificate
from vgpu_guard.certs._policy import DEFAULT_POLICY, RenewalPolicy

__all__ = ["Rotation", "needs_renewal", "plan_rotation"]


def needs_renewal(
    bundle: CertificateBundle, now: datetime, window: timedelta = DEFAULT_POLICY.serving_renew_before
) -> bool:
    """True when the serving certificate expires within ``window`` of ``now`` (or already has)."""
    return bundle.serving.not_after - now < window


@dataclass(frozen=True, slots=True)
class Rotation:
    """A changed bundle and why it changed (for logs and tests)."""

    bundle: CertificateBundle
    reasons: tuple[str, ...]


def _san_matches(cert: x509.Certificate, spec: ServingSpec) -> bool:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    return set(san.get_values_for_type(x509.DNSName)) == set(spec.dns_names()) and set(
        san.get_values_for_type(x509.IPAddress)
    ) == set(spec.ips())


def _signed_by(leaf: KeyPair, ca: KeyPair) -> bool:
    try:
        leaf.certificate.verify_directly_issued_by(ca.certificate)
    except (InvalidSignature, ValueError, TypeError, InvalidBundle):
        return False
    return True


def _bootstrap(spec: ServingSpec, now: datetime, policy: RenewalPolicy) -> CertificateBundle:
    ca = generate_ca(now=now, validity=policy.ca_validity, backdate=policy.backdate)
    serving = issue_serving_certificate(
        ca, spec, now=now, validity=policy.serving_validity, backdate=policy.backdate
    )
    return CertificateBundle(ca=ca, serving=serving)


def plan_rotation(
    current: CertificateBundle | None,
    spec: ServingSpec,
    *,
    now: datetime,
    policy: RenewalPolicy = DEFAULT_POLICY,
    acknowledged_digest: str | None = None,
) -> Rotation | None:
    """Decide the next bundle; ``None`` when ``current`` is fine as it is.

    ``acknowledged_digest`` is the caBundle digest the leader last confirmed injected (see module
    docstring); it gates the promotion of a staged CA.
    """
    if current is None or current.ca.not_after <= now:
        return Rotation(_bootstrap(spec, now, policy), ("bootstrap" if current is None else "ca-expired",))

    reasons: list[str] = []
    bundle = current
    kept = tuple(
        p for p in bundle.previous_cas if all(c.not_valid_after_utc > now for c in parse_certificates(p))
    )
    if kept != bundle.previous_cas:
        bundle = replace(bundle, previous_cas=kept)
        reasons.append("previous-ca-expired")

    if bundle.next_ca is None and bundle.ca.not_after - now < policy.ca_renew_before:
        next_ca = generate_ca(now=now, validity=policy.ca_validity, backdate=policy.backdate)
        bundle = replace(bundle, next_ca=next_ca)
        reasons.append("ca-rollover-staged")
    elif bundle.next_ca is not None:
        acknowledged = acknowledged_digest == bundle.ca_bundle_digest()
        forced = bundle.ca.not_after - now < policy.serving_renew_before
        if acknowledged or forced:
            bundle = CertificateBundle(
                ca=bundle.next_ca,
                serving=bundle.serving,
                previous_cas=(bundle.ca.cert_pem, *bundle.previous_cas),
            )
            reasons.append("ca-rollover-promoted" if acknowledged else "ca-rollover-forced")

    serving_reason = None
    if not _signed_by(bundle.serving, bundle.ca):
        serving_reason = "serving-not-signed-by-ca"
    elif needs_renewal(bundle, now, policy.serving_renew_before):
        serving_reason = "serving-expiring"
    elif not _san_matches(bundle.serving.certificate, spec):
        serving_reason = "serving-names-changed"
    if serving_reason:
        serving = issue_serving_certificate(
            bundle.ca, spec, now=now, validity=policy.serving_validity, backdate=policy.backdate
        )
        bundle = replace(bundle, serving=serving)
        reasons.append(serving_reason)

    return Rotation(bundle, tuple(reasons)) if reasons else None
