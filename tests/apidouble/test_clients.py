"""What real clients ask the double for beyond JSON (kubernetes/contract: tests/contract/test_clients.py).

kubectl and Helm send Accept headers naming protobuf and Tables, fetch ``/openapi/v2`` as gnostic
protobuf, post protobuf bodies (SelfSubjectAccessReview, Secrets, DeleteOptions), impersonate,
and open streaming-list watches. Sources: apiserver/pkg/endpoints/handlers/negotiation,
kube-openapi's handler, apiextensions-apiserver's tableconvertor, filters/impersonation.go.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import aiohttp
import pytest
import yaml

from tests.apidouble.vendor_openapi import SOURCE, TARGET, UNSERVED, render, render_unserved
from vgpu_guard.apidouble import RunningDouble
from vgpu_guard.apidouble.http._openapi import PROTO_V2
from vgpu_guard.apidouble.http._printers import human_duration
from vgpu_guard.apidouble.http._protobuf import K8S_MAGIC, fields, tag_bytes, tag_varint
from vgpu_guard.kube.resources import CRDS, LEDGERS, PODS

from .objects import pod

Obj = dict[str, Any]
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"


async def call(
    api: RunningDouble,
    method: str,
    path: str,
    *,
    data: bytes | str | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, str, bytes]:
    """(status, content type, body bytes) of one request as the admin (headers added)."""
    sent = {"Authorization": f"Bearer {api.admin_token}", **(headers or {})}
    async with (
        aiohttp.ClientSession() as s,
        s.request(method, api.url + path, data=data, headers=sent, ssl=api.ssl_context()) as r,
    ):
        return r.status, r.headers.get("Content-Type", "").split(";")[0], await r.read()


def ledger_crd() -> Obj:
    text = resources.files("vgpu_guard").joinpath("data/crds/gpuledgers.vgpu-guard.io.yaml").read_text()
    crd: Obj = yaml.safe_load(text)
    return crd


# -- content negotiation --------------------------------------------------------------------------
async def test_protobuf_with_a_json_alternative_gets_json(double: RunningDouble) -> None:
    double.store.create(PODS, pod("p"))
    accept = "application/vnd.kubernetes.protobuf, application/json"
    status, ctype, body = await call(
        double, "GET", "/api/v1/namespaces/default/pods/p", headers={"Accept": accept}
    )
    assert (status, ctype) == (200, "application/json")
    assert json.loads(body)["metadata"]["name"] == "p"


async def test_protobuf_only_is_refused_with_406_naming_it(double: RunningDouble) -> None:
    accept = "application/vnd.kubernetes.protobuf"
    status, _, body = await call(double, "GET", "/api/v1/namespaces/default/pods", headers={"Accept": accept})
    assert status == 406
    assert json.loads(body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the API double does not serve application/vnd.kubernetes.protobuf (asked for pods); only "
        "the following media types are accepted: application/json, application/yaml",
        "reason": "NotAcceptable",
        "code": 406,
    }


async def test_an_accept_with_nothing_served_is_406(double: RunningDouble) -> None:
    status, _, body = await call(double, "GET", "/api/v1/namespaces", headers={"Accept": "text/html"})
    assert status == 406
    assert json.loads(body)["message"] == (
        "only the following media types are accepted: application/json, application/yaml"
    )


async def test_yaml_is_served_when_asked(double: RunningDouble) -> None:
    double.store.create(PODS, pod("p"))
    accept = "application/yaml"
    status, ctype, body = await call(
        double, "GET", "/api/v1/namespaces/default/pods/p", headers={"Accept": accept}
    )
    assert (status, ctype) == (200, "application/yaml")
    assert yaml.safe_load(body)["metadata"]["name"] == "p"


async def test_a_table_of_kinds_the_double_does_not_print_falls_back_to_json(double: RunningDouble) -> None:
    # Only pods, nodes and namespaces are printed: kubectl's Accept names JSON, so a ConfigMap list
    # comes as JSON and kubectl prints it; a Table-only Accept is refused by name.
    path = "/api/v1/namespaces/default/configmaps"
    status, _, body = await call(double, "GET", path, headers={"Accept": TABLE})
    assert status == 200 and json.loads(body)["kind"] == "ConfigMapList"
    only_table = "application/json;as=Table;v=v1;g=meta.k8s.io"
    status, _, body = await call(double, "GET", path, headers={"Accept": only_table})
    assert status == 406
    assert json.loads(body)["message"] == (
        f"the API double does not serve {only_table} for configmaps; only the following media types are "
        "accepted: application/json, application/yaml"
    )


async def test_pods_are_printed_as_the_api_server_prints_them(double: RunningDouble) -> None:
    double.store.create(PODS, pod("p"))
    status, _, body = await call(double, "GET", "/api/v1/namespaces/default/pods", headers={"Accept": TABLE})
    assert status == 200
    table = json.loads(body)
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name", "Ready", "Status", "Restarts", "Age", "IP", "Node", "Nominated Node", "Readiness Gates",
    ]  # fmt: skip
    [row] = table["rows"]
    assert row["cells"][:4] == ["p", "0/1", "Pending", 0]
    assert row["cells"][5:] == ["<none>", "<none>", "<none>", "<none>"]


async def test_custom_resources_are_served_as_tables_with_printer_columns(double: RunningDouble) -> None:
    double.store.create(CRDS, ledger_crd())
    ledger = {"apiVersion": "vgpu-guard.io/v1alpha1", "kind": "GPULedger", "metadata": {"name": "node-a"},
              "spec": {"nodeName": "node-a", "summary": {"pods": 2, "gpus": 4, "fullestGPU": "GPU-1"}}}  # fmt: skip
    double.store.create(LEDGERS, ledger)
    status, _, body = await call(
        double, "GET", "/apis/vgpu-guard.io/v1alpha1/gpuledgers", headers={"Accept": TABLE}
    )
    assert status == 200
    table = json.loads(body)
    assert (table["kind"], table["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    columns = [(c["name"], c["type"], c["priority"]) for c in table["columnDefinitions"]]
    assert columns[:4] == [
        ("Name", "string", 0),
        ("Node", "string", 0),
        ("Pods", "integer", 0),
        ("GPUs", "integer", 0),
    ]
    assert ("Fullest-GPU", "string", 0) in columns  # the default table names the fullest GPU
    [row] = table["rows"]
    cells = dict(zip([c[0] for c in columns], row["cells"], strict=True))
    assert (cells["Name"], cells["Node"], cells["Pods"], cells["GPUs"], cells["Full"]) == (
        "node-a",
        "node-a",
        2,
        4,
        None,
    )
    assert cells["Fullest-GPU"] == "GPU-1"
    assert row["object"]["kind"] == "PartialObjectMetadata" and row["object"]["metadata"]["name"] == "node-a"
    assert "spec" not in row["object"]


def test_human_duration_matches_apimachinery() -> None:
    cases = {0: "0s", 119: "119s", 120: "2m", 125: "2m5s", 600: "10m", 3 * 3600: "3h", 3 * 3600 + 60: "3h1m",
             9 * 3600: "9h", 50 * 3600: "2d2h", 10 * 86400: "10d", 800 * 86400: "2y70d", -5: "<invalid>"}  # fmt: skip
    assert {s: human_duration(s) for s in cases} == cases


# -- OpenAPI v2 ---------------------------------------------------------------------------------
def test_the_vendored_openapi_subset_is_what_the_generator_makes() -> None:
    if not SOURCE.exists():
        pytest.skip(f"no Kubernetes 1.20.2 source at {SOURCE} (scripts/control-plane build)")
    assert TARGET.read_text() == render(), "rerun: python -m tests.apidouble.vendor_openapi"
    assert UNSERVED.read_text() == render_unserved(), "rerun: python -m tests.apidouble.vendor_openapi"


async def test_openapi_v3_is_absent_and_v2_serves_json(double: RunningDouble) -> None:
    status, _, _ = await call(double, "GET", "/openapi/v3")
    assert status == 404  # as 1.20: kubectl falls back to v2
    double.store.create(CRDS, ledger_crd())
    status, ctype, body = await call(double, "GET", "/openapi/v2", headers={"Accept": "application/json"})
    assert (status, ctype) == (200, "application/json")
    doc = json.loads(body)
    assert doc["info"] == {"title": "Kubernetes", "version": "v1.20.2"}
    ledger = doc["definitions"]["io.vgpu-guard.v1alpha1.GPULedger"]
    assert ledger["x-kubernetes-group-version-kind"] == [
        {"group": "vgpu-guard.io", "kind": "GPULedger", "version": "v1alpha1"}
    ]
    assert (
        ledger["properties"]["metadata"]["$ref"]
        == "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    )
    assert "io.vgpu-guard.v1alpha1.GPULedgerList" in doc["definitions"]
    assert "io.k8s.api.core.v1.Pod" in doc["definitions"]
    assert "io.k8s.api.apps.v1.StatefulSet" not in doc["definitions"]  # never more than is served
    assert "/api/v1/namespaces/{namespace}/pods/{name}/log" not in doc["paths"]


def _definition_names(document: bytes) -> list[str]:
    """Document.definitions (9) -> NamedSchema (1) -> name (1), decoded with the wire reader."""
    names: list[str] = []
    for number, value in fields(document):
        if number == 9 and isinstance(value, bytes):
            for _, named in fields(value):
                assert isinstance(named, bytes)
                names += [n.decode() for k, n in fields(named) if k == 1 and isinstance(n, bytes)]
    return names


async def test_openapi_v2_protobuf_carries_every_definition(double: RunningDouble) -> None:
    double.store.create(CRDS, ledger_crd())
    status, ctype, body = await call(double, "GET", "/openapi/v2", headers={"Accept": PROTO_V2})
    assert (status, ctype) == (200, "application/octet-stream")
    _, _, as_json = await call(double, "GET", "/openapi/v2", headers={"Accept": "application/json"})
    assert sorted(_definition_names(body)) == sorted(json.loads(as_json)["definitions"])
    status, _, body = await call(double, "GET", "/openapi/v2", headers={"Accept": "text/html"})
    assert (status, body) == (406, b"")  # kube-openapi's bare 406


# -- protobuf request bodies --------------------------------------------------------------------
def k8s_protobuf(api_version: str, kind: str, raw: bytes) -> bytes:
    return K8S_MAGIC + tag_bytes(1, tag_bytes(1, api_version) + tag_bytes(2, kind)) + tag_bytes(2, raw)


async def test_a_protobuf_self_subject_access_review_is_answered(double: RunningDouble) -> None:
    attrs = tag_bytes(1, "default") + tag_bytes(2, "create") + tag_bytes(5, "pods")
    review = k8s_protobuf(
        "authorization.k8s.io/v1", "SelfSubjectAccessReview", tag_bytes(2, tag_bytes(1, attrs))
    )
    headers = {
        "Content-Type": "application/vnd.kubernetes.protobuf",
        "Accept": "application/vnd.kubernetes.protobuf, */*",
    }
    status, _, body = await call(
        double, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", data=review, headers=headers
    )
    assert status == 201
    answer = json.loads(body)
    assert answer["spec"] == {
        "resourceAttributes": {"namespace": "default", "verb": "create", "resource": "pods"}
    }
    assert answer["status"] == {"allowed": True}


async def test_protobuf_secrets_and_delete_options_are_decoded(double: RunningDouble) -> None:
    meta = tag_bytes(1, "release") + tag_bytes(11, tag_bytes(1, "owner") + tag_bytes(2, "helm"))
    secret = (
        tag_bytes(1, meta)
        + tag_bytes(2, tag_bytes(1, "release") + tag_bytes(2, b"\x00\x01"))
        + tag_bytes(3, "helm.sh/release.v1")
    )
    headers = {"Content-Type": "application/vnd.kubernetes.protobuf", "Accept": "application/json"}
    status, _, body = await call(
        double,
        "POST",
        "/api/v1/namespaces/default/secrets",
        data=k8s_protobuf("v1", "Secret", secret),
        headers=headers,
    )
    assert status == 201, body
    made = json.loads(body)
    assert made["metadata"]["labels"] == {"owner": "helm"}
    assert (made["type"], made["data"]) == ("helm.sh/release.v1", {"release": "AAE="})
    options = k8s_protobuf("v1", "DeleteOptions", tag_varint(1, 0) + tag_bytes(4, "Background"))
    status, _, _ = await call(
        double, "DELETE", "/api/v1/namespaces/default/secrets/release", data=options, headers=headers
    )
    assert status == 200


async def test_protobuf_bodies_of_other_kinds_are_refused_by_name(double: RunningDouble) -> None:
    headers = {"Content-Type": "application/vnd.kubernetes.protobuf"}
    status, _, body = await call(
        double,
        "POST",
        "/api/v1/namespaces/default/pods",
        data=k8s_protobuf("v1", "Pod", b""),
        headers=headers,
    )
    assert status == 415
    assert json.loads(body)["message"] == (
        "the API double does not serve application/vnd.kubernetes.protobuf request bodies for Pod (it decodes "
        "DeleteOptions, Secret, SelfSubjectAccessReview): send application/json or application/yaml"
    )


async def test_a_garbled_protobuf_body_is_a_bad_request(double: RunningDouble) -> None:
    headers = {"Content-Type": "application/vnd.kubernetes.protobuf"}
    status, _, body = await call(
        double, "POST", "/api/v1/namespaces/default/secrets", data=b"{}", headers=headers
    )
    assert status == 400
    assert json.loads(body)["message"] == (
        "the request body is not a Kubernetes protobuf object: the body does not start with the k8s protobuf prefix"
    )


# -- what is not served -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "feature"),
    [
        ("/apis/apps/v1/namespaces/default/statefulsets", "statefulsets.apps/v1"),
        ("/apis/apps/v1/namespaces/default/deployments/d/scale", "deployments/scale.apps/v1"),
        ("/apis/batch/v1/jobs", "jobs.batch/v1"),
        ("/api/v1/namespaces/default/pods/p/log", "pods/log (v1)"),
        ("/api/v1/namespaces/default/serviceaccounts/default/token", "serviceaccounts/token (v1)"),
        ("/api/v1/namespaces/default/services", "services (v1)"),
    ],
)
async def test_kubernetes_resources_the_double_lacks_are_refused_by_name(
    double: RunningDouble, path: str, feature: str
) -> None:
    status, _, body = await call(double, "GET", path)
    assert status == 404
    assert json.loads(body)["message"] == (
        f"the API double does not serve {feature}; docs/apidouble.md lists what it serves"
    )


async def test_a_streaming_list_watch_is_refused_as_1_20_refuses_it(double: RunningDouble) -> None:
    # client-go's WatchListClient sends these; 1.20 refuses resourceVersionMatch on a watch (422) and
    # the client falls back to LIST + WATCH, so kubectl wait ends.
    query = "?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
    status, _, body = await call(double, "GET", "/api/v1/namespaces/default/pods" + query)
    assert status == 422
    assert json.loads(body)["message"] == (
        'ListOptions.meta.k8s.io "" is invalid: [resourceVersionMatch: Forbidden: resourceVersionMatch is '
        "forbidden for watch, resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless "
        "resourceVersion is provided]"
    )


def _pod_row(status: Obj, **spec: Any) -> list[Any]:
    from datetime import UTC, datetime

    from vgpu_guard.apidouble.http._printers import print_pod

    obj = {"metadata": {"name": "p", "creationTimestamp": "2025-01-01T12:00:00Z"},
           "spec": {"containers": [{"name": "a"}, {"name": "b"}], **spec}, "status": status}  # fmt: skip
    cells, _ = print_pod(obj, datetime(2025, 1, 1, 12, 5, 0, tzinfo=UTC))
    return cells[:5]


def test_pod_status_column_follows_print_pod() -> None:
    running = {"state": {"running": {}}, "ready": True, "restartCount": 1}
    crash = {"state": {"waiting": {"reason": "CrashLoopBackOff"}}, "restartCount": 4}
    assert _pod_row({"phase": "Running", "containerStatuses": [running, crash]}) == [
        "p",
        "1/2",
        "CrashLoopBackOff",
        5,
        "5m",
    ]
    init = {
        "phase": "Pending",
        "initContainerStatuses": [{"state": {"waiting": {"reason": "PodInitializing"}}}],
    }
    assert _pod_row(init, initContainers=[{"name": "i"}])[2] == "Init:0/1"
    failed = {"phase": "Pending", "initContainerStatuses": [{"state": {"terminated": {"exitCode": 2}}}]}
    assert _pod_row(failed, initContainers=[{"name": "i"}])[2] == "Init:ExitCode:2"
    done = {
        "phase": "Running",
        "containerStatuses": [{"state": {"terminated": {"reason": "Completed"}}}, running],
    }
    assert _pod_row(done)[2] == "NotReady"
