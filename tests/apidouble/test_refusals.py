"""What the double answers clients that ask beyond JSON: JSON where the request allows it, else a
refusal in kube-apiserver's Status form (issue 37 item 6; tests/contract/test_clients.py compares
the forms with kube-apiserver 1.20's).

kubectl and Helm ask for protobuf, Tables, YAML, OpenAPI, strategic merge patch, server-side apply
and impersonation. The real control plane proves those; the double serves none of them and must
never be more permissive than the real server. Sources: apiserver/pkg/endpoints/handlers/negotiation
(NewNotAcceptableError, NewUnsupportedMediaTypeError), handlers/patch.go (the accepted patch types).
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from tests.apidouble_support.http.server import RunningDouble
from tests.apidouble_support.tokens import ssl_context
from vgpu_guard.kube.resources import CRDS, PODS

from .objects import pod, widget, widget_crd

Obj = dict[str, Any]
PROTOBUF = "application/vnd.kubernetes.protobuf"
# kubectl get's Accept: a Table in v1 or v1beta1, else the plain object (get.go).
KUBECTL_GET = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
NOT_ACCEPTABLE = "only the following media types are accepted: application/json"
PATCH_TYPES = (
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json-patch+json, application/merge-patch+json"
)


async def call(
    api: RunningDouble,
    method: str,
    path: str,
    *,
    data: bytes | str | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, str, Any]:
    """(status, content type, body parsed as JSON when it is) of one request as the admin."""
    sent = {"Authorization": f"Bearer {api.admin_token}", **(headers or {})}
    async with (
        aiohttp.ClientSession() as s,
        s.request(method, api.url + path, data=data, headers=sent, ssl=ssl_context(api)) as r,
    ):
        raw = await r.read()
        ctype = r.headers.get("Content-Type", "").split(";")[0]
        return r.status, ctype, json.loads(raw) if ctype == "application/json" else raw


def status(code: int, reason: str, message: str) -> Obj:
    """A failure Status as kube-apiserver writes it (no details)."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}  # fmt: skip


# -- Accept ---------------------------------------------------------------------------------------
async def test_kubectl_gets_accept_list_gets_the_plain_json_list(double: RunningDouble) -> None:
    """No Table: the list names application/json last, so the double answers the plain PodList."""
    double.store.create(PODS, pod("p"))
    code, ctype, body = await call(
        double, "GET", "/api/v1/namespaces/default/pods", headers={"Accept": KUBECTL_GET}
    )
    assert (code, ctype, body["kind"]) == (200, "application/json", "PodList")
    assert [item["metadata"]["name"] for item in body["items"]] == ["p"]


async def test_protobuf_with_a_json_alternative_gets_json(double: RunningDouble) -> None:
    double.store.create(PODS, pod("p"))
    accept = f"{PROTOBUF}, */*"
    code, ctype, body = await call(
        double, "GET", "/api/v1/namespaces/default/pods/p", headers={"Accept": accept}
    )
    assert (code, ctype, body["metadata"]["name"]) == (200, "application/json", "p")


@pytest.mark.parametrize(
    "accept",
    [
        PROTOBUF,
        "application/json;as=Table;v=v1;g=meta.k8s.io",
        "application/yaml",
        "application/json;q=0, application/yaml",
    ],
)
async def test_an_accept_without_plain_json_is_406(double: RunningDouble, accept: str) -> None:
    """The handler's refusal (NewNotAcceptableError): a type kube-apiserver serves, not the double."""
    code, _, body = await call(double, "GET", "/api/v1/namespaces/default/pods", headers={"Accept": accept})
    assert (code, body) == (406, status(406, "NotAcceptable", NOT_ACCEPTABLE))


async def test_an_accept_no_route_produces_gets_go_restfuls_406(double: RunningDouble) -> None:
    code, _, body = await call(
        double, "GET", "/api/v1/namespaces/default/pods", headers={"Accept": "text/html"}
    )
    assert (code, body) == (406, {**status(406, "NotAcceptable", "406: Not Acceptable"), "details": {}})


# -- patch types and request bodies ----------------------------------------------------------------
@pytest.mark.parametrize("ctype", ["application/strategic-merge-patch+json", "application/apply-patch+yaml"])
async def test_strategic_merge_and_apply_patches_are_415_and_change_nothing(
    double: RunningDouble, ctype: str
) -> None:
    double.store.create(PODS, pod("p"))
    before = double.store.get(PODS, "p", namespace="default")
    patch = json.dumps({"metadata": {"labels": {"tier": "gpu"}}})
    path = "/api/v1/namespaces/default/pods/p"
    code, _, body = await call(double, "PATCH", path, data=patch, headers={"Content-Type": ctype})
    assert (code, body) == (415, status(415, "UnsupportedMediaType", PATCH_TYPES))
    assert double.store.get(PODS, "p", namespace="default") == before


async def test_a_strategic_merge_patch_of_a_custom_resource_names_the_same_types(
    double: RunningDouble,
) -> None:
    double.store.create(CRDS, widget_crd())
    path = "/apis/example.com/v1/namespaces/default/widgets"
    code, _, _ = await call(
        double, "POST", path, data=json.dumps(widget("w")), headers={"Content-Type": "application/json"}
    )
    assert code == 201
    ctype = {"Content-Type": "application/strategic-merge-patch+json"}
    code, _, body = await call(double, "PATCH", f"{path}/w", data="{}", headers=ctype)
    assert (code, body) == (415, status(415, "UnsupportedMediaType", PATCH_TYPES))


async def test_a_protobuf_request_body_is_415(double: RunningDouble) -> None:
    """kubectl create namespace|secret|... send protobuf: refused, nothing created."""
    body = b"k8s\x00\n\x0f\n\x02v1\x12\tNamespace"
    path = "/api/v1/namespaces"
    code, _, answer = await call(double, "POST", path, data=body, headers={"Content-Type": PROTOBUF})
    message = "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml"
    assert (code, answer) == (415, status(415, "UnsupportedMediaType", message))


# -- OpenAPI and impersonation ----------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/openapi/v2", "/openapi/v3", "/nothing"])
async def test_openapi_is_404_as_on_a_server_without_it(double: RunningDouble, path: str) -> None:
    """kube-apiserver answers a path outside /api and /apis it does not serve with 404 and the
    index of what it serves (IndexLister): the double's index has no /openapi."""
    code, ctype, body = await call(double, "GET", path, headers={"Accept": "application/json"})
    assert (code, ctype, list(body)) == (404, "application/json", ["paths"])
    assert {"/api", "/api/v1", "/apis", "/apis/coordination.k8s.io/v1", "/version"} <= set(body["paths"])
    assert not [p for p in body["paths"] if p.startswith("/openapi")]


async def test_impersonation_is_refused_not_ignored(double: RunningDouble) -> None:
    """Acting as the admin who sent ``Impersonate-User`` would grant what the real server refuses."""
    headers = {"Impersonate-User": "bob", "Content-Type": "application/json"}
    obj = json.dumps(pod("p"))
    code, _, body = await call(double, "POST", "/api/v1/namespaces/default/pods", data=obj, headers=headers)
    message = (
        "the API double does not serve impersonation (Impersonate-User): kubectl --as needs a real API server"
    )
    assert (code, body) == (403, status(403, "Forbidden", message))
    assert double.store.list(PODS, namespace="default").items == []


async def test_a_streaming_list_watch_is_refused_as_1_20_refuses_it(double: RunningDouble) -> None:
    # client-go's WatchListClient sends these; 1.20 refuses resourceVersionMatch on a watch (422) and
    # the client falls back to LIST + WATCH, so kubectl wait ends.
    query = "?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
    code, _, body = await call(double, "GET", "/api/v1/namespaces/default/pods" + query)
    assert code == 422
    assert body["message"] == (
        'ListOptions.meta.k8s.io "" is invalid: [resourceVersionMatch: Forbidden: resourceVersionMatch is '
        "forbidden for watch, resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless "
        "resourceVersion is provided]"
    )
