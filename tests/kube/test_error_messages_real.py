"""The error texts of ``test_error_messages`` on a real kube-apiserver: a Volcano Queue before its
CRD is installed, a missing pod, and a ServiceAccount that may not list nodes (the texts an
operator sees when the chart's CRDs or RBAC are missing)."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kube.test_error_messages import FORBIDDEN_NODES, MISSING_POD, NO_QUEUES_CRD
from tests.real_cluster import real_cluster
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.errors import Forbidden, KubeError, NotFound
from vgpu_guard.kube.resources import NAMESPACES, NODES, PODS, QUEUES, SECRETS, SERVICE_ACCOUNTS


async def token_of(admin: AioClusterClient, namespace: str, name: str) -> str:
    """The token of the ServiceAccount's secret (1.20's token controller creates it)."""
    for _ in range(100):
        account = await admin.get(SERVICE_ACCOUNTS, name, namespace=namespace)
        for ref in account.get("secrets") or []:
            secret = await admin.get(SECRETS, ref["name"], namespace=namespace)
            token = (secret.get("data") or {}).get("token")
            if token:
                return base64.b64decode(token).decode()
        await asyncio.sleep(0.1)
    raise AssertionError(f"no token secret for ServiceAccount {namespace}/{name}")


def kubeconfig_with_token(admin_kubeconfig: Path, token: str, out: Path) -> Path:
    config: dict[str, Any] = yaml.safe_load(admin_kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    out.write_text(yaml.safe_dump(config))
    return out


async def failure(call: Any) -> KubeError:
    with pytest.raises(KubeError) as err:
        await call
    return err.value


def test_error_texts_on_a_real_api_server(tmp_path: Path) -> None:
    with real_cluster(tmp_path) as cluster:
        asyncio.run(check(cluster.kubeconfig, tmp_path))


async def check(kubeconfig: Path, tmp_path: Path) -> None:
    admin = await AioClusterClient.from_kubeconfig(str(kubeconfig))
    try:
        queue = await failure(admin.get(QUEUES, "team-a"))
        assert isinstance(queue, NotFound)
        assert str(queue) == f"get scheduling.volcano.sh/v1beta1/queues team-a: HTTP 404{NO_QUEUES_CRD}"
        missing = await failure(admin.get(PODS, "nope", namespace="default"))
        assert isinstance(missing, NotFound) and str(missing) == MISSING_POD
        await admin.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tenant"}}
        )
        account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader"}}
        await admin.create(SERVICE_ACCOUNTS, account, namespace="tenant")
        token = await token_of(admin, "tenant", "reader")
    finally:
        await admin.close()
    reader = await AioClusterClient.from_kubeconfig(
        str(kubeconfig_with_token(kubeconfig, token, tmp_path / "reader.kubeconfig"))
    )
    try:
        refused = await failure(reader.list(NODES))
    finally:
        await reader.close()
    assert isinstance(refused, Forbidden) and str(refused) == FORBIDDEN_NODES
