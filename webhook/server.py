"""Running the admission server: TLS listener, operations listener, bounded graceful shutdown.

Follows aiohttp's runner pattern (AppRunner + TCPSite) rather than ``web.run_app`` so the same code
serves ``vgpu-guard serve``, the e2e suite and tests, all inside one event loop with the caches
and the certificate reloader.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CollectorRegistry

from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.ops_http import create_ops_app
from vgpu_guard.webhook.app import create_app
from vgpu_guard.webhook.views import ViewSource

__all__ = ["RunningWebhook", "running_webhook"]


@dataclass(frozen=True)
class RunningWebhook:
    """Where a started webhook listens (ports resolved when 0 was asked for)."""

    host: str
    port: int
    ops_port: int
    registry: CollectorRegistry

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"


def _bound_port(site: web.TCPSite) -> int:
    # aiohttp keeps the asyncio Server on the site; its public API has no getter for a port chosen by the OS.
    server = site._server
    sockets = getattr(server, "sockets", None)
    if not sockets:
        raise RuntimeError("the listener has no socket; did the site start?")
    port: int = sockets[0].getsockname()[1]
    return port


@asynccontextmanager
async def running_webhook(
    *,
    config: GuardConfig,
    views: ViewSource,
    ssl_context: ssl.SSLContext,
    registry: CollectorRegistry | None = None,
    client: ClusterClient | None = None,
    host: str | None = None,
    port: int | None = None,
    ops_port: int | None = None,
    ready: Callable[[], tuple[bool, str]] | None = None,
) -> AsyncIterator[RunningWebhook]:
    """Serve admission over TLS (and /metrics, /healthz, /readyz in plain HTTP) until the block exits.

    Readiness: the view must be synced (caches listed once) and ``ready`` (the process's own
    checks, such as "a certificate is loaded") must hold.
    """
    registry = registry if registry is not None else CollectorRegistry()
    settings = config.webhook
    host = host if host is not None else settings.host
    app = create_app(config=config, views=views, registry=registry, client=client)

    def is_ready() -> tuple[bool, str]:
        if ready is not None:
            ok, reason = ready()
            if not ok:
                return False, reason
        if not views.snapshot(config).synced:
            return False, "not ready: cluster caches not synced yet"
        return True, "ready"

    runner = web.AppRunner(app, shutdown_timeout=settings.shutdown_timeout_seconds, access_log=None)
    ops_runner = web.AppRunner(create_ops_app(registry=registry, ready=is_ready), access_log=None)
    await runner.setup()
    await ops_runner.setup()
    try:
        site = web.TCPSite(runner, host, settings.port if port is None else port, ssl_context=ssl_context)
        await site.start()
        ops_site = web.TCPSite(ops_runner, host, settings.metrics_port if ops_port is None else ops_port)
        await ops_site.start()
        yield RunningWebhook(
            host=host, port=_bound_port(site), ops_port=_bound_port(ops_site), registry=registry
        )
    finally:
        await runner.cleanup()
        await ops_runner.cleanup()
