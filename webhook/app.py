"""The admission HTTP application: decode -> engine -> encode, with metrics and an audit line.

One path per resource and action (``/mutate/pods``, ``/validate/pods``, ``/validate/workloads``,
``/validate/queues``), as Volcano splits ``pkg/webhooks/admission/<resource>/{mutate,validate}``;
``/validate/pod-allocations`` takes pod UPDATE, ``pods/status`` and a Binding through either door
(``pods/binding``, the legacy ``bindings`` resource): who may write
a GPU assignment, and (the ledger arbiter, webhook/arbiter.py) whether an allocation writer's
assignment fits the node's GPUs, reserved in its GPULedger before the write is allowed.
HTTP-level faults (not JSON, not an AdmissionReview, too large, too slow, wrong Content-Type) are
4xx with the reason; object-level denials are ``allowed: false`` inside a 200. Only a bug in our
code answers 500, and the server keeps serving after it.

Bounded by config (``webhook.*``) so one caller cannot slow everyone: the body size
(``maxRequestBytes``, 413), the body read time (``bodyTimeoutSeconds``, 408), the containers of
one object (``maxContainers``, a denial before any rule runs). Metric labels come only from the
route table, never from the caller.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from vgpu_guard.engine.admission import WORKLOAD_RESOURCES, Phase
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.decision import AdmissionDecision
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.ledger_writer import LedgerWriteMetrics, LedgerWriter
from vgpu_guard.logs import audit
from vgpu_guard.webhook.arbiter import Arbiter
from vgpu_guard.webhook.audit_fields import violation_fields
from vgpu_guard.webhook.metrics import OTHER_RESOURCE, AdmissionMetrics
from vgpu_guard.webhook.pending_pods import PendingPods
from vgpu_guard.webhook.review import ReviewError, ReviewRequest, decode_review, encode_response, to_engine
from vgpu_guard.webhook.rule_routes import decide_by_rules
from vgpu_guard.webhook.stuck_refusals import StuckNotices
from vgpu_guard.webhook.views import ViewSource

__all__ = ["CONFIG", "METRICS", "ROUTES", "VIEWS", "Route", "create_app"]

log = logging.getLogger("vgpu_guard.webhook")

# The default of webhook.maxRequestBytes (kept as a name for the fuzz suite).
MAX_BODY = 8 * 2**20


@dataclass(frozen=True, slots=True)
class Route:
    """An admission endpoint: its phase and the (group, resource) pairs it decides."""

    path: str
    phase: Phase
    resources: frozenset[tuple[str, str]]
    # The allocation route: who writes an assignment, then the ledger arbiter (webhook/arbiter.py).
    # Every other route decides by the rules, objects over webhook.maxContainers denied first
    # (rule_routes.py); the arbiter reads metadata only and caps nothing.
    arbitrates: bool = False


ROUTES: tuple[Route, ...] = (
    Route("/mutate/pods", "mutate", frozenset({("", "pods")})),
    Route("/validate/pods", "validate", frozenset({("", "pods")})),
    Route("/validate/workloads", "validate", WORKLOAD_RESOURCES),
    Route("/validate/queues", "validate", frozenset({("scheduling.volcano.sh", "queues")})),
    Route(
        "/validate/pod-allocations",
        "validate",
        frozenset({("", "pods"), ("", "bindings")}),
        arbitrates=True,
    ),
)

CONFIG = web.AppKey("config", GuardConfig)
VIEWS = web.AppKey("views", ViewSource)
METRICS = web.AppKey("metrics", AdmissionMetrics)
# The admission path's few API calls, each with a short timeout: recording a gang's placement and
# reading a missing PodGroup (webhook/recording.py), reading the stored Queues for a Queue write
# (webhook/fresh_queues.py), and the arbiter's ledger write for a write that carries a GPU
# assignment, with a pod read when its cache of unbound pods lacks a Binding's pod
# (webhook/arbiter.py, bounded by arbiter.writeTimeoutSeconds). Pods are otherwise judged on the
# cache alone.
CLIENT = web.AppKey("client", ClusterClient)
ARBITER = web.AppKey("arbiter", Arbiter)


def _bad_request(app: web.Application, status: int, reason: str, *, close: bool = False) -> web.Response:
    app[METRICS].bad_requests.inc()
    log.warning("rejected request body", extra={"fields": {"status": status, "reason": reason}})
    response = web.json_response({"error": reason}, status=status)
    if close:
        # The rest of the body may still be on its way; this connection is not reusable.
        response.force_close()
    return response


def _audit(route: Route, request: ReviewRequest, decision: AdmissionDecision, seconds: float) -> None:
    obj: Mapping[str, Any] = request.object or request.old_object or {}
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(metadata, Mapping)
    audit(
        "admission",
        uid=request.uid,
        webhook=route.path,
        kind=request.kind.kind,
        namespace=request.namespace,
        name=request.name or metadata.get("name") or metadata.get("generateName") or "",
        user=request.user_info.username,
        operation=request.operation,
        dry_run=request.dry_run,
        allowed=decision.allowed,
        code=decision.code,
        rules=list(decision.rules),
        audit_findings=list(decision.audit),
        warnings=list(decision.warnings),
        **violation_fields(decision),
        patch_ops=len(decision.patch),
        latency_ms=round(seconds * 1000, 3),
    )


async def _read_body(http: web.Request) -> bytes | web.Response:
    """The request's body, or the 4xx that says why it is not an AdmissionReview we will read: the
    wrong Content-Type (415), too large (413, webhook.maxRequestBytes), too slow (408,
    webhook.bodyTimeoutSeconds); each closes the connection, as the rest may still be on its way."""
    app = http.app
    settings = app[CONFIG].webhook
    if http.content_type != "application/json":
        sent = http.headers.get("Content-Type")
        return _bad_request(
            app,
            415,
            f"Content-Type header is {sent!r}; send the AdmissionReview as application/json"
            if sent is not None
            else "Content-Type header is missing; send the AdmissionReview as application/json",
            close=True,
        )
    try:
        async with asyncio.timeout(settings.body_timeout_seconds):
            return await http.read()
    except web.HTTPRequestEntityTooLarge:
        return _bad_request(
            app,
            413,
            f"body larger than {settings.max_request_bytes} bytes (webhook.maxRequestBytes)",
            close=True,
        )
    except TimeoutError:
        return _bad_request(
            app,
            408,
            f"body not received within {settings.body_timeout_seconds:g} s (webhook.bodyTimeoutSeconds)",
            close=True,
        )


async def _decide(
    route: Route, app: web.Application, review: ReviewRequest, owned: bool
) -> AdmissionDecision:
    """The route's decision on a decoded review: the arbiter (the allocation route) or the rules
    (rule_routes.py, the container cap first); a resource this path does not own is admitted
    untouched."""
    config = app[CONFIG]
    if not owned:
        # A webhook configuration routed something here that this path does not decide:
        # admit untouched (never block a resource we do not own) and say so in the log.
        log.warning(
            "resource not handled by this path",
            extra={
                "fields": {
                    "path": route.path,
                    "group": review.resource.group,
                    "resource": review.resource.resource,
                }
            },
        )
        return AdmissionDecision(allowed=True)
    if route.arbitrates:
        # The allocation route reads annotations only: no container cap, so a kubelet's status
        # write is never refused for the size of a pod admitted long ago.
        return await app[ARBITER].admit(to_engine(review), config)
    view = app[VIEWS].snapshot(config)
    return await decide_by_rules(to_engine(review), view, config, phase=route.phase, client=app.get(CLIENT))


def _measure(
    route: Route,
    metrics: AdmissionMetrics,
    review: ReviewRequest,
    decision: AdmissionDecision,
    *,
    owned: bool,
    elapsed: float,
) -> None:
    """Count and time the request, and write its audit line."""
    # Labels only from the route table: the operation is one of four (decode_review checks it).
    resource = review.resource.resource if owned else OTHER_RESOURCE
    metrics.requests.labels(
        route.path,
        resource,
        review.operation,
        str(decision.allowed).lower(),
        str(review.dry_run).lower(),
    ).inc()
    metrics.duration.labels(route.path, resource, review.operation).observe(elapsed)
    _audit(route, review, decision, elapsed)


def _handler(route: Route) -> Any:
    """The aiohttp handler of ``route``: read, decode, decide, encode, measure."""

    async def handle(http: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        body = await _read_body(http)
        if isinstance(body, web.Response):
            return body
        try:
            review = decode_review(body)
        except ReviewError as e:
            return _bad_request(http.app, 400, str(e))
        owned = (review.resource.group, review.resource.resource) in route.resources
        decision = await _decide(route, http.app, review, owned)
        response = encode_response(review.uid, decision)
        _measure(
            route, http.app[METRICS], review, decision, owned=owned, elapsed=time.perf_counter() - started
        )
        return web.json_response(response)

    return handle


@web.middleware
async def _contain_bugs(request: web.Request, handler: Any) -> web.StreamResponse:
    """A bug answers 500 with a short reason and is logged with its traceback; serving goes on."""
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except web.HTTPException:
        raise
    except Exception:
        log.exception(
            "internal error while answering an admission review", extra={"fields": {"path": request.path}}
        )
        return web.json_response({"error": "internal error in vgpu-guard; see its log"}, status=500)


def create_app(
    *,
    config: GuardConfig,
    views: ViewSource,
    registry: CollectorRegistry | None = None,
    client: ClusterClient | None = None,
    middlewares: Iterable[Any] = (),
    clock: Callable[[], float] = time.time,
    pods: PendingPods | None = None,
) -> web.Application:
    """The admission application (TLS and the listening socket belong to ``webhook.server``, and so
    does running ``pods``, the arbiter's cache of unbound pods)."""
    app = web.Application(
        client_max_size=config.webhook.max_request_bytes, middlewares=[*middlewares, _contain_bugs]
    )
    app[CONFIG] = config
    app[VIEWS] = views
    if client is not None:
        app[CLIENT] = client
    registry = registry if registry is not None else CollectorRegistry()
    app[METRICS] = AdmissionMetrics.create(registry)
    writer = (
        LedgerWriter(
            client,
            memory_factor=config.nvidia.gpu_memory_factor,
            writer="arbiter",
            metrics=LedgerWriteMetrics.for_registry(registry),
        )
        if client is not None
        else None
    )
    notices = (
        StuckNotices(client, LedgerWriteMetrics.for_registry(registry).stuck, clock=clock)
        if client is not None
        else None
    )
    app[ARBITER] = Arbiter(
        views=views.snapshot, client=client, writer=writer, clock=clock, pods=pods, notices=notices
    )
    for route in ROUTES:
        app.router.add_post(route.path, _handler(route))
    return app
