"""The admission HTTP application: decode -> engine -> encode, with metrics and an audit line.

One path per resource and action (``/mutate/pods``, ``/validate/pods``, ``/validate/workloads``,
``/validate/queues``), as Volcano splits ``pkg/webhooks/admission/<resource>/{mutate,validate}``.
HTTP-level faults (not JSON, not an AdmissionReview, too large) are 4xx with the reason; object-
level denials are ``allowed: false`` inside a 200. Only a bug in our code answers 500, and the
server keeps serving after it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from vgpu_guard.engine.admission import WORKLOAD_RESOURCES, AdmissionDecision, Phase
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.logs import audit
from vgpu_guard.webhook.metrics import AdmissionMetrics
from vgpu_guard.webhook.recording import decide_and_record
from vgpu_guard.webhook.review import ReviewError, ReviewRequest, decode_review, encode_response, to_engine
from vgpu_guard.webhook.views import ViewSource

__all__ = ["CONFIG", "METRICS", "ROUTES", "VIEWS", "Route", "create_app"]

log = logging.getLogger("vgpu_guard.webhook")

# The API server sends objects up to ~3 MiB (etcd's 1.5 MiB plus encoding); beyond 8 MiB is not a review.
MAX_BODY = 8 * 2**20


@dataclass(frozen=True, slots=True)
class Route:
    """An admission endpoint: its phase and the (group, resource) pairs it decides."""

    path: str
    phase: Phase
    resources: frozenset[tuple[str, str]]


ROUTES: tuple[Route, ...] = (
    Route("/mutate/pods", "mutate", frozenset({("", "pods")})),
    Route("/validate/pods", "validate", frozenset({("", "pods")})),
    Route("/validate/workloads", "validate", WORKLOAD_RESOURCES),
    Route("/validate/queues", "validate", frozenset({("scheduling.volcano.sh", "queues")})),
)

CONFIG = web.AppKey("config", GuardConfig)
VIEWS = web.AppKey("views", ViewSource)
METRICS = web.AppKey("metrics", AdmissionMetrics)
# Only for recording a gang's placement (webhook/recording.py); decisions never read through it.
CLIENT = web.AppKey("client", ClusterClient)


def _bad_request(app: web.Application, status: int, reason: str) -> web.Response:
    app[METRICS].bad_requests.inc()
    log.warning("rejected request body", extra={"fields": {"status": status, "reason": reason}})
    return web.json_response({"error": reason}, status=status)


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
        patch_ops=len(decision.patch),
        latency_ms=round(seconds * 1000, 3),
    )


def _handler(route: Route) -> Any:
    async def handle(http: web.Request) -> web.StreamResponse:
        app = http.app
        started = time.perf_counter()
        try:
            body = await http.read()
        except web.HTTPRequestEntityTooLarge:
            return _bad_request(app, 413, f"body larger than {MAX_BODY} bytes")
        try:
            review = decode_review(body)
        except ReviewError as e:
            return _bad_request(app, 400, str(e))
        config = app[CONFIG]
        if (review.resource.group, review.resource.resource) not in route.resources:
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
            decision = AdmissionDecision(allowed=True)
        else:
            decision = await decide_and_record(
                to_engine(review),
                app[VIEWS].snapshot(config),
                config,
                phase=route.phase,
                client=app.get(CLIENT),
            )
        response = encode_response(review.uid, decision)
        elapsed = time.perf_counter() - started
        metrics = app[METRICS]
        metrics.requests.labels(
            review.resource.resource,
            review.operation,
            str(decision.allowed).lower(),
            str(review.dry_run).lower(),
        ).inc()
        metrics.duration.labels(review.resource.resource, review.operation).observe(elapsed)
        _audit(route, review, decision, elapsed)
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
) -> web.Application:
    """The admission application (TLS and the listening socket belong to ``webhook.server``)."""
    app = web.Application(client_max_size=MAX_BODY, middlewares=[_contain_bugs])
    app[CONFIG] = config
    app[VIEWS] = views
    if client is not None:
        app[CLIENT] = client
    app[METRICS] = AdmissionMetrics.create(registry if registry is not None else CollectorRegistry())
    for route in ROUTES:
        app.router.add_post(route.path, _handler(route))
    return app
