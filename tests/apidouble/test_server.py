"""The double over HTTPS as real clients see it: the official sync client (in a thread), its
dynamic client, raw HTTP for what the libraries hide (Status bodies, watch lines, content types).
Sources: Kubernetes "API Concepts" and k8s.io/apiserver/pkg/endpoints (handlers, discovery)."""

from __future__ import annotations

import json
import socket
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.apidouble_support.http.server import RunningDouble, serve_double
from tests.apidouble_support.tokens import kubeconfig_for, ssl_context
from vgpu_guard.apidouble.store import Store
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.resources import CRDS, PODS

from .conftest import in_thread
from .objects import pod, volcano_crd


async def raw(
    api: RunningDouble,
    method: str,
    path: str,
    *,
    body: Any = None,
    ctype: str = "application/json",
    token: str | None = None,
) -> tuple[int, Any, aiohttp.ClientResponse]:
    headers = {"Authorization": f"Bearer {token or api.admin_token}", "Content-Type": ctype}
    data = body if isinstance(body, bytes | str) or body is None else json.dumps(body)
    async with (
        aiohttp.ClientSession() as s,
        s.request(method, api.url + path, data=data, headers=headers, ssl=ssl_context(api)) as r,
    ):
        text = await r.text()
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = text
        return r.status, parsed, r


async def test_sync_client_typed_api_works_from_a_thread(double: RunningDouble, sync_api: Any) -> None:
    # The official client, configured from the written kubeconfig, as against a cluster.
    from kubernetes import client

    v1 = client.CoreV1Api(sync_api)
    made = await in_thread(v1.create_namespaced_pod, "default", pod("p"))
    assert made.status.phase == "Pending"
    with pytest.raises(client.ApiException) as err:
        await in_thread(v1.create_namespaced_pod, "default", pod("p"))
    assert err.value.status == 409
    assert err.value.body is not None
    assert json.loads(err.value.body)["reason"] == "AlreadyExists"
    names = [ns.metadata.name for ns in (await in_thread(v1.list_namespace)).items]
    assert names == ["default", "kube-node-lease", "kube-public", "kube-system"]


async def test_discovery_serves_the_dynamic_client_including_crds(
    double: RunningDouble, sync_api: Any
) -> None:
    # apiserver discovery (/api, /apis, group-version resource lists) as kubernetes.dynamic reads it.
    from kubernetes import dynamic

    double.store.create(CRDS, volcano_crd("scheduling.volcano.sh_queues"))

    def use_dynamic() -> list[str]:
        dyn = dynamic.DynamicClient(sync_api)  # type: ignore[no-untyped-call]  # unannotated in kubernetes
        queues = dyn.resources.get(api_version="scheduling.volcano.sh/v1beta1", kind="Queue")
        queues.create(
            body={
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "Queue",
                "metadata": {"name": "q"},
                "spec": {"weight": 1},
            }
        )
        pods = dyn.resources.get(api_version="v1", kind="Pod")
        assert pods.namespaced
        return [q.metadata.name for q in queues.get().items]

    assert await in_thread(use_dynamic) == ["q"]
    _status, body, _ = await raw(double, "GET", "/api/v1")
    names = {r["name"] for r in body["resources"]}
    assert {"pods", "pods/status", "pods/binding", "nodes", "nodes/status", "namespaces"} <= names


async def test_version_and_unknown_paths(double: RunningDouble) -> None:
    # /version answers like kube-apiserver; an unknown resource of a served group is a 404 Status
    # (empty details, no path in the message), an unknown group the NotFoundHandler's plain text.
    status, body, _ = await raw(double, "GET", "/version")
    assert status == 200 and body["major"] == "1"
    status, body, _ = await raw(double, "GET", "/api/v1/widgets")
    assert status == 404 and body["kind"] == "Status" and body["reason"] == "NotFound"
    assert body["message"] == "the server could not find the requested resource" and body["details"] == {}
    status, body, _ = await raw(double, "GET", "/apis/example.com/v1/widgets")
    assert status == 404 and body == "404 page not found\n"


async def test_unknown_patch_types_are_refused_with_415(double: RunningDouble) -> None:
    # A type no API server implements gets go-restful's bare 415 (strategic merge and apply, which
    # kube-apiserver implements and the double refuses: test_refusals.py).
    double.store.create(PODS, pod("p"))
    status, body, _ = await raw(
        double, "PATCH", "/api/v1/namespaces/default/pods/p", body={"metadata": {}}, ctype="text/plain"
    )
    assert status == 415 and body["message"] == "415: Unsupported Media Type"


async def test_unsupported_verbs_are_405(double: RunningDouble) -> None:
    # handlers return MethodNotSupported (405) for verbs a resource does not serve.
    double.store.create(PODS, pod("p"))
    status, body, _ = await raw(double, "POST", "/api/v1/namespaces/default/pods/p", body=pod("p"))
    assert status == 405 and body["reason"] == "MethodNotAllowed"
    status, body, _ = await raw(double, "PUT", "/api/v1/namespaces/default/pods", body=pod("p"))
    assert status == 405


async def test_bad_input_is_a_400_and_the_server_keeps_serving(double: RunningDouble) -> None:
    # Decoding errors are 400 BadRequest Status bodies; the server stays up.
    status, body, _ = await raw(double, "POST", "/api/v1/namespaces/default/pods", body=b"{not json")
    assert status == 400 and body["reason"] == "BadRequest"
    status, body, _ = await raw(double, "POST", "/api/v1/namespaces/default/pods", body=[1, 2])
    assert status == 400
    status, body, _ = await raw(double, "GET", "/api/v1/pods?labelSelector=a%20in%20(")
    assert status == 400 and "unable to parse requirement" in body["message"]
    status, body, _ = await raw(double, "GET", "/api/v1/pods?limit=x")
    assert status == 400
    status, body, _ = await raw(
        double,
        "POST",
        "/api/v1/namespaces/default/pods",
        body=yaml.safe_dump(pod("y")),
        ctype="application/yaml",
    )
    assert status == 201
    status, _, _ = await raw(double, "GET", "/api/v1/namespaces/default/pods/y")
    assert status == 200


async def test_requests_need_a_known_bearer_token(double: RunningDouble) -> None:
    # authentication: an unknown token is 401 Unauthorized.
    status, body, _ = await raw(double, "GET", "/api/v1/pods", token="wrong")
    assert status == 401 and body["reason"] == "Unauthorized"


async def test_watch_stream_from_too_old_version_is_one_error_event(
    double: RunningDouble, store: Store
) -> None:
    # API Concepts "410 Gone": the watch answers 200 and carries one ERROR event with the Expired Status.
    for i in range(store.watch_window + 2):
        store.create(PODS, pod(f"p{i}"))
    status, body, _ = await raw(double, "GET", "/api/v1/pods?watch=true&resourceVersion=1")
    assert status == 200
    lines = [body]  # exactly one line, so the whole body parses as one JSON event
    assert lines[0]["type"] == "ERROR"
    assert lines[0]["object"]["code"] == 410 and lines[0]["object"]["reason"] == "Expired"


async def test_watch_lines_are_newline_delimited_json_with_bookmarks(
    double: RunningDouble, store: Store
) -> None:
    # API Concepts "Watch bookmarks" and the streaming format (one JSON event per line).
    rv = str(store.resource_version)
    store.create(PODS, pod("p"))
    _status, text, _ = await raw(
        double,
        "GET",
        f"/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=3",
    )
    events = [json.loads(line) for line in text.splitlines() if line.strip()]
    assert events[0]["type"] == "ADDED" and events[0]["object"]["metadata"]["name"] == "p"
    assert any(e["type"] == "BOOKMARK" for e in events[1:])


async def test_server_side_dry_run_persists_nothing(double: RunningDouble, store: Store) -> None:
    # API Concepts "Dry-run": ?dryRun=All runs the request without persisting; other values are 422.
    status, body, _ = await raw(double, "POST", "/api/v1/namespaces/default/pods?dryRun=All", body=pod("p"))
    assert status == 201 and body["metadata"]["name"] == "p"
    status, _, _ = await raw(double, "GET", "/api/v1/namespaces/default/pods/p")
    assert status == 404
    status, body, _ = await raw(double, "POST", "/api/v1/namespaces/default/pods?dryRun=Yes", body=pod("p"))
    assert status == 422 and body["details"]["kind"] == "CreateOptions"  # ValidateDryRun


async def test_delete_collection_and_binding_status_body(double: RunningDouble) -> None:
    # pods/binding answers 201 with a Status Success (storage.go BindingREST.Create).
    for name in ("a", "b"):
        await raw(double, "POST", "/api/v1/namespaces/default/pods", body=pod(name, labels={"x": "1"}))
    status, body, _ = await raw(
        double,
        "POST",
        "/api/v1/namespaces/default/pods/a/binding",
        body={
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "a"},
            "target": {"kind": "Node", "name": "n1"},
        },
    )
    assert status == 201 and body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }
    status, body, _ = await raw(
        double, "DELETE", "/api/v1/namespaces/default/pods?labelSelector=x%3D1&gracePeriodSeconds=0"
    )
    assert status == 200 and sorted(i["metadata"]["name"] for i in body["items"]) == ["a", "b"]


async def test_kubeconfig_for_another_identity(double: RunningDouble) -> None:
    # Each identity gets its own bearer token and kubeconfig, as ServiceAccount tokens would.
    from vgpu_guard.apidouble.identity import service_account

    path = kubeconfig_for(double, service_account("vgpu-guard", "controller"))
    config = yaml.safe_load(path.read_text())
    assert config["clusters"][0]["cluster"]["server"] == double.url
    c = await AioClusterClient.from_kubeconfig(str(path))
    try:
        assert (await c.list(PODS)).items == []
    finally:
        await c.close()


async def test_a_client_that_drops_its_tls_connection_leaves_no_socket_behind(tmp_path: Path) -> None:
    # A client that reads a `Connection: close` response and drops its socket without a TLS
    # close_notify leaves the server's side waiting for one (asyncio's ssl_shutdown_timeout, 30 s).
    # The double's shutdown must close that socket itself, not leave it to the garbage collector
    # (a ResourceWarning, an error under pytest, raised wherever the next GC happens to run).
    def request_and_keep_the_socket(port: int, context: ssl.SSLContext) -> ssl.SSLSocket:
        sock = context.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="127.0.0.1")
        sock.sendall(b"GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        while sock.recv(65536):  # until the server's close_notify
            pass
        return sock

    async with serve_double(tmp_path) as api:
        port = int(api.url.rsplit(":", 1)[1])
        client_socket = await in_thread(request_and_keep_the_socket, port, ssl_context(api))
        served = list(api.server.transports)
        assert served and all(t.is_closing() for t in served)  # shutting down, socket still open
        sockets = [t.get_extra_info("socket") for t in served]
        assert all(s.fileno() != -1 for s in sockets)
    try:
        assert [s.fileno() for s in sockets] == [-1] * len(sockets)
    finally:
        client_socket.close()
