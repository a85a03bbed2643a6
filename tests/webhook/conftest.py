"""A real webhook over real HTTPS on loopback, with a test CA (trustme), and a client that trusts it."""

from __future__ import annotations

import contextlib
import ssl
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import trustme
from prometheus_client import CollectorRegistry

from tests.builders import A100_40, default_config, gpu_node, view_of
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.informer import Informer
from vgpu_guard.webhook.server import RunningWebhook, running_webhook
from vgpu_guard.webhook.views import StaticViewSource


@pytest.fixture(scope="session")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def server_ssl(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
    return context


@pytest.fixture
def client_ssl(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


@pytest.fixture
def views() -> StaticViewSource:
    return StaticViewSource(
        view_of(
            [gpu_node("a30"), gpu_node("a100", count=8, memory=40960, card_type=A100_40, mode="mig", split=7)]
        )
    )


@pytest.fixture
def config() -> GuardConfig:
    return default_config()


def serving(
    config: GuardConfig,
    views: StaticViewSource,
    server_ssl: ssl.SSLContext,
    client: ClusterClient | None = None,
    ledgers: Informer | None = None,
) -> contextlib.AbstractAsyncContextManager[RunningWebhook]:
    """The webhook over HTTPS on a free loopback port, answering from ``views``; ``client``: the
    API server it may read (None: none); ``ledgers``: the ledger informer its writer follows."""
    return running_webhook(
        config=config,
        views=views,
        ssl_context=server_ssl,
        registry=CollectorRegistry(),
        client=client,
        host="127.0.0.1",
        port=0,
        ops_port=0,
        ledgers=ledgers,
    )


@pytest.fixture
async def webhook(
    config: GuardConfig, views: StaticViewSource, server_ssl: ssl.SSLContext
) -> AsyncIterator[RunningWebhook]:
    async with serving(config, views, server_ssl) as running:
        yield running


@pytest.fixture
async def http(client_ssl: ssl.SSLContext) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl)) as session:
        yield session


def admission_review(
    obj: dict[str, Any] | None,
    *,
    resource: str = "pods",
    group: str = "",
    version: str = "v1",
    kind: str = "Pod",
    operation: str = "CREATE",
    dry_run: bool = False,
    username: str = "alice",
    old: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An AdmissionReview as kube-apiserver sends it (every field it fills for a CREATE)."""
    gvk = {"group": group, "version": version, "kind": kind}
    gvr = {"group": group, "version": version, "resource": resource}
    metadata = (obj or old or {}).get("metadata", {})
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": metadata.get("name", ""),
            "namespace": metadata.get("namespace", ""),
            "operation": operation,
            "userInfo": {"username": username, "uid": "u-1", "groups": ["system:authenticated"]},
            "object": obj,
            "oldObject": old,
            "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }
