"""Value sets the chart is rendered with, and small readers over the rendered objects."""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any

import pytest
import trustme

from tests.manifests.chart import Rendered

# A real CA PEM (trustme), base64 as clientConfig.caBundle wants it.
CA_BUNDLE = base64.b64encode(trustme.CA().cert_pem.bytes()).decode()

SCENARIOS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "cert-manager": {"certs": {"mode": "certManager", "extraDNSNames": ["guard.example.internal"]}},
    "cert-manager-own-issuer": {
        "certs": {
            "mode": "certManager",
            "certManager": {"issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"}},
        }
    },
    # What the end-to-end suite renders: processes outside the cluster, reached by URL.
    "url-override": {
        "webhook": {"enabled": False},
        "controller": {"enabled": False},
        "webhooks": {"urlOverride": "https://127.0.0.1:9443/", "caBundle": CA_BUNDLE},
    },
    "routing-and-ib": {
        "config": {
            "scheduling": {"routing": True, "schedulerName": "vgpu-guard", "policy": "spread"},
            "topology": {"ibClusterLabel": "network.example.internal/ib-cluster", "hyperNodeTier": 2},
            "admission": {"rules": {"vgpu-privileged": "warn"}, "trustedUsers": ["system:admin"]},
        }
    },
    "replicas-3": {"webhook": {"replicas": 3}, "controller": {"replicas": 3}},
    "service-monitor": {
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}}
    },
    "grafana-dashboard": {"dashboard": {"enabled": True, "annotations": {"grafana_folder": "GPUs"}}},
    "device-config-inline": {
        "config": {
            "deviceConfig": {
                "source": "inline",
                "inline": {
                    "nvidia": {
                        "resourceCountName": "example.com/vgpu",
                        "resourceMemoryName": "example.com/vgpu-mem",
                        "deviceSplitCount": 4,
                        "deviceMemoryScaling": 1.5,
                    }
                },
            }
        }
    },
    "device-config-configmap": {"config": {"deviceConfig": {"source": "configMap"}}},
    "single-replica": {"webhook": {"replicas": 1}, "controller": {"replicas": 1}},
    "network-policy": {
        "webhook": {
            "networkPolicy": {
                "enabled": True,
                "apiServerPeers": [{"ipBlock": {"cidr": "10.0.0.0/24"}}],
                "metricsPeers": [
                    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
                ],
            },
            "limits": {"maxConnections": 64, "headerTimeoutSeconds": 5},
        }
    },
}

# Release name and namespace other than the defaults, so names are not hard-wired anywhere.
OTHER_RELEASE = ("guard", "gpu-system")


@pytest.fixture(params=sorted(SCENARIOS))
def scenario(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    name: str = request.param
    return name, SCENARIOS[name]


def of_kind(objects: Iterable[Rendered], kind: str) -> list[dict[str, Any]]:
    return [r.obj for r in objects if r.kind == kind]


def one(objects: Iterable[Rendered], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in of_kind(objects, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def pod_specs(objects: Iterable[Rendered]) -> list[tuple[str, dict[str, Any]]]:
    """(kind/name, pod spec) of every workload object."""
    out = []
    for r in objects:
        if r.kind in {"Deployment", "Job"}:
            out.append((f"{r.kind}/{r.name}", r.obj["spec"]["template"]["spec"]))
    return out
