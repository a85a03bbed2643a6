"""Renewal window and CA rollover, decided by the pure planner with a fake clock."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.certs.certs_testkit import T0, verify_like_apiserver
from vgpu_guard.certs import (
    DEFAULT_POLICY,
    CertificateBundle,
    RenewalPolicy,
    ServingSpec,
    needs_renewal,
    plan_rotation,
)

HOST = "vgpu-guard-webhook.vgpu-system.svc"


def _fresh(spec: ServingSpec) -> CertificateBundle:
    rotation = plan_rotation(None, spec, now=T0)
    assert rotation is not None and rotation.reasons == ("bootstrap",)
    return rotation.bundle


def test_renewal_window_boundaries(spec: ServingSpec) -> None:
    bundle = _fresh(spec)
    window = timedelta(days=90)
    renew_at = bundle.serving.not_after - window
    assert renew_at == T0 + timedelta(days=365 - 90)
    assert not needs_renewal(bundle, T0, window)
    assert not needs_renewal(bundle, renew_at, window)  # exactly 90 days left: still fine
    assert needs_renewal(bundle, renew_at + timedelta(seconds=1), window)
    assert needs_renewal(bundle, bundle.serving.not_after + timedelta(days=1), window)  # already expired


def test_default_window_is_cert_controllers(spec: ServingSpec) -> None:
    bundle = _fresh(spec)
    assert DEFAULT_POLICY.serving_renew_before == timedelta(days=90)
    assert not needs_renewal(bundle, T0 + timedelta(days=274))
    assert needs_renewal(bundle, T0 + timedelta(days=276))


def test_a_fresh_bundle_needs_nothing(spec: ServingSpec) -> None:
    bundle = _fresh(spec)
    assert plan_rotation(bundle, spec, now=T0 + timedelta(days=200)) is None


def test_an_expiring_serving_cert_is_reissued_by_the_same_ca(spec: ServingSpec) -> None:
    bundle = _fresh(spec)
    later = T0 + timedelta(days=280)
    rotation = plan_rotation(bundle, spec, now=later)
    assert rotation is not None and rotation.reasons == ("serving-expiring",)
    renewed = rotation.bundle
    assert renewed.ca == bundle.ca
    assert renewed.serving.serial != bundle.serving.serial
    assert renewed.serving.not_after == later + timedelta(days=365)
    assert plan_rotation(renewed, spec, now=later) is None


def test_changed_service_names_reissue(spec: ServingSpec) -> None:
    bundle = _fresh(spec)
    moved = ServingSpec(service="renamed", namespace="vgpu-system")
    rotation = plan_rotation(bundle, moved, now=T0 + timedelta(days=1))
    assert rotation is not None and rotation.reasons == ("serving-names-changed",)
    verify_like_apiserver(
        rotation.bundle.serving.cert_pem,
        rotation.bundle.ca_bundle_pem(),
        host="renamed.vgpu-system.svc",
        now=T0 + timedelta(days=2),
    )


def test_ca_rollover_stages_then_promotes_only_after_acknowledgement(spec: ServingSpec) -> None:
    bundle = _fresh(spec)
    # Keep the serving certificate fresh so only the CA drives changes.
    t = bundle.ca.not_after - timedelta(days=364)
    bundle = plan_rotation(bundle, spec, now=t - timedelta(days=1)).bundle  # type: ignore[union-attr]
    old_ca, old_serving = bundle.ca, bundle.serving

    staged = plan_rotation(bundle, spec, now=t)
    assert staged is not None and staged.reasons == ("ca-rollover-staged",)
    b = staged.bundle
    assert b.ca == old_ca and b.serving == old_serving, "serving must stay on the old CA until trusted"
    assert b.next_ca is not None
    assert b.trusted_ca_pems() == [old_ca.cert_pem, b.next_ca.cert_pem]

    # No acknowledgement (or a stale one): nothing moves.
    assert plan_rotation(b, spec, now=t + timedelta(days=1)) is None
    assert plan_rotation(b, spec, now=t + timedelta(days=1), acknowledged_digest="stale") is None

    promoted = plan_rotation(b, spec, now=t + timedelta(days=1), acknowledged_digest=b.ca_bundle_digest())
    assert promoted is not None
    assert promoted.reasons == ("ca-rollover-promoted", "serving-not-signed-by-ca")
    p = promoted.bundle
    assert p.ca == b.next_ca and p.next_ca is None
    assert p.previous_cas == (old_ca.cert_pem,)
    p.serving.certificate.verify_directly_issued_by(p.ca.certificate)
    # Same set of CAs: the digest the leader injected still holds, no second round needed.
    assert p.ca_bundle_digest() == b.ca_bundle_digest()
    # Old serving certs (still held by replicas that have not re-read) verify against the bundle.
    verify_like_apiserver(old_serving.cert_pem, p.ca_bundle_pem(), host=HOST, now=t + timedelta(days=1))
    verify_like_apiserver(p.serving.cert_pem, p.ca_bundle_pem(), host=HOST, now=t + timedelta(days=1))

    # The old CA leaves the bundle once it has expired, not before (the serving certificate
    # happens to be renewed around then too; that must not disturb the previous CAs).
    before = plan_rotation(p, spec, now=old_ca.not_after - timedelta(seconds=1))
    still = before.bundle if before else p
    assert old_ca.cert_pem in still.previous_cas
    retired = plan_rotation(still, spec, now=old_ca.not_after + timedelta(seconds=1))
    assert retired is not None and retired.reasons == ("previous-ca-expired",)
    assert retired.bundle.trusted_ca_pems() == [p.ca.cert_pem]


def test_promotion_is_forced_when_the_old_ca_is_about_to_expire(spec: ServingSpec) -> None:
    bundle = _fresh(spec)
    t = bundle.ca.not_after - timedelta(days=364)
    staged = plan_rotation(bundle, spec, now=t)
    assert staged is not None and "ca-rollover-staged" in staged.reasons
    late = bundle.ca.not_after - timedelta(days=89)
    forced = plan_rotation(staged.bundle, spec, now=late)
    assert forced is not None and forced.reasons[0] == "ca-rollover-forced"
    assert forced.bundle.ca == staged.bundle.next_ca


def test_an_expired_ca_is_replaced_outright(spec: ServingSpec) -> None:
    bundle = _fresh(spec)
    rotation = plan_rotation(bundle, spec, now=bundle.ca.not_after + timedelta(days=1))
    assert rotation is not None and rotation.reasons == ("ca-expired",)
    assert rotation.bundle.ca != bundle.ca


def test_policy_rejects_windows_that_would_renew_forever() -> None:
    with pytest.raises(ValueError, match="serving_renew_before"):
        RenewalPolicy(serving_validity=timedelta(days=30), serving_renew_before=timedelta(days=30))
    with pytest.raises(ValueError, match="ca_renew_before"):
        RenewalPolicy(ca_validity=timedelta(days=300), ca_renew_before=timedelta(days=365))
