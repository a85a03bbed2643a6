"""The aio client's session reads no environment per request unless a proxy is configured."""

from __future__ import annotations

import pytest
from kubernetes.aio import client as kclient

from vgpu_guard.kube.aio import _no_per_request_env


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
