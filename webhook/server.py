"""Running the admission server: TLS listener, operations listener, bounded graceful shutdown.

Follows aiohttp's runner pattern (AppRunner + a site) rather than ``web.run_app`` so the same code
serves ``vgpu-guard serve``, the e2e suite and tests, all inside one event loop with the caches
and the certificate reloader.

Callers cannot hold the admission loop (issue 22):

* ``/metrics``, ``/healthz`` and ``/readyz`` are served by their own thread and event loop
  (``ops_http.OpsServer``): a slow scrape never queues a review behind it. ``/readyz`` asks the
  admission loop, with a deadline, so a wedged loop reads as not ready.
* The admission listener is a ``_GuardedSite``: at most ``webhook.maxConnections`` open connections
  (one more is closed at once and counted), the TLS handshake and each request's headers bounded by
  ``webhook.headerTimeoutSeconds``, idle connections closed after ``keepAliveTimeoutSeconds``
  (aiohttp's keep-alive timer, which also runs from the connection's start).
"""

from __future__ import annotations

import asyncio
import gc
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from vgpu_guard.engine.config import GuardConfig, WebhookSettings
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.informer import Informer
from vgpu_guard.ops_http import OpsServer
from vgpu_guard.webhook.app import ARBITER, METRICS, create_app
from vgpu_guard.webhook.metrics import AdmissionMetrics
from vgpu_guard.webhook.pending_pods import PendingPods
from vgpu_guard.webhook.views import ViewSource

__all__ = ["RunningWebhook", "running_webhook"]

# Seconds /readyz waits for the admission loop to run its checks.
_READY_DEADLINE = 2.0


@dataclass(frozen=True)
class RunningWebhook:
    """Where a started webhook listens (ports resolved when 0 was asked for)."""

    host: str
    port: int
    ops_port: int
    registry: CollectorRegistry
    # The arbiter's cache of unbound pods (None without an API client).
    pods: PendingPods | None = None

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"


class _GuardedConnection(asyncio.Protocol):
    """Wraps aiohttp's protocol for one connection: the connection cap and the header deadline."""

    def __init__(self, guard: _ConnectionGuard, inner: Any) -> None:
        self._guard = guard
        self._inner = inner
        self._transport: asyncio.Transport | None = None
        self._admitted = False
        self._deadline: asyncio.TimerHandle | None = None
        # True from "headers parsed, handler running" until the handler returns.
        self.handling = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        if self._guard.open >= self._guard.settings.max_connections:
            self._guard.metrics.connections_refused.inc()
            transport.abort()
            return
        self._admitted = True
        self._guard.open += 1
        self._guard.metrics.connections_open.set(self._guard.open)
        self._guard.by_handler[id(self._inner)] = self
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self._admitted:
            return
        if not self.handling and self._deadline is None:
            # The first bytes of a request: its headers must be complete before the deadline.
            self._deadline = asyncio.get_running_loop().call_later(
                self._guard.settings.header_timeout_seconds, self._headers_too_slow
            )
        self._inner.data_received(data)

    def _headers_too_slow(self) -> None:
        self._deadline = None
        if not self.handling and self._transport is not None:
            self._transport.abort()

    def request_started(self) -> None:
        self.handling = True
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def request_finished(self) -> None:
        self.handling = False

    def eof_received(self) -> bool | None:
        if not self._admitted:
            return None
        result: bool | None = self._inner.eof_received()
        return result

    def pause_writing(self) -> None:
        if self._admitted:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._admitted:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        if not self._admitted:
            return
        self._admitted = False
        self._guard.open -= 1
        self._guard.metrics.connections_open.set(self._guard.open)
        self._guard.by_handler.pop(id(self._inner), None)
        self._inner.connection_lost(exc)


class _ConnectionGuard:
    """Shared state of one listener's guarded connections."""

    # Bound after the app exists (the app creates the metrics; the guard's middleware goes in the app).
    metrics: AdmissionMetrics

    def __init__(self, settings: WebhookSettings) -> None:
        self.settings = settings
        self.open = 0
        # aiohttp's per-connection handler (request.protocol) -> our wrapper, for the middleware.
        self.by_handler: dict[int, _GuardedConnection] = {}

    def middleware(self) -> Any:
        @web.middleware
        async def mark(request: web.Request, handler: Any) -> web.StreamResponse:
            connection = self.by_handler.get(id(request.protocol))
            if connection is not None:
                connection.request_started()
            try:
                response: web.StreamResponse = await handler(request)
                return response
            finally:
                if connection is not None:
                    connection.request_finished()

        return mark


class _GuardedSite(web.BaseSite):
    """A TCP+TLS site whose connections go through ``_GuardedConnection``."""

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext,
        guard: _ConnectionGuard,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._host = host
        self._port = port
        self._guard = guard

    @property
    def name(self) -> str:
        return f"https://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        guard = self._guard
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _GuardedConnection(guard, server()),
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=True,
            # A client that never finishes the handshake holds a socket but no HTTP state.
            ssl_handshake_timeout=guard.settings.header_timeout_seconds,
        )


def _bound_port(site: web.BaseSite) -> int:
    # aiohttp keeps the asyncio Server on the site; its public API has no getter for a port chosen by the OS.
    server = site._server
    sockets = getattr(server, "sockets", None)
    if not sockets:
        raise RuntimeError("the listener has no socket; did the site start?")
    port: int = sockets[0].getsockname()[1]
    return port


def _readiness(
    config: GuardConfig,
    views: ViewSource,
    ready: Callable[[], tuple[bool, str]] | None,
    loop: asyncio.AbstractEventLoop,
) -> Callable[[], tuple[bool, str]]:
    """/readyz's check, called on the operations thread: the process's own checks (``ready``) and
    a synced view. They read state of the admission loop, so they run there; a loop too busy to
    answer within the deadline is not ready."""

    async def check_ready() -> tuple[bool, str]:
        if ready is not None:
            ok, reason = ready()
            if not ok:
                return False, reason
        if not views.snapshot(config).synced:
            return False, "not ready: cluster caches not synced yet"
        return True, "ready"

    def is_ready() -> tuple[bool, str]:
        future = asyncio.run_coroutine_threadsafe(check_ready(), loop)
        try:
            return future.result(timeout=_READY_DEADLINE)
        except TimeoutError:
            future.cancel()
            return False, f"not ready: the admission loop did not answer within {_READY_DEADLINE:g} s"

    return is_ready


async def _freeze_when_synced(views: ViewSource, config: GuardConfig, *, poll_seconds: float = 0.5) -> None:
    """Once the caches have listed, move everything alive out of the collector's sight.

    The listed fleet (5,000 Nodes parsed, 5,000 GPULedgers decoded: ~500,000 tracked objects)
    lives as long as the process; CPython's full collections scanned all of it again and again,
    pausing every review in flight (~200 ms, measured in bench/webhook_fleet_bench.py). One
    collection first, so no garbage is frozen; later cycles are still collected. Once per
    process: a test process that starts many webhooks pays it once.
    """
    global _frozen  # noqa: PLW0603 - a process-wide fact, like the collector it describes
    while not views.snapshot(config).synced:  # noqa: ASYNC110 - a ViewSource has no sync event
        await asyncio.sleep(poll_seconds)
    if not _frozen:
        _frozen = True
        gc.collect()
        gc.freeze()


_frozen = False


def _runner(app: web.Application, settings: WebhookSettings) -> web.AppRunner:
    """The admission app's runner with the webhook.* timeouts (shutdown, keep-alive, lingering)."""
    return web.AppRunner(
        app,
        shutdown_timeout=settings.shutdown_timeout_seconds,
        access_log=None,
        keepalive_timeout=settings.keep_alive_timeout_seconds,
        # Unread body after an early answer (408, 413, 415) is drained at most this long, then the
        # connection is closed.
        lingering_time=settings.body_timeout_seconds,
    )


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
    pods: PendingPods | None = None,
    ledgers: Informer | None = None,
) -> AsyncIterator[RunningWebhook]:
    """Serve admission over TLS (and /metrics, /healthz, /readyz in plain HTTP) until the block exits.

    Readiness: the view must be synced (caches listed once) and ``ready`` (the process's own
    checks, such as "a certificate is loaded") must hold. With a ``client``, the arbiter's cache of
    unbound pods runs while the server does; readiness does not wait for it (until it has listed,
    a Binding's pod is read with a GET). ``pods``: unbound pods read from a pod informer the
    process runs anyway (``serve all``: the controller's), instead of the webhook's own watch.
    ``ledgers``: the informer behind ``views``' ledgers, whose DELETEs the arbiter's writer must
    see (``LedgerWriter.observe``: its own write of a deleted ledger is not the ledger any more).
    """
    registry = registry if registry is not None else CollectorRegistry()
    settings = config.webhook
    host = host if host is not None else settings.host
    guard = _ConnectionGuard(settings)
    # The webhook's own watch of unbound pods, unless the process already watches pods for it.
    own = PendingPods.watching(client, config.nvidia) if pods is None and client is not None else None
    pods = pods if pods is not None else own
    app = create_app(
        config=config,
        views=views,
        registry=registry,
        client=client,
        middlewares=[guard.middleware()],
        pods=pods,
    )
    guard.metrics = app[METRICS]
    writer = app[ARBITER].writer
    if ledgers is not None and writer is not None:
        ledgers.add_handler(writer.observe)
    is_ready = _readiness(config, views, ready, asyncio.get_running_loop())
    runner = _runner(app, settings)
    await runner.setup()
    ops = OpsServer(registry=registry, ready=is_ready)
    watching = asyncio.create_task(own.run(), name="informer-pending-pods") if own is not None else None
    freezing = asyncio.create_task(_freeze_when_synced(views, config), name="gc-freeze")
    try:
        site = _GuardedSite(
            runner, host, settings.port if port is None else port, ssl_context=ssl_context, guard=guard
        )
        await site.start()
        ops_bound = await ops.start(host, settings.metrics_port if ops_port is None else ops_port)
        yield RunningWebhook(
            host=host, port=_bound_port(site), ops_port=ops_bound, registry=registry, pods=pods
        )
    finally:
        freezing.cancel()
        await asyncio.gather(freezing, return_exceptions=True)
        if watching is not None:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
        await ops.stop()
        await runner.cleanup()
        if ledgers is not None and writer is not None:
            ledgers.remove_handler(writer.observe)
