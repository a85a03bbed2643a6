"""caBundle injection into our webhook configurations, with optimistic concurrency."""

from __future__ import annotations

import base64
from datetime import timedelta

import pytest

from tests.certs.certs_testkit import (
    MUTATING,
    T0,
    VALIDATING,
    FakeClusterClient,
    ca_bundles_in,
    webhook_configuration,
)
from vgpu_guard.certs import InjectionFailed, ServingSpec, inject_ca_bundle, plan_rotation
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.resources import MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS

pytestmark = pytest.mark.usefixtures("webhook_configs")


async def test_every_webhook_entry_gets_the_base64_bundle(client: ClusterClient, spec: ServingSpec) -> None:
    bundle = plan_rotation(None, spec, now=T0).bundle  # type: ignore[union-attr]
    changed = await inject_ca_bundle(
        client, bundle.ca_bundle_pem(), mutating=[MUTATING], validating=[VALIDATING]
    )
    assert changed == [
        f"MutatingWebhookConfiguration/{MUTATING}",
        f"ValidatingWebhookConfiguration/{VALIDATING}",
    ]
    for resource, name in ((MUTATING_WEBHOOKS, MUTATING), (VALIDATING_WEBHOOKS, VALIDATING)):
        config = await client.get(resource, name)
        assert ca_bundles_in(config) == [bundle.ca.cert_pem, bundle.ca.cert_pem]
        # Only caBundle changed: service references stay as the chart wrote them.
        assert all(h["clientConfig"]["service"]["name"] == "vgpu-guard-webhook" for h in config["webhooks"])


async def test_rollover_bundle_carries_old_and_new_ca(client: ClusterClient, spec: ServingSpec) -> None:
    bundle = plan_rotation(None, spec, now=T0).bundle  # type: ignore[union-attr]
    staged = plan_rotation(bundle, spec, now=bundle.ca.not_after - timedelta(days=300)).bundle  # type: ignore[union-attr]
    assert staged.next_ca is not None
    await inject_ca_bundle(client, staged.ca_bundle_pem(), mutating=[MUTATING], validating=[VALIDATING])
    config = await client.get(VALIDATING_WEBHOOKS, VALIDATING)
    for pem in ca_bundles_in(config):
        assert pem == bundle.ca.cert_pem + staged.next_ca.cert_pem


async def test_injection_is_idempotent(
    client: ClusterClient, fake: FakeClusterClient, spec: ServingSpec
) -> None:
    pem = plan_rotation(None, spec, now=T0).bundle.ca_bundle_pem()  # type: ignore[union-attr]
    await inject_ca_bundle(client, pem, mutating=[MUTATING], validating=[VALIDATING])
    writes = len(fake.writes)
    assert await inject_ca_bundle(client, pem, mutating=[MUTATING], validating=[VALIDATING]) == []
    assert len(fake.writes) == writes


class _ConcurrentEditor(FakeClusterClient):
    """Helm (say) edits the configuration between our GET and PUT, once."""

    def __init__(self) -> None:
        super().__init__()
        self.edited = False

    async def replace(self, resource, obj):  # type: ignore[no-untyped-def]
        if not self.edited:
            self.edited = True
            theirs = await self.get(resource, obj["metadata"]["name"])
            theirs["webhooks"][0]["timeoutSeconds"] = 7
            self.put(resource, theirs)
        return await super().replace(resource, obj)


async def test_a_concurrent_edit_is_kept_and_the_bundle_still_lands(spec: ServingSpec) -> None:
    fake = _ConcurrentEditor()
    fake.put(VALIDATING_WEBHOOKS, webhook_configuration("ValidatingWebhookConfiguration", VALIDATING))
    pem = plan_rotation(None, spec, now=T0).bundle.ca_bundle_pem()  # type: ignore[union-attr]
    await inject_ca_bundle(fake, pem, validating=[VALIDATING])
    config = await fake.get(VALIDATING_WEBHOOKS, VALIDATING)
    assert fake.conflicts == 1
    assert config["webhooks"][0]["timeoutSeconds"] == 7, "their edit must not be overwritten"
    assert ca_bundles_in(config) == [pem, pem]


async def test_a_missing_configuration_is_reported_without_starving_the_others(
    client: ClusterClient, spec: ServingSpec
) -> None:
    pem = plan_rotation(None, spec, now=T0).bundle.ca_bundle_pem()  # type: ignore[union-attr]
    with pytest.raises(InjectionFailed, match=r"MutatingWebhookConfiguration/gone: NotFound.*resourceNames"):
        await inject_ca_bundle(client, pem, mutating=["gone"], validating=[VALIDATING])
    config = await client.get(VALIDATING_WEBHOOKS, VALIDATING)
    assert ca_bundles_in(config) == [pem, pem]
    assert base64.b64decode(config["webhooks"][1]["clientConfig"]["caBundle"]).startswith(
        b"-----BEGIN CERTIFICATE"
    )
