"""Helm v4 (the helm-python-sdk library) installs, upgrades and uninstalls our chart on the double.

Helm validates the rendered manifest against ``/openapi/v2`` (protobuf), writes its release
Secrets as protobuf, and applies every object with server-side apply: the double serves all
three (docs/apidouble.md). The chart's Deployments, Services and cleanup Job are left out
(``webhook/controller/cleanup.enabled=false``): the double serves no workloads, and nothing would
run them. The user stories with running webhooks live in tests/e2e.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from vgpu_guard.apidouble import RunningDouble, serve_double
from vgpu_guard.kube.resources import CRDS, SECRETS

CHART = Path(__file__).resolve().parents[2] / "manifests/charts/vgpu-guard"
VALUES: dict[str, Any] = {
    "webhook": {"enabled": False},
    "controller": {"enabled": False},
    "cleanup": {"enabled": False},
}
ADM = "admissionregistration.k8s.io"


def _names(api: RunningDouble, plural: str) -> list[str]:
    info = next(t for t in api.store.types() if (t.group, t.plural) == (ADM, plural))
    return sorted(o["metadata"]["name"] for o in api.store.list(info.resource()).items)


async def test_helm_install_upgrade_and_uninstall_of_the_chart(tmp_path: Path) -> None:
    from helm_python import Config

    async with serve_double(tmp_path / "double") as api:
        helm = Config(kubeconfig_path=str(api.kubeconfig), namespace="vgpu-guard")
        installed = await asyncio.to_thread(
            helm.install, str(CHART), "vg", VALUES, timeout=60, create_namespace=True
        )
        assert installed["name"] == "vg"
        assert _names(api, "validatingwebhookconfigurations") == ["vg-vgpu-guard"]
        crds = sorted(o["metadata"]["name"] for o in api.store.list(CRDS).items)
        assert crds == ["gangplacements.vgpu-guard.io", "gpuledgers.vgpu-guard.io"]
        upgraded = await asyncio.to_thread(helm.upgrade, str(CHART), "vg", VALUES, timeout=60)
        assert upgraded["name"] == "vg"
        releases = api.store.list(SECRETS, namespace="vgpu-guard", label_selector="owner=helm").items
        assert sorted(r["metadata"]["labels"]["version"] for r in releases) == ["1", "2"]
        await asyncio.to_thread(helm.uninstall, "vg", timeout=60)
        assert _names(api, "validatingwebhookconfigurations") == []
        assert _names(api, "mutatingwebhookconfigurations") == []
