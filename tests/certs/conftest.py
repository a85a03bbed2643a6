"""Fixtures for certificate tests (helpers live in ``certs_testkit``)."""

from __future__ import annotations

from typing import cast

import pytest

from tests.certs.certs_testkit import (
    MUTATING,
    VALIDATING,
    FakeClock,
    FakeClusterClient,
    webhook_configuration,
)
from vgpu_guard.certs import ServingSpec
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.resources import MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def spec() -> ServingSpec:
    return ServingSpec(service="vgpu-guard-webhook", namespace="vgpu-system", ip_addresses=("127.0.0.1",))


@pytest.fixture
def fake() -> FakeClusterClient:
    return FakeClusterClient()


@pytest.fixture
def client(fake: FakeClusterClient) -> ClusterClient:
    return cast(ClusterClient, fake)


@pytest.fixture
def webhook_configs(fake: FakeClusterClient) -> tuple[str, str]:
    fake.put(MUTATING_WEBHOOKS, webhook_configuration("MutatingWebhookConfiguration", MUTATING))
    fake.put(VALIDATING_WEBHOOKS, webhook_configuration("ValidatingWebhookConfiguration", VALIDATING))
    return MUTATING, VALIDATING
