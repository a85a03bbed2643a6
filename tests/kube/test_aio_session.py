"""The aio client's session reads no environment per request unless a proxy is configured, and
sends bodies without the library's copy."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from kubernetes.aio import client as kclient

from tests.apidouble_support.http.server import serve_double
from vgpu_guard.kube.aio import AioClusterClient, _no_per_request_env
from vgpu_guard.kube.resources import NODES


def test_no_proxy_means_no_environment_lookups_per_request(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    configuration = kclient.Configuration()
    _no_per_request_env(configuration)
    assert configuration.client_session_kwargs == {"trust_env": False}


def test_a_configured_proxy_keeps_the_librarys_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    configuration = kclient.Configuration()
    _no_per_request_env(configuration)
    assert not configuration.client_session_kwargs


async def test_a_body_goes_to_the_server_as_it_is_not_copied_value_by_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35's CPU per binding: the library's sanitize_for_serialization copied every body whole,
    one call per value, before encoding it (0.14 ms for the arbiter's 15-entry GPULedger write).
    Our bodies are JSON already; they are sent without that copy, and arrive the same."""
    copied: list[object] = []
    sanitize: Callable[[kclient.ApiClient, object], object] = kclient.ApiClient.sanitize_for_serialization

    def counting(self: kclient.ApiClient, obj: object) -> object:
        copied.append(obj)
        return sanitize(self, obj)

    monkeypatch.setattr(kclient.ApiClient, "sanitize_for_serialization", counting)
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"pool": "a100"}}}
    async with serve_double(tmp_path / "double") as double:
        client = await AioClusterClient.from_kubeconfig(str(double.kubeconfig))
        try:
            created = await client.create(NODES, node)
            patched = await client.patch(
                NODES, "n1", [{"op": "add", "path": "/metadata/labels/x", "value": "1"}], patch_type="json"
            )
        finally:
            await client.close()
    assert created["metadata"]["labels"] == {"pool": "a100"}
    assert patched["metadata"]["labels"] == {"pool": "a100", "x": "1"}
    assert not [obj for obj in copied if isinstance(obj, (dict, list)) and "Content-Type" not in obj]
