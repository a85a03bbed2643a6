"""The Secret-backed store: create-if-missing, CAS updates, replicas racing converge."""

from __future__ import annotations

import asyncio
import base64
from datetime import timedelta

import pytest

from tests.certs.certs_testkit import T0, FakeClusterClient
from vgpu_guard.certs import (
    ACK_ANNOTATION,
    SecretCertificateStore,
    ServingSpec,
    StoreConflict,
    bundle_from_secret_data,
    plan_rotation,
)
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.resources import SECRETS

NS, NAME = "vgpu-system", "vgpu-guard-tls"


def _store(client: ClusterClient, spec: ServingSpec) -> SecretCertificateStore:
    return SecretCertificateStore(client, namespace=NS, name=NAME, spec=spec)


async def test_creates_the_secret_when_missing(
    client: ClusterClient, fake: FakeClusterClient, spec: ServingSpec
) -> None:
    bundle, acked = await _store(client, spec).reconcile(T0)
    assert acked is None
    secret = await client.get(SECRETS, NAME, namespace=NS)
    assert set(secret["data"]) == {"ca.crt", "ca.key", "tls.crt", "tls.key"}
    assert base64.b64decode(secret["data"]["tls.crt"]) == bundle.serving.cert_pem
    assert bundle_from_secret_data(secret["data"]) == bundle
    assert fake.writes == [("create", "Secret", NAME)]


async def test_a_valid_secret_is_left_alone(
    client: ClusterClient, fake: FakeClusterClient, spec: ServingSpec
) -> None:
    first, _ = await _store(client, spec).reconcile(T0)
    again, _ = await _store(client, spec).reconcile(T0 + timedelta(days=100))
    assert again == first
    assert len(fake.writes) == 1


async def test_fills_a_secret_the_chart_precreated_empty(
    client: ClusterClient, fake: FakeClusterClient, spec: ServingSpec
) -> None:
    fake.put(SECRETS, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": NAME, "namespace": NS}})
    bundle, _ = await _store(client, spec).reconcile(T0)
    assert fake.writes == [("replace", "Secret", NAME)]
    secret = await client.get(SECRETS, NAME, namespace=NS)
    assert bundle_from_secret_data(secret["data"]) == bundle


async def test_garbage_in_the_secret_is_regenerated(
    client: ClusterClient, fake: FakeClusterClient, spec: ServingSpec
) -> None:
    junk = base64.b64encode(b"not a pem").decode()
    fake.put(
        SECRETS,
        {
            "metadata": {"name": NAME, "namespace": NS},
            "data": dict.fromkeys(("ca.crt", "ca.key", "tls.crt", "tls.key"), junk),
        },
    )
    bundle, _ = await _store(client, spec).reconcile(T0)
    bundle.serving.check()
    secret = await client.get(SECRETS, NAME, namespace=NS)
    assert bundle_from_secret_data(secret["data"]) == bundle


@pytest.mark.parametrize("replicas", [2, 5])
async def test_replicas_racing_on_a_missing_secret_converge_on_one_certificate(
    client: ClusterClient, fake: FakeClusterClient, spec: ServingSpec, replicas: int
) -> None:
    stores = [_store(client, spec) for _ in range(replicas)]
    results = await asyncio.gather(*(s.reconcile(T0) for s in stores))
    serials = {bundle.serving.serial for bundle, _ in results}
    assert len(serials) == 1
    secret = await client.get(SECRETS, NAME, namespace=NS)
    assert bundle_from_secret_data(secret["data"]).serving.serial in serials  # type: ignore[union-attr]
    assert [w for w in fake.writes if w[0] == "create"] == [("create", "Secret", NAME)]


async def test_replicas_racing_to_renew_converge_and_only_one_update_lands(
    client: ClusterClient, fake: FakeClusterClient, spec: ServingSpec
) -> None:
    first, _ = await _store(client, spec).reconcile(T0)
    due = first.serving.not_after - timedelta(days=30)
    results = await asyncio.gather(*(_store(client, spec).reconcile(due) for _ in range(4)))
    serials = {bundle.serving.serial for bundle, _ in results}
    assert len(serials) == 1 and first.serving.serial not in serials
    assert fake.writes.count(("replace", "Secret", NAME)) == 1
    assert fake.conflicts >= 1, "the race must actually have happened"


class _AlwaysMoving(FakeClusterClient):
    """Someone else rewrites the Secret between every read and write."""

    async def replace(self, resource, obj):  # type: ignore[no-untyped-def]
        current = await self.get(
            resource, obj["metadata"]["name"], namespace=obj["metadata"].get("namespace")
        )
        self.put(resource, current)
        return await super().replace(resource, obj)


async def test_gives_up_with_an_actionable_error_when_always_losing(spec: ServingSpec) -> None:
    fake = _AlwaysMoving()
    fake.put(SECRETS, {"metadata": {"name": NAME, "namespace": NS}})
    store = SecretCertificateStore(fake, namespace=NS, name=NAME, spec=spec, max_attempts=3)
    with pytest.raises(StoreConflict, match="changed on each of 3 attempts"):
        await store.reconcile(T0)


async def test_acknowledgement_is_recorded_only_for_the_current_bundle(
    client: ClusterClient, fake: FakeClusterClient, spec: ServingSpec
) -> None:
    store = _store(client, spec)
    bundle, _ = await store.reconcile(T0)
    assert not await store.acknowledge_injection("0" * 64)
    assert await store.acknowledge_injection(bundle.ca_bundle_digest())
    secret = await client.get(SECRETS, NAME, namespace=NS)
    assert secret["metadata"]["annotations"][ACK_ANNOTATION] == bundle.ca_bundle_digest()
    _, acked = await store.reconcile(T0)
    assert acked == bundle.ca_bundle_digest()


async def test_rollover_state_survives_the_round_trip(client: ClusterClient, spec: ServingSpec) -> None:
    store = _store(client, spec)
    bundle, _ = await store.reconcile(T0)
    staged, _ = await store.reconcile(bundle.ca.not_after - timedelta(days=300))
    assert staged.next_ca is not None
    secret = await client.get(SECRETS, NAME, namespace=NS)
    assert {"ca-next.crt", "ca-next.key"} <= set(secret["data"])
    assert bundle_from_secret_data(secret["data"]) == staged
    promoted = plan_rotation(
        staged,
        spec,
        now=bundle.ca.not_after - timedelta(days=300),
        acknowledged_digest=staged.ca_bundle_digest(),
    )
    assert promoted is not None
    assert promoted.bundle.previous_cas == (bundle.ca.cert_pem,)
