"""A local HTTPS AdmissionReview server for the admission probes, and helpers to register webhooks.

One server (aiohttp, a throw-away CA from trustme, a certificate for IP 127.0.0.1) serves both
sides; both API servers reach it at ``https://127.0.0.1:PORT/<tag>/<behaviour>[/<arg>...]``. The
tag is the probe's name plus the side, so what each API server *sent* is recorded separately:
``server.seen(tag)`` is the list of AdmissionReview ``request`` objects in arrival order
(``server.calls(tag)`` pairs each with the path it came to).

Behaviours (the first path segment after the tag):

    allow                     allowed, nothing else
    deny/CODE                 denied, ``status: {code: CODE, reason: "GPUQuota", message: DENY_MESSAGE}``
    deny-bare                 denied without any status
    warn                      allowed with ``WARNINGS`` (several, quotes in them)
    warn-odd                  allowed with ``ODD_WARNINGS`` (empty, control characters, a repeat)
    warn-many                 allowed with ``MANY_WARNINGS`` (more than 4096 characters in all)
    label/KEY/VALUE           allowed with a JSONPatch that adds label KEY=VALUE ("/" in KEY as "~1")
    annotate/KEY/VALUE        allowed with a JSONPatch that adds annotation KEY=VALUE
    patch-no-type             a patch (adds label typed=no) without ``patchType``
    patch-broken              a JSONPatch that removes a path that does not exist
    slow/SECONDS              allowed, after sleeping SECONDS
    wrong-uid                 allowed, but ``response.uid`` is not the request's
    wrong-kind                allowed, in the other AdmissionReview version than the request's
    error                     HTTP 500 with a plain-text body
    garbage                   HTTP 200 with a body that is not JSON
    marker                    denied with ``MARKER_MESSAGE`` (not recorded; see ``installed``)

Answers come in the AdmissionReview version of the request (``admissionReviewVersions``).

Webhook configurations are cluster-scoped and the real API server applies a new one a little
later (its informer), so ``installed`` adds a *marker* webhook to every configuration (it denies
dry-run ConfigMaps labelled ``MARKER_LABEL=<configuration name>`` in the probe's namespace), waits
until each configuration's marker answers, and deletes the configurations on the way out.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import ssl
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import trustme
from aiohttp import web

from tests.contract.conftest import Side
from tests.contract.raw import Reply

Obj = dict[str, Any]

PROBE_NS_LABEL = "probe"  # side.namespace(probe=...) puts it on the namespace
MARKER_LABEL = "contract.vgpu-guard.io/webhook-marker"
MARKER_MESSAGE = "webhook configuration is active"
DENY_MESSAGE = 'no "nvidia.com/gpu" left in this namespace'
WARNINGS = ["first warning", 'rounded "1500m" up to "2"', "it's \\fine\\ too"]
ODD_WARNINGS = ["", "two\nlines", "tab\there", "same", "same", "naïve ünïcode ✓"]
MANY_WARNINGS = [f"{i:02d}" + "é" * 298 for i in range(20)]  # 300 runes each, 6000 in total
URL_PATTERN = re.compile(r"https://127\.0\.0\.1:\d+/[^\s\"]*")


@dataclass
class HookServer:
    """The running server: its base URL, the caBundle to trust it, and what it was sent."""

    base: str
    ca_bundle: str
    reviews: dict[str, list[tuple[str, Obj]]] = field(default_factory=lambda: defaultdict(list))
    # The query string of each call (the API server adds ?timeout=), per tag.
    query_strings: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    # Failures of the server itself (a bug in a behaviour, not one on purpose), per tag.
    errors: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def url(self, tag: str, behaviour: str, *args: str | float) -> str:
        return "/".join([self.base, tag, behaviour, *(str(a) for a in args)])

    def seen(self, tag: str) -> list[Obj]:
        """The AdmissionReview requests received under ``tag`` (in arrival order)."""
        return [review.get("request") or {} for _, review in self.reviews.get(tag, [])]

    def calls(self, tag: str) -> list[tuple[str, Obj]]:
        """(behaviour path, request) of each call under ``tag``, in arrival order."""
        return [(path, review.get("request") or {}) for path, review in self.reviews.get(tag, [])]

    def queries(self, tag: str) -> list[str]:
        """The query string of each call under ``tag``, in arrival order."""
        return list(self.query_strings.get(tag, []))

    def review_versions(self, tag: str) -> list[str]:
        """The ``apiVersion`` of each AdmissionReview received under ``tag``."""
        return [str(review.get("apiVersion")) for _, review in self.reviews.get(tag, [])]


def scrub(text: Any) -> Any:
    """``text`` with webhook URLs (ports, tags) replaced by ``<webhook-url>``."""
    return URL_PATTERN.sub("<webhook-url>", text) if isinstance(text, str) else text


def _patch(ops: list[Obj]) -> Obj:
    return {"patchType": "JSONPatch", "patch": base64.b64encode(json.dumps(ops).encode()).decode()}


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _add_to_map(obj: Obj, field_name: str, key: str, value: str) -> Obj:
    meta = (obj or {}).get("metadata") or {}
    if meta.get(field_name):
        return _patch([{"op": "add", "path": f"/metadata/{field_name}/{_escape(key)}", "value": value}])
    return _patch([{"op": "add", "path": f"/metadata/{field_name}", "value": {key: value}}])


def _respond(behaviour: str, args: list[str], req: Obj, response: Obj) -> web.StreamResponse | None:
    """Fill ``response`` for ``behaviour``; a whole HTTP answer for the ones that are not a review."""
    obj = req.get("object") or {}
    if behaviour == "deny":
        status = {"code": int(args[0]), "reason": "GPUQuota", "message": DENY_MESSAGE}
        response.update(allowed=False, status=status)
    elif behaviour == "deny-bare":
        response["allowed"] = False
    elif behaviour == "marker":
        response.update(allowed=False, status={"code": 403, "message": MARKER_MESSAGE})
    elif behaviour == "warn":
        response["warnings"] = WARNINGS
    elif behaviour == "warn-odd":
        response["warnings"] = ODD_WARNINGS
    elif behaviour == "warn-many":
        response["warnings"] = MANY_WARNINGS
    elif behaviour == "label":
        response.update(_add_to_map(obj, "labels", args[0], args[1]))
    elif behaviour == "annotate":
        response.update(_add_to_map(obj, "annotations", args[0], args[1]))
    elif behaviour == "patch-no-type":
        response.update(_add_to_map(obj, "labels", "typed", "no"))
        del response["patchType"]
    elif behaviour == "patch-broken":
        response.update(_patch([{"op": "remove", "path": "/spec/doesNotExist"}]))
    elif behaviour == "wrong-uid":
        response["uid"] = "00000000-0000-0000-0000-000000000000"
    elif behaviour == "error":
        return web.Response(status=500, text="the webhook broke")
    elif behaviour == "garbage":
        return web.Response(status=200, text="this is not an AdmissionReview", content_type="text/plain")
    elif behaviour not in ("allow", "slow", "wrong-kind"):
        raise ValueError(f"no behaviour {behaviour!r}")
    return None


async def _answer(server: HookServer, request: web.Request) -> web.StreamResponse:
    parts = request.match_info["tail"].split("/")
    tag, behaviour = parts[0], parts[1] if len(parts) > 1 else ""
    args = [a.replace("~1", "/") for a in parts[2:]]  # "/" in a label key travels as "~1"
    review = await request.json()
    req: Obj = review.get("request") or {}
    if behaviour != "marker":
        server.reviews[tag].append(("/".join(parts[1:]), review))
        server.query_strings[tag].append(request.query_string)
    if behaviour == "slow":
        await asyncio.sleep(float(args[0]))
    response: Obj = {"uid": req.get("uid"), "allowed": True}
    answer = _respond(behaviour, args, req, response)
    if answer is not None:
        return answer
    api_version = review.get("apiVersion") or "admission.k8s.io/v1"
    if behaviour == "wrong-kind":
        api_version = "admission.k8s.io/v1beta1" if api_version.endswith("/v1") else "admission.k8s.io/v1"
    return web.json_response({"apiVersion": api_version, "kind": "AdmissionReview", "response": response})


@asynccontextmanager
async def serve_hooks() -> AsyncIterator[HookServer]:
    """Run the server on a free loopback port until the context ends."""
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    leaf.configure_cert(context)
    server: HookServer | None = None

    async def handle(request: web.Request) -> web.StreamResponse:
        assert server is not None
        try:
            return await _answer(server, request)
        except Exception as e:  # noted, so that a probe cannot pass on two identical 500s
            server.errors[request.match_info["tail"].split("/")[0]].append(f"{type(e).__name__}: {e}")
            raise

    app = web.Application()
    app.router.add_post("/{tail:.*}", handle)
    runner = web.AppRunner(app, shutdown_timeout=0.5, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = runner.addresses[0][1]
    server = HookServer(f"https://127.0.0.1:{port}", base64.b64encode(ca.cert_pem.bytes()).decode())
    try:
        yield server
    finally:
        await runner.cleanup()


# -- webhook configurations -------------------------------------------------------------------------
POD_CREATE = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]


def webhook(name: str, url: str, ca_bundle: str, probe: str, **extra: Any) -> Obj:
    """One webhook scoped to the namespaces labelled ``probe=<probe>`` (pods CREATE unless told)."""
    spec: Obj = {
        "name": name,
        "clientConfig": {"url": url, "caBundle": ca_bundle},
        "rules": POD_CREATE,
        "namespaceSelector": {"matchLabels": {PROBE_NS_LABEL: probe}},
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 5,
    }
    spec.update(extra)
    return spec


def configuration(kind: str, name: str, *hooks: Obj) -> Obj:
    """A (Mutating|Validating)WebhookConfiguration named ``name``."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": f"{kind}WebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": list(hooks),
    }


def collection(config: Obj) -> str:
    plural = (
        "mutatingwebhookconfigurations"
        if config["kind"].startswith("Mutating")
        else "validatingwebhookconfigurations"
    )
    return f"/apis/admissionregistration.k8s.io/v1/{plural}"


def _marker(server: HookServer, tag: str, probe: str, config_name: str) -> Obj:
    return webhook(
        "marker.contract.vgpu-guard.io",
        server.url(tag, "marker"),
        server.ca_bundle,
        probe,
        rules=[
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}
        ],
        objectSelector={"matchLabels": {MARKER_LABEL: config_name}},
        failurePolicy="Fail",
    )


async def wait_active(side: Side, namespace: str, config_name: str, *, seconds: float = 20.0) -> None:
    """Until the marker webhook of configuration ``config_name`` answers in ``namespace``."""
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "marker", "labels": {MARKER_LABEL: config_name}},
    }
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        reply = await side.admin.post(f"/api/v1/namespaces/{namespace}/configmaps", body, dryRun="All")
        if reply.status == 403 and MARKER_MESSAGE in str(reply.body):
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{side.name}: {config_name} never became active: {reply.body}")
        await asyncio.sleep(0.05)


@asynccontextmanager
async def installed(
    side: Side, server: HookServer, tag: str, probe: str, namespace: str, *configs: Obj
) -> AsyncIterator[list[Reply]]:
    """Create ``configs`` (each with a marker webhook), wait until they are active, delete them after.

    Yields the create replies; a configuration the server refused is not waited for."""
    replies: list[Reply] = []
    created: list[tuple[str, str]] = []
    try:
        for config in configs:
            body = json.loads(json.dumps(config))
            name = body["metadata"]["name"]
            body["webhooks"] = [*body.get("webhooks", []), _marker(server, tag, probe, name)]
            reply = await side.admin.post(collection(body), body)
            replies.append(reply)
            if reply.status == 201:
                created.append((collection(body), name))
        for _, name in created:
            await wait_active(side, namespace, name)
        yield replies
    finally:
        for path, name in created:
            await side.admin.delete(f"{path}/{name}")
    assert not server.errors.get(tag), f"the webhook server itself failed: {server.errors[tag]}"
