"""The plain-HTTP operations endpoint every process exposes: /metrics, /healthz, /readyz.

Kept off the TLS admission port so probes and Prometheus never need the webhook's CA, and so a
wedged admission handler cannot hide a healthy metrics endpoint (or the reverse). ``OpsServer``
serves it from its own thread and event loop: rendering a large /metrics (or a scraper that reads
slowly) then never delays an admission review queued on the main loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["OpsServer", "create_ops_app"]


def create_ops_app(*, registry: CollectorRegistry, ready: Callable[[], tuple[bool, str]]) -> web.Application:
    """``ready`` returns (ready?, reason): /readyz answers 503 with the reason until it is True."""

    async def metrics(_: web.Request) -> web.Response:
        # Rendered on a worker thread: a large or slow render must not hold the probes behind it.
        body = await asyncio.to_thread(generate_latest, registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

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


class OpsServer:
    """``create_ops_app`` served by a thread of its own (daemon, one event loop).

    ``ready`` is called on that thread: it must be thread-safe (hop to the owner's loop if it reads
    the owner's state). ``start`` returns the bound port (0 asks the OS for one).
    """

    def __init__(self, *, registry: CollectorRegistry, ready: Callable[[], tuple[bool, str]]) -> None:
        self._registry = registry
        self._ready = ready
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    async def _serve(self, host: str, port: int) -> int:
        self._runner = web.AppRunner(
            create_ops_app(registry=self._registry, ready=self._ready), access_log=None
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = site._server  # aiohttp has no public getter for a port chosen by the OS
        sockets = getattr(server, "sockets", None)
        if not sockets:
            raise RuntimeError("the operations listener has no socket")
        bound: int = sockets[0].getsockname()[1]
        return bound

    async def start(self, host: str, port: int) -> int:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="vgpu-guard-ops", daemon=True)
        self._thread.start()
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._serve(host, port), loop))

    async def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if self._runner is not None:
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._runner.cleanup(), loop))
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join, 10)
        loop.close()
        self._loop = self._thread = self._runner = None
