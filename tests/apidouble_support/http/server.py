"""The API double served like a cluster: HTTPS on loopback, kube-apiserver's REST layout.

What a client sees follows the Kubernetes "API Concepts" document: discovery (``/version``,
``/api``, ``/apis``, per group-version resource lists) enough for the official client's typed and
dynamic APIs and our ``AioClusterClient``; ``Status`` bodies on every error; ``?watch=true``
streams newline-delimited JSON events with ``allowWatchBookmarks`` and ``timeoutSeconds``;
``dryRun=All``; JSON merge patch and JSON patch.

It serves JSON only. kubectl's and Helm's fidelity (protobuf, Tables, YAML, OpenAPI, strategic
merge patch, server-side apply, impersonation) is proven on the real control plane every CI run
starts, so the double refuses those in kube-apiserver's Status form rather than imitate them: an
Accept with no JSON clause -> 406 (``_negotiate``), a strategic-merge, apply or protobuf body ->
415 naming what it takes, ``/openapi/v2`` and ``/openapi/v3`` -> 404 (as a server without them),
``Impersonate-*`` -> 403, a resource it lacks -> 404, a verb a resource does not serve -> 405
(see docs/apidouble.md). It is never more permissive than the real server.

Requests authenticate with a bearer token mapped to a ``UserInfo`` (one per identity); the
``Frontend`` authorizes (when an ``Authorizer`` is plugged in: tests plug RBAC) and runs the
admission chain.

    async with serve_double(tmp_path) as api:   # api.url, api.kubeconfig, api.store
        ...
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import re
import secrets
import ssl
import tempfile
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from aiohttp import web

from tests.apidouble_support.admission import AdmissionChain, warnings_of
from tests.apidouble_support.http._negotiate import admits_json, not_acceptable
from tests.apidouble_support.http._tls import ServingTLS, make_serving_tls
from vgpu_guard.apidouble import _status as st
from vgpu_guard.apidouble._gotext import GoJSONError, go_json_loads, go_quote, go_string_slice
from vgpu_guard.apidouble._listing import validate_watch_options
from vgpu_guard.apidouble._types import BUILTIN_TYPES, TypeInfo
from vgpu_guard.apidouble.frontend import Authorizer, Frontend, Written
from vgpu_guard.apidouble.identity import ADMIN, ANONYMOUS, UserInfo
from vgpu_guard.apidouble.store import Store, Watch
from vgpu_guard.engine.objects import Obj
from vgpu_guard.kube.errors import KubeError
from vgpu_guard.kube.resources import BINDINGS

__all__ = ["DoubleServer", "RunningDouble", "build_app", "serve_double", "write_kubeconfig"]

log = logging.getLogger(__name__)
SERVER_KEY: web.AppKey[DoubleServer] = web.AppKey("double_server")
KUBE_VERSION = {
    "major": "1",
    "minor": "33",
    "gitVersion": "v1.33.0+vgpu-guard-double",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.24",
    "compiler": "gc",
    "platform": "linux/amd64",
}
_JSON = "application/json"
_PATCH_TYPES: dict[str, Literal["merge", "json"]] = {
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
}
# Patch types kube-apiserver takes that the double refuses: patch.go's 415 for a type outside the
# handler's list, with the double's list (json-patch and merge-patch, in patch.go's order).
_REFUSED_PATCH_TYPES = ("application/strategic-merge-patch+json", "application/apply-patch+yaml")
_ACCEPTED_PATCH_TYPES = "application/json-patch+json, application/merge-patch+json"
_UNKNOWN_FORMAT = "the body of the request was in an unknown format - accepted media types include"
# Request bodies the double decodes; a protobuf one gets NegotiateInputSerializer's 415 with this list.
_PROTOBUF = "application/vnd.kubernetes.protobuf"
_ACCEPTED_BODIES = "application/json, application/yaml"
_MAX_BODY = 3 * 1024 * 1024  # kube-apiserver's request body limit (3 MiB)
# What the bootstrap policy lets anyone read (system:public-info-viewer); other discovery is 403
# to system:anonymous.
PUBLIC_PATHS = ("/healthz", "/livez", "/readyz", "/version", "/version/")


@dataclass(slots=True)
class DoubleServer:
    """Server-side state: the frontend and who each bearer token is."""

    frontend: Frontend
    tokens: dict[str, UserInfo]
    bookmark_interval: float = 60.0  # cacher.go defaultBookmarkFrequency (and 2 s before the end)
    max_watch_seconds: float = 1800.0
    watches: set[asyncio.Task[Any]] = field(default_factory=set)
    # Connections seen, so shutdown can abort the ones a client left open (TLS keep-alive).
    transports: weakref.WeakSet[asyncio.BaseTransport] = field(default_factory=weakref.WeakSet)

    @property
    def store(self) -> Store:
        return self.frontend.store


# -- responses ----------------------------------------------------------------------------------
def _json_response(
    body: Any, *, status: int = 200, warnings: list[str] | tuple[str, ...] = ()
) -> web.Response:
    resp = web.Response(text=json.dumps(body, separators=(",", ":")), status=status, content_type=_JSON)
    for text in warnings:
        resp.headers.add("Warning", _warning_header(text))
    return resp


def _warning_header(text: str) -> str:
    """``299 - "text"`` (k8s.io/apiserver/pkg/endpoints/filters/warning.go), quotes escaped."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")
    return f'299 - "{escaped}"'


def _status_response(status: Obj) -> web.Response:
    return _json_response(status, status=int(status.get("code") or 500))


def _error_response(error: KubeError) -> web.Response:
    status = error.status or st.make_status(error.code or 500, error.reason, error.message)
    return _json_response(status, status=int(status.get("code") or 500), warnings=warnings_of(error))


# -- request parsing ----------------------------------------------------------------------------
@dataclass(slots=True)
class _Target:
    info: TypeInfo
    version: str
    namespace: str | None
    name: str | None
    subresource: str


class _PageNotFound(Exception):
    """A path no API group handles: the API server's NotFoundHandler answers in plain text."""


class _NotAnAPIPath(Exception):
    """A path outside ``/api`` and ``/apis`` the double does not serve (``/openapi/v2`` among them):
    kube-apiserver answers 404 with the index of the paths it serves (IndexLister)."""


_BUILTIN_GROUPS = frozenset({t.group for t in BUILTIN_TYPES} | {"authorization.k8s.io"})


def _not_found_path(path: str) -> Exception:
    """404 for a path nothing serves: a Status with empty details inside a built-in API group
    (the client adds the path when it prints it), "404 page not found" text in any other group
    (a CRD's group included: its handler delegates what no CRD serves)."""
    segs = [s for s in path.split("/") if s]
    if not segs or segs[0] not in ("api", "apis"):
        return _NotAnAPIPath(path)
    if len(segs) >= 2 and segs[0] == "apis" and segs[1] not in _BUILTIN_GROUPS:
        return _PageNotFound(path)
    return st.not_served()


def _parse_target(store: Store, path: str) -> _Target:
    segs = [s for s in path.split("/") if s]
    if len(segs) >= 2 and segs[0] == "api":
        group, version, rest = "", segs[1], segs[2:]
    elif len(segs) >= 3 and segs[0] == "apis":
        group, version, rest = segs[1], segs[2], segs[3:]
    else:
        raise _not_found_path(path)
    namespace: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        info = store.resolve(group, version, rest[2])
        if info is not None and info.namespaced:
            namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        raise _not_found_path(path)
    info = store.resolve(group, version, rest[0])
    if info is None:
        raise _not_found_path(path)
    name = rest[1] if len(rest) >= 2 else None
    sub = rest[2] if len(rest) == 3 else ""
    if sub and sub not in info.subresources_in(version):
        if info.crd_name is not None and name is not None:  # the CRD handler: NotFound(name)
            raise st.not_found(info.group, info.plural, name)
        raise _not_found_path(path)
    return _Target(info, version, namespace, name, sub)


async def _body(request: web.Request, kind: str | None = None) -> Any:
    """The request body. ``kind``: a built-in object is expected, and a JSON body that is not an
    object fails as the API server's decoder says (transformDecodeError)."""
    ctype = request.content_type
    raw = await request.read()
    if not raw:
        return None
    if ctype == _PROTOBUF:
        raise st.unsupported_media_type(f"{_UNKNOWN_FORMAT}: {_ACCEPTED_BODIES}")
    if kind is not None and ctype not in ("application/yaml", "application/x-yaml"):
        try:
            body = go_json_loads(raw)
        except GoJSONError as e:
            why = f"couldn't get version/kind; json parse error: {e}"
            raise st.bad_request(_unrecognized(kind, why, raw)) from e
        if body is not None and not isinstance(body, dict):
            what = {list: "array", str: "string", bool: "bool"}.get(type(body), "number")
            why = (
                f"couldn't get version/kind; json parse error: json: cannot unmarshal {what} into Go "
                'value of type struct { APIVersion string "json:\\"apiVersion,omitempty\\""; Kind string '
                '"json:\\"kind,omitempty\\"" }'
            )
            raise st.bad_request(_unrecognized(kind, why, raw))
        return body
    try:
        if ctype in ("application/yaml", "application/x-yaml"):
            return yaml.safe_load(raw)
        return json.loads(raw)
    except (ValueError, yaml.YAMLError) as e:
        raise st.bad_request(f"the request body could not be decoded as {ctype or 'JSON'}: {e}") from e


def _unrecognized(kind: str, why: str, raw: bytes) -> str:
    """transformDecodeError without a kind in the body; the body summarised (summarizeData, 30)."""
    if raw[:1] == b"{":
        summary = raw[:30].decode(errors="replace") + (" ..." if len(raw) > 30 else "")
    else:
        summary = raw[:30].hex() + (" ..." if len(raw) > 30 else "")
    return f"the object provided is unrecognized (must be of type {kind}): {why} ({summary})"


def _user(server: DoubleServer, request: web.Request) -> UserInfo:
    """Who the request acts as: the bearer token's identity. The double does not impersonate:
    acting as the caller instead would grant what the real server would refuse, so a request
    naming an ``Impersonate-*`` header is refused (403, Forbidden, naming the header)."""
    user = _authenticated(server, request)
    asked = sorted({h for h in request.headers if h.lower().startswith("impersonate-")})
    if asked:
        raise st.raise_status(
            st.make_status(
                403,
                "Forbidden",
                f"the API double does not serve impersonation ({', '.join(asked)}): "
                "kubectl --as needs a real API server",
            )
        )
    return user


def _authenticated(server: DoubleServer, request: web.Request) -> UserInfo:
    """The bearer token's identity; ``system:anonymous`` without one; 401 for a token nobody has."""
    auth = request.headers.get("Authorization", "")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return ANONYMOUS  # no credentials to reject: the anonymous authenticator answers
    user = server.tokens.get(token.strip())
    if user is None:
        raise st.raise_status(st.make_status(401, "Unauthorized", "Unauthorized"))
    return user


_OPTIONS_KIND = {
    "POST": "CreateOptions",
    "PUT": "UpdateOptions",
    "PATCH": "PatchOptions",
    "DELETE": "DeleteOptions",
}


def _dry_run(request: web.Request) -> bool:
    """``dryRun``: only ``All``; anything else fails the options' validation (ValidateDryRun)."""
    values = list(request.query.getall("dryRun", []))
    if any(value != "All" for value in values):
        kind = _OPTIONS_KIND.get(request.method, "CreateOptions")
        why = f'{go_string_slice(values)}: supported values: "All"'
        raise st.invalid("meta.k8s.io", kind, "", [st.field_error("NotSupported", "dryRun", why)])
    return bool(values)


def _int_query(request: web.Request, key: str) -> int | None:
    value = request.query.get(key)
    if value in (None, ""):
        return None
    if not re.fullmatch(r"[+-]?[0-9]+", value) or not -(2**63) <= int(value) < 2**63:
        # Query parameters convert with strconv.ParseInt; its error is the whole message.
        why = "invalid syntax" if not re.fullmatch(r"[+-]?[0-9]+", value) else "value out of range"
        raise st.bad_request(f"strconv.ParseInt: parsing {go_quote(value)}: {why}")
    return int(value)


# -- discovery ----------------------------------------------------------------------------------
def _resource_list(store: Store, group: str, version: str) -> Obj | None:
    resources: list[Obj] = []
    for info in store.types():
        if info.group != group or version not in info.versions:
            continue
        verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
        if info.key == ("", "namespaces"):
            verbs.remove("deletecollection")  # namespaces are deleted one by one
        entry: Obj = {
            "name": info.plural,
            "singularName": info.singular,
            "namespaced": info.namespaced,
            "kind": info.kind,
            "verbs": verbs,
        }
        if info.short_names:
            entry["shortNames"] = list(info.short_names)
        if info.categories:
            entry["categories"] = list(info.categories)
        resources.append(entry)
        if "status" in info.subresources_in(version):
            resources.append(
                {"name": f"{info.plural}/status", "singularName": "", "namespaced": info.namespaced,
                 "kind": info.kind, "verbs": ["get", "patch", "update"]}
            )  # fmt: skip
        if "binding" in info.subresources:
            resources.append(
                {"name": f"{info.plural}/binding", "singularName": "", "namespaced": True, "kind": "Binding",
                 "verbs": ["create"]}
            )  # fmt: skip
            # The legacy door to the same bind; singularName as since 1.27 (GetSingularName).
            resources.append(
                {"name": "bindings", "singularName": "binding", "namespaced": True, "kind": "Binding",
                 "verbs": ["create"]}
            )  # fmt: skip
    if (group, version) == (_AUTHZ, "v1"):
        resources.append(
            {"name": "selfsubjectaccessreviews", "singularName": "", "namespaced": False,
             "kind": "SelfSubjectAccessReview", "verbs": ["create"]}
        )  # fmt: skip
    if not resources:
        return None
    if not group:  # the legacy core group's list carries no apiVersion
        return {"kind": "APIResourceList", "groupVersion": version, "resources": resources}
    gv = f"{group}/{version}"
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}


_AUTHZ = "authorization.k8s.io"  # served for SelfSubjectAccessReview only (no storage)


def _version_priority(version: str) -> tuple[int, int, int, str]:
    """version.CompareKubeAwareVersionStrings as a sort key: GA, then beta, then alpha, newest first."""
    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if m is None:
        return (3, 0, 0, version)
    stage = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    return (stage, -int(m.group(1)), -int(m.group(3) or 0), "")


def _groups(store: Store) -> list[Obj]:
    order: dict[str, list[str]] = {_AUTHZ: ["v1"]}
    for info in store.types():
        if info.group:
            known = order.setdefault(info.group, [])
            known.extend(v for v in info.versions if v not in known)
    out: list[Obj] = []
    for group in sorted(order):
        ranked = sorted(order[group], key=_version_priority)
        versions: list[Obj] = [{"groupVersion": f"{group}/{v}", "version": v} for v in ranked]
        out.append({"name": group, "versions": versions, "preferredVersion": versions[0]})
    return out


def _served_paths(store: Store) -> list[str]:
    """The index of what the double serves, as kube-apiserver lists its paths on a 404."""
    groups = [f"/apis/{g['name']}" for g in _groups(store)]
    versions = [f"/apis/{v['groupVersion']}" for g in _groups(store) for v in g["versions"]]
    fixed = ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version"]
    return sorted([*fixed, *groups, *versions])


async def _discovery(request: web.Request, server: DoubleServer) -> web.Response | None:
    path = request.path.rstrip("/")
    if path == "/version":
        return _json_response(KUBE_VERSION)
    if path in ("/healthz", "/livez", "/readyz"):
        return web.Response(text="ok")
    if path == "/api":
        return _json_response(
            {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": request.host}],
            }
        )
    if path == "/apis":
        return _json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": _groups(server.store)})
    segs = [s for s in path.split("/") if s]
    if segs == ["api", "v1"]:
        return _json_response(_resource_list(server.store, "", "v1"))
    if len(segs) == 2 and segs[0] == "apis":
        group = next((g for g in _groups(server.store) if g["name"] == segs[1]), None)
        if group is None:
            raise _not_found_path(path)
        return _json_response({"kind": "APIGroup", "apiVersion": "v1", **group})
    if len(segs) == 3 and segs[0] == "apis":
        listing = _resource_list(server.store, segs[1], segs[2])
        if listing is None:
            raise _not_found_path(path)
        return _json_response(listing)
    return None


# -- the handler --------------------------------------------------------------------------------
async def handle(request: web.Request) -> web.StreamResponse:
    """Every request: discovery, or a resource verb; any failure becomes a Status body."""
    server = request.app[SERVER_KEY]
    if request.transport is not None:
        server.transports.add(request.transport)
    try:
        user = _user(server, request)
        if request.method == "GET":
            found = await _discovery(request, server)
            if found is not None:
                if user is ANONYMOUS and request.path not in PUBLIC_PATHS:
                    why = f'User "{user.username}" cannot get path "{request.path}"'
                    raise st.raise_status(st.make_status(403, "Forbidden", f"forbidden: {why}", name=""))
                return found
        if request.path.rstrip("/") == f"/apis/{_AUTHZ}/v1/selfsubjectaccessreviews":
            return await _access_review(request, server, user)
        if user is ANONYMOUS and server.frontend.authorizer is None:
            # Without authorization nothing would refuse an anonymous request: the double does.
            raise st.raise_status(st.make_status(401, "Unauthorized", "Unauthorized"))
        legacy_ns = _bindings_namespace(request.path)
        if legacy_ns is not None:
            return await _legacy_binding(request, server, user, legacy_ns)
        try:
            target = _parse_target(server.store, request.path)
        except (KubeError, _PageNotFound, _NotAnAPIPath):
            _authorize_unserved(request, server, user)  # authorization comes before routing: 403
            raise
        if not admits_json(request.headers.get("Accept")):
            raise not_acceptable(request.headers.get("Accept"))
        return await _dispatch(request, server, user, target)
    except _PageNotFound:
        return web.Response(status=404, text="404 page not found\n", content_type="text/plain")
    except _NotAnAPIPath:
        return _json_response({"paths": _served_paths(server.store)}, status=404)
    except KubeError as e:
        return _error_response(e)
    except web.HTTPException:
        raise
    except Exception as e:  # never let one bad request take the server down
        log.exception("API double: unexpected error on %s %s", request.method, request.path_qs)
        return _status_response(st.make_status(500, "InternalError", f"Internal error occurred: {e!r}"))


def _authorize_unserved(request: web.Request, server: DoubleServer, user: UserInfo) -> None:
    """A path the double does not serve is still authorized first, as the API server's filters do."""
    authorizer = server.frontend.authorizer
    if authorizer is not None and not user.superuser:
        authorizer.authorize_path(user, request.method, request.path, request.query)


def _method_not_allowed() -> KubeError:
    """go-restful's answer to a method no route of a served path takes (a 405, empty details)."""
    msg = "the server does not allow this method on the requested resource"
    return st.raise_status(st.make_status(405, "MethodNotAllowed", msg, name=""))


async def _access_review(request: web.Request, server: DoubleServer, user: UserInfo) -> web.Response:
    """authorization.k8s.io/v1 selfsubjectaccessreviews: create only, nothing stored. Without an
    authorizer, and for superusers, everything is allowed, without a reason."""
    if request.method != "POST":
        _authorize_unserved(request, server, user)
        raise _method_not_allowed()
    body = await _body(request)
    if not isinstance(body, Mapping):
        raise st.bad_request("the body of the request must be a SelfSubjectAccessReview object")
    if body.get("kind") not in (None, "", "SelfSubjectAccessReview"):
        why = f"the kind in the data ({body.get('kind')}) does not match the expected kind"
        raise st.bad_request(f"{why} (SelfSubjectAccessReview)")
    spec: Mapping[str, Any] = body["spec"] if isinstance(body.get("spec"), Mapping) else {}
    if (spec.get("resourceAttributes") is None) == (spec.get("nonResourceAttributes") is None):
        shown = "null" if spec.get("resourceAttributes") is None else "object"
        why = f'"{shown}": exactly one of nonResourceAttributes or resourceAttributes must be specified'
        raise st.invalid(_AUTHZ, "", "", [st.field_error("Invalid", "spec.resourceAttributes", why)])
    authorizer = server.frontend.authorizer
    allowed, reason = (True, "") if authorizer is None or user.superuser else authorizer.review(user, spec)
    review: Obj = {
        "kind": "SelfSubjectAccessReview",
        "apiVersion": f"{_AUTHZ}/v1",
        "metadata": {"creationTimestamp": None},
        "spec": json.loads(json.dumps(spec)),
        "status": {"allowed": allowed, "reason": reason} if reason else {"allowed": allowed},
    }
    return _json_response(review, status=201)


def _bindings_namespace(path: str) -> str | None:
    """NS of ``/api/v1/namespaces/NS/bindings``, the legacy Binding door (no TypeInfo: nothing is
    stored under it), else None; a name after it is a path nothing serves (``_parse_target``)."""
    segs = [s for s in path.split("/") if s]
    if len(segs) == 5 and segs[:3] == ["api", "v1", "namespaces"] and segs[4] == BINDINGS.plural:
        return segs[3]
    return None


async def _legacy_binding(
    request: web.Request, server: DoubleServer, user: UserInfo, namespace: str
) -> web.Response:
    """POST bindings binds the pod its Binding names (``Frontend.create``); it serves create
    only, so any other method is a 405 once authorized (storage.go LegacyBindingREST)."""
    if request.method != "POST":
        _authorize_unserved(request, server, user)
        raise _method_not_allowed()
    if not admits_json(request.headers.get("Accept")):
        raise not_acceptable(request.headers.get("Accept"))
    dry_run = _dry_run(request)
    body = await _body(request, kind=BINDINGS.kind)
    out = await server.frontend.create(BINDINGS, body, namespace=namespace, user=user, dry_run=dry_run)
    return _json_response(out.object, status=201, warnings=out.warnings)


async def _dispatch(
    request: web.Request, server: DoubleServer, user: UserInfo, t: _Target
) -> web.StreamResponse:
    """Route a request to its verb, with kube-apiserver's checks in its order: an object path in
    no namespace, then reads, creates and bindings, then collections, then the object verbs."""
    method = request.method
    if t.info.namespaced and t.name is not None and t.namespace is None:
        raise _not_found_path(request.path)
    if method == "GET":
        return await _get(request, server, user, t)
    dry_run = _dry_run(request)
    if method == "POST":
        return await _post(request, server, user, t, dry_run)
    if t.name is None:
        return await _on_collection(request, server, user, t, dry_run)
    if t.subresource not in ("", "status"):
        raise st.method_not_supported(t.info.group, f"{t.info.plural}/{t.subresource}", method.lower())
    fe, res = server.frontend, t.info.resource(t.version)
    if method == "PUT":
        body = await _body(request, kind=t.info.kind if t.info.crd_name is None else None)
        out = await fe.update(
            res,
            body,
            name=t.name,
            namespace=t.namespace,
            subresource=t.subresource,
            user=user,
            dry_run=dry_run,
        )
        return _json_response(out.object, warnings=out.warnings)
    if method == "PATCH":
        return await _patch(request, server, user, t, dry_run)
    if method == "DELETE":
        return await _delete_one(request, server, user, t, dry_run)
    raise st.method_not_supported(t.info.group, t.info.plural, method)


async def _get(request: web.Request, server: DoubleServer, user: UserInfo, t: _Target) -> web.StreamResponse:
    """A watch, a LIST, or one object (or its status)."""
    if t.name is None:
        if request.query.get("watch") in ("true", "1"):
            return await _watch(request, server, user, t)
        return _list_response(request, server.frontend, user, t)
    if t.subresource not in ("", "status"):
        raise st.method_not_supported(t.info.group, f"{t.info.plural}/{t.subresource}", "get")
    res = t.info.resource(t.version)
    return _json_response(
        server.frontend.get(res, t.name, namespace=t.namespace, user=user, subresource=t.subresource)
    )


async def _post(
    request: web.Request, server: DoubleServer, user: UserInfo, t: _Target, dry_run: bool
) -> web.Response:
    """A create on a collection, or a pod's binding."""
    fe, ns = server.frontend, t.namespace
    builtin = t.info.kind if t.info.crd_name is None and not t.subresource and t.name is None else None
    if t.subresource == "binding":
        builtin = BINDINGS.kind  # decoded into a Binding, as the legacy door's body
    body = await _body(request, kind=builtin)
    if t.subresource == "binding" and t.name is not None and ns is not None:
        out = await fe.bind(ns, t.name, body, user=user, dry_run=dry_run)
        return _json_response(out.object, status=201, warnings=out.warnings)
    if t.name is not None:
        raise st.method_not_supported(t.info.group, t.info.plural, "create on a named resource")
    out = await fe.create(t.info.resource(t.version), body, namespace=ns, user=user, dry_run=dry_run)
    return _json_response(out.object, status=201, warnings=out.warnings)


async def _on_collection(
    request: web.Request, server: DoubleServer, user: UserInfo, t: _Target, dry_run: bool
) -> web.StreamResponse:
    """A verb other than GET or POST on a collection: only DELETE, and not of namespaces."""
    method = request.method
    if method == "DELETE" and t.info.key == ("", "namespaces"):
        server.frontend.authorize(user, "deletecollection", t.info.resource(t.version))
        raise _method_not_allowed()
    if method == "DELETE":
        return await _delete_collection(request, server, user, t, dry_run)
    raise st.method_not_supported(t.info.group, t.info.plural, method.lower() + " on a collection")


async def _patch(
    request: web.Request, server: DoubleServer, user: UserInfo, t: _Target, dry_run: bool
) -> web.Response:
    """A patch of a named object in one of the patch types the server accepts for its kind."""
    assert t.name is not None
    ctype = request.content_type
    if ctype in _REFUSED_PATCH_TYPES or (t.info.crd_name is not None and ctype not in _PATCH_TYPES):
        raise st.unsupported_media_type(f"{_UNKNOWN_FORMAT}: {_ACCEPTED_PATCH_TYPES}")
    if ctype not in _PATCH_TYPES:
        # go-restful refuses the content type before any handler runs.
        raise st.raise_status(
            st.make_status(415, "UnsupportedMediaType", "415: Unsupported Media Type", name="")
        )
    body = await _body(request)
    out = await server.frontend.patch(
        t.info.resource(t.version),
        t.name,
        body,
        namespace=t.namespace,
        patch_type=_PATCH_TYPES[ctype],
        subresource=t.subresource,
        user=user,
        dry_run=dry_run,
    )
    return _json_response(out.object, warnings=out.warnings)


async def _delete_one(
    request: web.Request, server: DoubleServer, user: UserInfo, t: _Target, dry_run: bool
) -> web.Response:
    """A delete of a named object (not of a subresource), with its options from query or body."""
    assert t.name is not None
    if t.subresource:
        raise st.method_not_supported(t.info.group, f"{t.info.plural}/{t.subresource}", "delete")
    grace, uid, rv = _delete_options(request, await _body(request))
    out = await server.frontend.delete(
        t.info.resource(t.version),
        t.name,
        namespace=t.namespace,
        grace_period_seconds=grace,
        uid=uid,
        resource_version=rv,
        user=user,
        dry_run=dry_run,
    )
    return _json_response(_deleted(t.info, out.object), warnings=out.warnings)


# Kinds whose registry sets ReturnDeletedObject (and CRDs, which keep a cleanup finalizer on the
# API server, so their DELETE answers with the object too).
_RETURN_DELETED = {
    ("", "pods"),
    ("", "namespaces"),
    ("", "serviceaccounts"),
    ("", "podtemplates"),
    ("apiextensions.k8s.io", "customresourcedefinitions"),
}


def _deleted(info: TypeInfo, obj: Obj) -> Obj:
    """A DELETE's answer (registry Store.Delete): the object while it is still there (Terminating)
    or for the kinds that return it; otherwise a Status Success naming what went."""
    meta = obj.get("metadata") or {}
    if info.key in _RETURN_DELETED or meta.get("deletionTimestamp"):
        return obj
    details: Obj = {"name": meta.get("name", "")}
    if info.group:
        details["group"] = info.group
    details["kind"] = info.plural
    if meta.get("uid"):
        details["uid"] = meta["uid"]
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}


def _delete_options(request: web.Request, body: Any) -> tuple[int | None, str | None, str | None]:
    grace = _int_query(request, "gracePeriodSeconds")
    uid = rv = None
    if isinstance(body, Mapping):
        if body.get("kind") not in (None, "DeleteOptions"):
            raise st.bad_request(f"the body of a DELETE must be DeleteOptions, not {body.get('kind')}")
        if body.get("gracePeriodSeconds") is not None:
            grace = int(body["gracePeriodSeconds"])
        pre = body.get("preconditions") or {}
        uid, rv = pre.get("uid") or None, pre.get("resourceVersion") or None
    elif body is not None:
        raise st.bad_request("the body of a DELETE must be a DeleteOptions object")
    return grace, uid, rv


def _list_response(request: web.Request, fe: Frontend, user: UserInfo, t: _Target) -> web.Response:
    page = fe.list(
        t.info.resource(t.version),
        user=user,
        namespace=t.namespace,
        label_selector=request.query.get("labelSelector"),
        field_selector=request.query.get("fieldSelector"),
        limit=_int_query(request, "limit"),
        continue_token=request.query.get("continue") or None,
        resource_version=request.query.get("resourceVersion"),
        resource_version_match=request.query.get("resourceVersionMatch"),
    )
    meta: Obj = {"resourceVersion": page.resource_version}
    if page.continue_token:
        meta["continue"] = page.continue_token
    if page.remaining_item_count is not None:
        meta["remainingItemCount"] = page.remaining_item_count
    return _json_response(
        {
            "kind": t.info.list_kind,
            "apiVersion": t.info.api_version(t.version),
            "metadata": meta,
            "items": page.items,
        }
    )


async def _delete_collection(
    request: web.Request, server: DoubleServer, user: UserInfo, t: _Target, dry_run: bool
) -> web.Response:
    res = t.info.resource(t.version)
    server.frontend.authorize(user, "deletecollection", res, namespace=t.namespace)
    page = server.frontend.list(
        res,
        user=ADMIN,
        namespace=t.namespace,
        label_selector=request.query.get("labelSelector"),
        field_selector=request.query.get("fieldSelector"),
    )
    grace, _, _ = _delete_options(request, await _body(request))
    gone: list[Obj] = []
    warnings: list[str] = []
    for item in page.items:
        meta = item["metadata"]
        try:
            out: Written = await server.frontend.delete(
                res,
                meta["name"],
                namespace=meta.get("namespace"),
                grace_period_seconds=grace,
                user=ADMIN,
                dry_run=dry_run,
            )
        except KubeError as e:
            if e.code == 404:
                continue  # deleted meanwhile
            raise
        gone.append(out.object)
        warnings.extend(out.warnings)
    body = {
        "kind": t.info.list_kind,
        "apiVersion": t.info.api_version(t.version),
        "metadata": {},
        "items": gone,
    }
    return _json_response(body, warnings=warnings)


async def _watch(
    request: web.Request, server: DoubleServer, user: UserInfo, t: _Target
) -> web.StreamResponse:
    """Stream events as newline-delimited JSON; an Expired start is one ERROR event, then the end."""
    timeout = _int_query(request, "timeoutSeconds")
    bookmarks = request.query.get("allowWatchBookmarks") in ("true", "1")
    validate_watch_options(request.query.get("resourceVersion"), request.query.get("resourceVersionMatch"))
    resp = web.StreamResponse(status=200, headers={"Content-Type": _JSON, "Transfer-Encoding": "chunked"})
    try:
        w = server.frontend.watch(
            t.info.resource(t.version),
            resource_version=request.query.get("resourceVersion"),
            user=user,
            namespace=t.namespace,
            label_selector=request.query.get("labelSelector"),
            field_selector=request.query.get("fieldSelector"),
        )
    except KubeError as e:
        if e.code != 410:
            raise
        await resp.prepare(request)
        await resp.write(_line({"type": "ERROR", "object": e.status}))
        await resp.write_eof()
        return resp
    await resp.prepare(request)
    limit = min(float(timeout), server.max_watch_seconds) if timeout else server.max_watch_seconds
    task = asyncio.current_task()
    if task is not None:
        server.watches.add(task)  # so a shutdown can end every open stream
    try:
        await _stream(resp, w, server, limit, bookmarks=bookmarks)
        await resp.write_eof()
    except (ConnectionResetError, asyncio.CancelledError):
        pass  # the client went away or the server shuts down: the watch just ends
    finally:
        w.close()
        if task is not None:
            server.watches.discard(task)
    return resp


async def _stream(
    resp: web.StreamResponse, w: Watch, server: DoubleServer, limit: float, *, bookmarks: bool
) -> None:
    """Write ``w``'s events as they come until it closes or ``limit`` seconds pass, with a
    BOOKMARK whenever one is due (the watch cache's timing, ``bookmark_due``)."""
    loop = asyncio.get_running_loop()
    wake = asyncio.Event()
    w.wakeup = wake.set
    deadline = loop.time() + limit
    next_bookmark = bookmark_due(loop.time(), deadline, server.bookmark_interval) if bookmarks else None
    while not w.closed:
        for etype, obj in w.pop():
            await resp.write(_line({"type": etype, "object": obj}))
        wake.clear()
        if w.events:
            continue
        now = loop.time()
        if now >= deadline:
            break
        if next_bookmark is not None and now >= next_bookmark:
            mark = w.bookmark()
            if mark is not None:
                await resp.write(_line({"type": "BOOKMARK", "object": mark}))
            next_bookmark = bookmark_due(now, deadline, server.bookmark_interval)
            continue
        wait = deadline - now if next_bookmark is None else min(deadline, next_bookmark) - now
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
            # arrives as the event fires, leaving the stream running after shutdown.
            async with asyncio.timeout(wait):
                await wake.wait()
        except TimeoutError:
            pass


def bookmark_due(now: float, deadline: float, interval: float) -> float | None:
    """When the next BOOKMARK is due (cacher.go nextBookmarkTime): ``interval`` from now, but no
    later than 2 s before the watch ends; None when that moment has passed."""
    due = min(now + interval, deadline - 2.0)
    return due if due >= now else None


def _line(event: Obj) -> bytes:
    return (json.dumps(event, separators=(",", ":")) + "\n").encode()


# -- app, kubeconfig, lifecycle -----------------------------------------------------------------
def build_app(server: DoubleServer) -> web.Application:
    """The aiohttp application (one catch-all route: paths are parsed like the API server does)."""
    app = web.Application(client_max_size=_MAX_BODY)
    app[SERVER_KEY] = server
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


def write_kubeconfig(
    path: Path, *, url: str, ca_pem: bytes, users: Mapping[str, str], current: str | None = None
) -> Path:
    """A kubeconfig with one cluster and one context per ``users`` entry (name -> bearer token)."""
    if not users:
        raise ValueError("a kubeconfig needs at least one user")
    current = current or next(iter(users))
    if current not in users:
        raise ValueError(f"current context {current!r} is not one of the users {sorted(users)}")
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "vgpu-guard-double",
                "cluster": {"server": url, "certificate-authority-data": base64.b64encode(ca_pem).decode()},
            }
        ],
        "users": [{"name": name, "user": {"token": token}} for name, token in users.items()],
        "contexts": [
            {"name": name, "context": {"cluster": "vgpu-guard-double", "user": name}} for name in users
        ],
        "current-context": current,
        "preferences": {},
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


@dataclass(slots=True)
class RunningDouble:
    """A served double: where it listens, how to reach it, and its state."""

    url: str
    kubeconfig: Path  # current context: the admin
    store: Store
    frontend: Frontend
    server: DoubleServer
    tls: ServingTLS
    admin_token: str
    directory: Path


def _abort(transports: Iterable[asyncio.BaseTransport]) -> None:
    for transport in list(transports):
        transport.abort()  # type: ignore[attr-defined]  # a no-op for one already closed


@asynccontextmanager
async def serve_double(
    directory: Path | None = None,
    *,
    store: Store | None = None,
    frontend: Frontend | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    authorizer: Callable[[Store], Authorizer] | None = None,
    services: Mapping[tuple[str, str, int], str] | None = None,
    bookmark_interval: float = 60.0,
    max_watch_seconds: float = 1800.0,
) -> AsyncIterator[RunningDouble]:
    """Serve a double over HTTPS until the block ends; writes ``directory/kubeconfig`` (admin).

    The admin's token is generated (``DoubleServer.tokens`` maps tokens to identities; tests add
    theirs, tests/apidouble_support/tokens.py). ``authorizer`` builds the ``Authorizer`` over the
    store (None: no authorization; tests of RBAC pass theirs). Webhook
    configurations stored in the double are called; ``services`` maps a ``clientConfig.service``
    ``(namespace, name, port)`` to the loopback ``host:port`` it listens on. A ``frontend``
    passed in is used as it is (and shared, e.g. with a ``MemoryClusterClient``). Watches that
    allow bookmarks get one every ``bookmark_interval`` and 2 s before they end, when their
    resource has changed since they started (as the watch cache sends them)."""
    if frontend is not None and store is not None and frontend.store is not store:
        raise ValueError("frontend and store disagree: pass one or the other")
    store = frontend.store if frontend is not None else (store or Store())
    chain: AdmissionChain | None = None
    if frontend is None:
        chain = AdmissionChain(store, services=dict(services or {}))
        frontend = Frontend(store, authorizer=authorizer(store) if authorizer else None, admission=chain)
    admin_token = secrets.token_urlsafe(24)
    tokens = {admin_token: ADMIN}
    server = DoubleServer(
        frontend, tokens, bookmark_interval=bookmark_interval, max_watch_seconds=max_watch_seconds
    )
    tls = make_serving_tls((host, "localhost") if host != "localhost" else ("localhost", "127.0.0.1"))
    with contextlib.ExitStack() as stack:
        if directory is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vgpu-guard-double-")))
        ctx = _serving_context(directory, tls)
        store.publish_root_ca(tls.ca_pem.decode())
        runner = web.AppRunner(build_app(server), handle_signals=False, shutdown_timeout=2.0)
        await runner.setup()
        site = web.TCPSite(runner, host, port, ssl_context=ctx)
        await site.start()
        try:
            bound = int(runner.addresses[0][1])
            url = f"https://{host}:{bound}"
            kubeconfig = write_kubeconfig(
                directory / "kubeconfig", url=url, ca_pem=tls.ca_pem, users={"admin": admin_token}
            )
            yield RunningDouble(url, kubeconfig, store, frontend, server, tls, admin_token, directory)
        finally:
            await _stop(server, runner, chain)


def _serving_context(directory: Path, tls: ServingTLS) -> ssl.SSLContext:
    """The serving certificate and key written beside the kubeconfig (the key private), loaded."""
    directory.mkdir(parents=True, exist_ok=True)
    cert = directory / "double-serving.crt"
    key = directory / "double-serving.key"
    cert.write_bytes(tls.cert_pem)
    key.write_bytes(tls.key_pem)
    key.chmod(0o600)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    return ctx


async def _stop(server: DoubleServer, runner: web.AppRunner, chain: AdmissionChain | None) -> None:
    """Stop serving so that no watch, connection or socket outlives the block."""
    for task in list(server.watches):
        task.cancel()
    # A TLS close waits (asyncio's ssl_shutdown_timeout, 30 s) for the peer's close_notify, which
    # a client that drops its socket never sends: the socket under it would outlive the loop (a
    # ResourceWarning wherever the GC next runs). Abort those first: once runner.cleanup() closes
    # such a transport a second time, asyncio drops its link to the socket and abort() can no
    # longer reach it.
    _abort(t for t in server.transports if t.is_closing())
    await runner.cleanup()
    # A client that kept a TLS connection open: abort what is left, so nothing outlives the block.
    _abort(server.transports)
    if chain is not None:
        await chain.close()
    # An aborted TLS transport closes its socket a few loop turns later (the SSL layer, then the
    # socket transport): let those turns run, so no socket is left to the GC.
    for _ in range(5):
        await asyncio.sleep(0)
