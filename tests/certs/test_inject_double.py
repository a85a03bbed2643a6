"""caBundle injection against the API double, end to end: the API server's own webhook call is what
proves the injected CA is right. Before injection the double cannot verify our webhook's
certificate and a failurePolicy=Fail webhook blocks the pod with the API server's error; after one
leader pass of the certificate manager (Secret created, certificate loaded into the TLS server,
caBundle injected) the same CREATE goes through our mutation."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tests.apidouble_support.http.server import serve_double
from vgpu_guard.certs import CertificateManager, CertificateManagerConfig, ReloadableSSLContext, ServingSpec
from vgpu_guard.configfile import load_config
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.errors import KubeError
from vgpu_guard.kube.resources import MUTATING_WEBHOOKS, NAMESPACES, NODES, PODS
from vgpu_guard.webhook.server import running_webhook
from vgpu_guard.webhook.views import StaticViewSource

CONFIG = load_config(env={})
WRONG_CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()


def configuration(port: int) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "vgpu-guard"},
        "webhooks": [
            {
                "name": "pods.vgpu.vgpu-guard.io",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 5,
                "clientConfig": {"url": f"https://127.0.0.1:{port}/mutate/pods", "caBundle": WRONG_CA},
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                        "operations": ["CREATE"],
                    }
                ],
            }
        ],
    }


def gpu_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "i",
                    "resources": {
                        "limits": {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "1000"}
                    },
                }
            ]
        },
    }


async def test_injected_ca_bundle_lets_the_api_server_call_the_webhook(tmp_path: Path) -> None:
    from tests.builders import gpu_node, view_of

    context = ReloadableSSLContext(source="test")
    views = StaticViewSource(view_of([gpu_node("a30")]))
    async with (
        serve_double(tmp_path) as api,
        running_webhook(
            config=CONFIG,
            views=views,
            ssl_context=context.ssl_context,
            registry=CollectorRegistry(),
            host="127.0.0.1",
            port=0,
            ops_port=0,
        ) as webhook,
    ):
        api.store.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vgpu-guard"}}
        )
        api.store.create(NODES, gpu_node("a30"))
        client = await AioClusterClient.from_kubeconfig(str(api.kubeconfig))
        try:
            await client.create(MUTATING_WEBHOOKS, configuration(webhook.port))
            with pytest.raises(KubeError) as refused:
                await client.create(PODS, gpu_pod("before"), namespace="default")
            assert 'failed calling webhook "pods.vgpu.vgpu-guard.io"' in refused.value.message

            manager = CertificateManager(
                client,
                config=CertificateManagerConfig(
                    secret_namespace="vgpu-guard",
                    secret_name="vgpu-guard-tls",
                    spec=ServingSpec(
                        service="vgpu-guard-webhook", namespace="vgpu-guard", ip_addresses=("127.0.0.1",)
                    ),
                    mutating_webhooks=("vgpu-guard",),
                ),
                context=context,
                is_leader=lambda: True,
            )
            await manager.run_once(datetime.now(UTC))
            injected = (await client.get(MUTATING_WEBHOOKS, "vgpu-guard"))["webhooks"][0]["clientConfig"][
                "caBundle"
            ]
            assert manager.bundle is not None
            assert base64.b64decode(injected) == manager.bundle.ca_bundle_pem()

            created = await client.create(PODS, gpu_pod("after"), namespace="default")
            assert created["metadata"]["annotations"]["volcano.sh/vgpu-mode"] == "hami-core"
            assert any("set annotation volcano.sh/vgpu-mode=hami-core" in w for w in client.warnings)
        finally:
            await client.close()
