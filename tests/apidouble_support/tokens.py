"""Identities for a served double: a bearer token, a kubeconfig or a client TLS context per user.

Test code: a served double hands out the admin's kubeconfig only (``RunningDouble.kubeconfig``); tests
act as other users (the chart's ServiceAccounts, a tenant) to exercise RBAC and what our webhook
decides from ``userInfo``, and send raw requests that must trust the double's CA.
"""

from __future__ import annotations

import secrets
import ssl
from pathlib import Path

from tests.apidouble_support.http.server import RunningDouble, write_kubeconfig
from vgpu_guard.apidouble.identity import UserInfo

__all__ = ["kubeconfig_for", "ssl_context", "token_for"]


def token_for(api: RunningDouble, user: UserInfo) -> str:
    """A bearer token for ``user`` (registered with the server on first use)."""
    for token, known in api.server.tokens.items():
        if known == user:
            return token
    token = secrets.token_urlsafe(24)
    api.server.tokens[token] = user
    return token


def kubeconfig_for(api: RunningDouble, user: UserInfo) -> Path:
    """A kubeconfig file whose only context authenticates as ``user``."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in user.username)
    return write_kubeconfig(
        api.directory / f"kubeconfig-{safe}",
        url=api.url,
        ca_pem=api.tls.ca_pem,
        users={safe: token_for(api, user)},
    )


def ssl_context(api: RunningDouble) -> ssl.SSLContext:
    """A client context trusting the double's CA (for raw aiohttp requests)."""
    return ssl.create_default_context(cadata=api.tls.ca_pem.decode())
