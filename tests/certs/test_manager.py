"""The manager loop: Secret, local reload, leader-only injection; years fast-forwarded."""

from __future__ import annotations

import asyncio
import heapq
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.certs.certs_testkit import (
    MUTATING,
    T0,
    VALIDATING,
    FakeClock,
    FakeClusterClient,
    ca_bundles_in,
    verify_like_apiserver,
)
from vgpu_guard.certs import (
    ACK_ANNOTATION,
    CertificateManager,
    CertificateManagerConfig,
    InjectionFailed,
    ReloadableSSLContext,
    RenewalPolicy,
    ServingSpec,
    run_certificate_manager,
)
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.errors import Unavailable
from vgpu_guard.kube.resources import MUTATING_WEBHOOKS, SECRETS, VALIDATING_WEBHOOKS

pytestmark = pytest.mark.usefixtures("webhook_configs")

NS, NAME = "vgpu-system", "vgpu-guard-tls"
HOST = "vgpu-guard-webhook.vgpu-system.svc"


def _config(spec: ServingSpec, **kw: object) -> CertificateManagerConfig:
    return CertificateManagerConfig(
        secret_namespace=NS,
        secret_name=NAME,
        spec=spec,
        mutating_webhooks=(MUTATING,),
        validating_webhooks=(VALIDATING,),
        **kw,  # type: ignore[arg-type]
    )


async def test_leader_pass_creates_loads_writes_injects_and_acknowledges(
    client: ClusterClient, spec: ServingSpec, tmp_path: Path
) -> None:
    ctx = ReloadableSSLContext(source=NAME)
    manager = CertificateManager(
        client, config=_config(spec, cert_dir=tmp_path), context=ctx, is_leader=lambda: True
    )
    assert not manager.ready
    delay = await manager.run_once(T0)
    assert manager.ready and manager.bundle is not None
    bundle = manager.bundle
    assert ctx.serial == bundle.serving.serial
    assert (tmp_path / "tls.crt").read_bytes() == bundle.serving.cert_pem
    assert (tmp_path / "ca.crt").read_bytes() == bundle.ca_bundle_pem()
    for resource, name in ((MUTATING_WEBHOOKS, MUTATING), (VALIDATING_WEBHOOKS, VALIDATING)):
        assert ca_bundles_in(await client.get(resource, name)) == [bundle.ca_bundle_pem()] * 2
    secret = await client.get(SECRETS, NAME, namespace=NS)
    assert secret["metadata"]["annotations"][ACK_ANNOTATION] == bundle.ca_bundle_digest()
    assert delay == timedelta(hours=12)


async def test_a_follower_never_touches_webhook_configurations(
    client: ClusterClient, fake: FakeClusterClient, spec: ServingSpec
) -> None:
    ctx = ReloadableSSLContext(source=NAME)
    await CertificateManager(client, config=_config(spec), context=ctx, is_leader=lambda: False).run_once(T0)
    assert ctx.loaded
    assert all(kind == "Secret" for _, kind, _ in fake.writes)
    config = await client.get(VALIDATING_WEBHOOKS, VALIDATING)
    assert all("caBundle" not in h["clientConfig"] for h in config["webhooks"])


async def test_replicas_starting_together_serve_one_certificate(
    client: ClusterClient, spec: ServingSpec
) -> None:
    contexts = [ReloadableSSLContext(source=NAME) for _ in range(3)]
    managers = [
        CertificateManager(client, config=_config(spec), context=c, is_leader=lambda i=i: i == 0)  # type: ignore[misc]
        for i, c in enumerate(contexts)
    ]
    await asyncio.gather(*(m.run_once(T0) for m in managers))
    assert len({c.serial for c in contexts}) == 1


async def test_loop_renews_ahead_of_expiry_with_the_default_windows(
    client: ClusterClient, spec: ServingSpec, clock: FakeClock
) -> None:
    ctx = ReloadableSSLContext(source=NAME)
    stop = asyncio.Event()
    renewals: list[tuple[timedelta, timedelta]] = []  # (old cert's time left, new cert's) at each swap
    last: dict[str, Any] = {"serial": None, "not_after": None}

    async def sleep(seconds: float) -> None:
        assert ctx.not_after is not None
        if last["serial"] is not None and ctx.serial != last["serial"]:
            renewals.append((last["not_after"] - clock.now, ctx.not_after - clock.now))
        # After every pass the served certificate has more than the renewal window left.
        assert ctx.not_after - clock.now >= timedelta(days=90) - timedelta(seconds=1)
        last.update(serial=ctx.serial, not_after=ctx.not_after)
        await clock.sleep(seconds)
        if clock.now > T0 + timedelta(days=3 * 365):
            stop.set()

    async with asyncio.timeout(20):
        await run_certificate_manager(
            client,
            config=_config(spec),
            context=ctx,
            is_leader=lambda: True,
            clock=clock,
            sleep=sleep,
            stop=stop,
        )
    assert len(renewals) == 3, renewals
    for old_left, new_left in renewals:
        # Renewed as soon as the old certificate entered the 90-day window (not a check interval late).
        assert timedelta(days=90) - timedelta(minutes=1) <= old_left <= timedelta(days=90)
        assert new_left == timedelta(days=365)
    # Sleeping to the next deadline, bounded by the 12 h check interval: about two passes a day.
    assert len(clock.sleeps) < 3 * 365 * 2 + 20


async def test_api_errors_are_retried_not_raised(
    spec: ServingSpec, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    class Flaky(FakeClusterClient):
        failures = 2

        async def get(self, resource, name, *, namespace=None):  # type: ignore[no-untyped-def]
            if Flaky.failures:
                Flaky.failures -= 1
                raise Unavailable("connection refused", code=0)
            return await super().get(resource, name, namespace=namespace)

    fake = Flaky()
    ctx = ReloadableSSLContext(source=NAME)
    stop = asyncio.Event()

    async def sleep(seconds: float) -> None:
        await clock.sleep(seconds)
        if ctx.loaded:
            stop.set()

    with caplog.at_level(logging.ERROR, logger="vgpu_guard.certs"):
        await run_certificate_manager(
            fake,
            config=_config(spec),
            context=ctx,
            is_leader=lambda: False,
            clock=clock,
            sleep=sleep,
            stop=stop,
        )
    assert clock.sleeps[:2] == [30.0, 30.0]
    assert [r.__dict__["fields"]["event"] for r in caplog.records] == ["reconcile_failed"] * 2
    assert "Unavailable" in caplog.records[0].__dict__["fields"]["error"]


async def test_decades_of_rollovers_never_serve_a_certificate_the_webhooks_do_not_trust(
    client: ClusterClient, spec: ServingSpec, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Three replicas, leadership moving once, 25 years: after every pass of every replica, the
    certificate each one serves verifies against the caBundle the API server would use."""
    policy = RenewalPolicy(check_interval=timedelta(days=30))
    leader = {"index": 0}
    contexts = [ReloadableSSLContext(source=f"replica-{i}") for i in range(3)]
    managers = [
        CertificateManager(
            client,
            config=_config(spec, policy=policy),
            context=ctx,
            is_leader=lambda i=i: leader["index"] == i,  # type: ignore[misc]
        )
        for i, ctx in enumerate(contexts)
    ]
    # Replicas start a few hours apart; each wakes when its own delay says so.
    queue = [(T0 + timedelta(hours=3 * i), i) for i in range(3)]
    heapq.heapify(queue)
    end = T0 + timedelta(days=25 * 365)
    cas_seen: set[int] = set()
    with caplog.at_level(logging.INFO, logger="vgpu_guard.certs"):
        while queue[0][0] < end:
            clock.now, i = heapq.heappop(queue)
            if clock.now > T0 + timedelta(days=11 * 365):
                leader["index"] = 2
            delay = await managers[i].run_once(clock.now)
            heapq.heappush(queue, (clock.now + delay, i))
            bundle_pem = ca_bundles_in(await client.get(VALIDATING_WEBHOOKS, VALIDATING))[0]
            for m in managers:
                if m.bundle is not None:
                    verify_like_apiserver(m.bundle.serving.cert_pem, bundle_pem, host=HOST, now=clock.now)
            assert managers[i].bundle is not None
            cas_seen.add(managers[i].bundle.ca.serial)  # type: ignore[union-attr]
    assert len(cas_seen) == 3, "25 years with a 10-year CA rolling over 1 year early: three CAs"
    reasons = [
        r
        for rec in caplog.records
        if rec.__dict__.get("fields", {}).get("event") == "secret_written"
        for r in rec.__dict__["fields"]["reasons"]
    ]
    assert reasons.count("ca-rollover-staged") == 2
    assert reasons.count("ca-rollover-promoted") == 2
    assert "ca-rollover-forced" not in reasons
    assert reasons.count("previous-ca-expired") == 2


async def test_without_acknowledgement_promotion_waits_until_it_is_forced(
    client: ClusterClient, fake: FakeClusterClient, spec: ServingSpec
) -> None:
    # The mutating configuration is missing: injection fails, so the leader never acknowledges.
    cfg = CertificateManagerConfig(
        secret_namespace=NS,
        secret_name=NAME,
        spec=spec,
        mutating_webhooks=("deleted-by-someone",),
        validating_webhooks=(VALIDATING,),
    )
    manager = CertificateManager(client, config=cfg, context=None, is_leader=lambda: True)
    with pytest.raises(InjectionFailed, match="deleted-by-someone"):
        await manager.run_once(T0)
    first = manager.bundle
    assert first is not None
    staged_at = first.ca.not_after - timedelta(days=364)
    with pytest.raises(InjectionFailed, match="deleted-by-someone"):
        await manager.run_once(staged_at)
    assert manager.bundle is not None and manager.bundle.next_ca is not None
    assert manager.bundle.ca == first.ca
    with pytest.raises(InjectionFailed, match="deleted-by-someone"):
        await manager.run_once(first.ca.not_after - timedelta(days=100))
    assert manager.bundle.ca == first.ca, "no acknowledgement: keep signing with the old CA"
    with pytest.raises(InjectionFailed, match="deleted-by-someone"):
        await manager.run_once(first.ca.not_after - timedelta(days=89))
    assert manager.bundle.ca != first.ca and manager.bundle.previous_cas == (first.ca.cert_pem,)
    # The configuration that exists got the staged CA before the forced promotion.
    bundle_pem = ca_bundles_in(await client.get(VALIDATING_WEBHOOKS, VALIDATING))[0]
    verify_like_apiserver(
        manager.bundle.serving.cert_pem, bundle_pem, host=HOST, now=first.ca.not_after - timedelta(days=89)
    )
