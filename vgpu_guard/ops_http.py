"""The plain-HTTP operations endpoint every process exposes: /metrics, /healthz, /readyz.

Kept off the TLS admission port so probes and Prometheus never need the webhook's CA, and so a
wedged admission handler cannot hide a healthy metrics endpoint (or the reverse).
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["create_ops_app"]


def create_ops_app(*, registry: CollectorRegistry, ready: Callable[[], tuple[bool, str]]) -> web.Application:
    """``ready`` returns (ready?, reason): /readyz answers 503 with the reason until it is True."""

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        ok, reason = ready()
        return web.Response(text=f"{reason}\n", status=200 if ok else 503)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app
