"""The double's admission chain against small local webhook servers (HTTPS, own CA).

Sources: Kubernetes docs "Dynamic Admission Control" (ordering, matching, reinvocation, dry run,
failurePolicy, timeouts, warnings) and staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/
(mutating/dispatcher.go, validating/dispatcher.go, errors/statuserror.go, request/admissionreview.go).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.apidouble_support.http._tls import make_serving_tls
from tests.apidouble_support.http.server import RunningDouble, serve_double
from tests.apidouble_support.tokens import ssl_context
from vgpu_guard.apidouble.store import Store
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.errors import Forbidden, Invalid, KubeError, Unavailable
from vgpu_guard.kube.resources import CRDS, MUTATING_WEBHOOKS, NAMESPACES, PODS, VALIDATING_WEBHOOKS

from .objects import WIDGETS, pod, widget, widget_crd

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


@asynccontextmanager
async def webhook_server(
    handler: Handler, *, hosts: tuple[str, ...] = ("127.0.0.1",)
) -> AsyncIterator[tuple[str, str]]:
    """Serve ``handler(request) -> response fields`` over HTTPS; yields (base URL, caBundle)."""
    tls = make_serving_tls(hosts)

    async def review(request: web.Request) -> web.Response:
        body = await request.json()
        answer = await handler(body["request"])
        if "raw" in answer:
            return answer["raw"]  # type: ignore[no-any-return]
        response = {"uid": body["request"]["uid"], "allowed": True, **answer}
        return web.json_response(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        )

    app = web.Application()
    app.router.add_post("/{tail:.*}", review)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "c.pem").write_bytes(tls.cert_pem)
        (Path(d) / "k.pem").write_bytes(tls.key_pem)
        ctx.load_cert_chain(Path(d) / "c.pem", Path(d) / "k.pem")
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"https://127.0.0.1:{port}", base64.b64encode(tls.ca_pem).decode()
    finally:
        await runner.cleanup()


def hook(name: str, url: str, ca: str, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": name,
        "clientConfig": {"url": url + "/" + name, "caBundle": ca},
        "rules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
        ],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    }
    spec.update(extra)
    return spec


def config(name: str, *hooks: dict[str, Any], kind: str = "MutatingWebhookConfiguration") -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": list(hooks),
    }


def patch_of(ops: list[dict[str, Any]]) -> dict[str, Any]:
    return {"patchType": "JSONPatch", "patch": base64.b64encode(json.dumps(ops).encode()).decode()}


@pytest.fixture
async def api(store: Store, tmp_path: Path) -> AsyncIterator[RunningDouble]:
    async with serve_double(tmp_path, store=store) as running:
        yield running


@pytest.fixture
async def kube(api: RunningDouble) -> AsyncIterator[AioClusterClient]:
    c = await AioClusterClient.from_kubeconfig(str(api.kubeconfig))
    yield c
    await c.close()


def recorder(seen: list[tuple[str, dict[str, Any]]], tag: str, *, add: bool) -> Handler:
    """A webhook that records the request and, when ``add``, labels the object ``tag=<call #>``."""

    async def h(req: dict[str, Any]) -> dict[str, Any]:
        seen.append((tag, req))
        if not add:
            return {}
        labels = dict(req["object"]["metadata"].get("labels") or {})
        return patch_of([{"op": "add", "path": "/metadata/labels", "value": {**labels, tag: str(len(seen))}}])

    return h


async def test_mutating_order_then_validation_then_validating_webhooks(
    store: Store, kube: AioClusterClient
) -> None:
    # Dynamic Admission Control: mutating configurations sorted by name, webhooks in listed order,
    # then schema validation, then validating webhooks seeing the final object.
    seen: list[tuple[str, dict[str, Any]]] = []
    async with (
        webhook_server(recorder(seen, "a", add=True)) as (u1, ca1),
        webhook_server(recorder(seen, "b", add=True)) as (u2, ca2),
        webhook_server(recorder(seen, "c", add=True)) as (u3, ca3),
        webhook_server(recorder(seen, "v", add=False)) as (u4, ca4),
    ):
        store.create(MUTATING_WEBHOOKS, config("z-last", hook("c.example.com", u3, ca3)))
        store.create(
            MUTATING_WEBHOOKS,
            config("a-first", hook("a.example.com", u1, ca1), hook("b.example.com", u2, ca2)),
        )
        vconf = config("v", hook("v.example.com", u4, ca4), kind="ValidatingWebhookConfiguration")
        store.create(VALIDATING_WEBHOOKS, vconf)
        made = await kube.create(PODS, pod("p"))
    assert [tag for tag, _ in seen] == ["a", "b", "c", "v"]
    assert seen[-1][1]["object"]["metadata"]["labels"] == {"a": "1", "b": "2", "c": "3"}
    assert made["metadata"]["labels"] == {"a": "1", "b": "2", "c": "3"}


async def test_admission_review_request_carries_every_field(store: Store, kube: AioClusterClient) -> None:
    # request/admissionreview.go CreateV1AdmissionReview: the fields a real request sends.
    seen: list[tuple[str, dict[str, Any]]] = []
    async with webhook_server(recorder(seen, "r", add=False)) as (url, ca):
        rules = [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["pods", "pods/binding"],
            }
        ]
        store.create(
            VALIDATING_WEBHOOKS,
            config("v", hook("r.example.com", url, ca, rules=rules), kind="ValidatingWebhookConfiguration"),
        )
        await kube.create(PODS, pod("p"))
        await kube.bind("default", "p", node="n1", annotations={"a": "b"})
    create, binding = seen[0][1], seen[1][1]
    for key in (
        "uid",
        "kind",
        "resource",
        "requestKind",
        "requestResource",
        "name",
        "namespace",
        "operation",
        "userInfo",
        "object",
        "oldObject",
        "dryRun",
        "options",
    ):
        assert key in create, key
    assert create["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert create["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert create["operation"] == "CREATE" and create["oldObject"] is None and create["dryRun"] is False
    assert create["userInfo"]["username"] == "kubernetes-admin"
    assert create["object"]["spec"]["schedulerName"] == "default-scheduler"  # defaulted before admission
    assert binding["kind"]["kind"] == "Binding" and binding["subResource"] == "binding"
    assert binding["requestSubResource"] == "binding" and binding["object"]["target"]["name"] == "n1"


@pytest.mark.parametrize(
    ("status", "code", "message"),
    [
        (
            {"code": 0, "message": "no GPUs"},
            400,
            'admission webhook "deny.example.com" denied the request: no GPUs',
        ),
        (
            {"code": 403, "message": "no GPUs"},
            403,
            'admission webhook "deny.example.com" denied the request: no GPUs',
        ),
        (
            {"code": 200, "message": "odd"},
            400,
            'admission webhook "deny.example.com" denied the request: odd',
        ),
        (
            {"code": 422, "message": "bad"},
            422,
            'admission webhook "deny.example.com" denied the request: bad',
        ),
        ({}, 400, 'admission webhook "deny.example.com" denied the request without explanation'),
    ],
)
async def test_denial_as_the_client_sees_it(
    *,
    store: Store,
    api: RunningDouble,
    kube: AioClusterClient,
    status: dict[str, Any],
    code: int,
    message: str,
) -> None:
    # errors/statuserror.go ToStatusErr: below 400 (0 included) -> 400, message prefix; checked
    # against kube-apiserver 1.20 by tests/contract/test_admission.py.
    async def deny(req: dict[str, Any]) -> dict[str, Any]:
        return {"allowed": False, "status": status}

    async with webhook_server(deny) as (url, ca):
        store.create(
            VALIDATING_WEBHOOKS,
            config("v", hook("deny.example.com", url, ca), kind="ValidatingWebhookConfiguration"),
        )
        with pytest.raises(KubeError) as err:
            await kube.create(PODS, pod("p"))
    assert err.value.code == code and err.value.message == message
    if code == 403:
        assert isinstance(err.value, Forbidden)


async def test_warnings_come_back_as_299_headers(
    store: Store, api: RunningDouble, kube: AioClusterClient
) -> None:
    # Dynamic Admission Control "Response": warnings -> HTTP "Warning: 299 - \"text\"" headers.
    async def warn(req: dict[str, Any]) -> dict[str, Any]:
        return {"warnings": ['rounded "1500m" up', "second"]}

    async with webhook_server(warn) as (url, ca):
        store.create(MUTATING_WEBHOOKS, config("m", hook("warn.example.com", url, ca)))
        headers = {"Authorization": f"Bearer {api.admin_token}"}
        async with (
            aiohttp.ClientSession() as s,
            s.post(
                api.url + "/api/v1/namespaces/default/pods",
                json=pod("p"),
                headers=headers,
                ssl=ssl_context(api),
            ) as r,
        ):
            assert r.status == 201
            assert r.headers.getall("Warning") == ['299 - "rounded \\"1500m\\" up"', '299 - "second"']
        await kube.create(PODS, pod("q"))
    assert kube.warnings[-2:] == ['rounded "1500m" up', "second"]


async def test_patched_object_is_validated_again(store: Store, kube: AioClusterClient) -> None:
    # Dynamic Admission Control: the result of mutation is validated (here: the CRD schema).
    store.create(CRDS, widget_crd())

    async def break_it(req: dict[str, Any]) -> dict[str, Any]:
        return patch_of([{"op": "replace", "path": "/spec/size", "value": 99}])

    async with webhook_server(break_it) as (url, ca):
        rules = [
            {
                "apiGroups": ["example.com"],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["widgets"],
            }
        ]
        store.create(MUTATING_WEBHOOKS, config("m", hook("size.example.com", url, ca, rules=rules)))
        with pytest.raises(Invalid, match=re.escape("spec.size in body should be less than or equal to 10")):
            await kube.create(WIDGETS, widget("w"))


@pytest.mark.parametrize(("policy", "calls"), [("IfNeeded", 2), ("Never", 1)])
async def test_reinvocation_if_needed(store: Store, kube: AioClusterClient, policy: str, calls: int) -> None:
    # mutating/reinvocationcontext.go: an IfNeeded webhook runs again when a later one changed the object.
    seen: list[tuple[str, dict[str, Any]]] = []

    async def idempotent(req: dict[str, Any]) -> dict[str, Any]:
        seen.append(("first", req))
        return {}

    async with (
        webhook_server(idempotent) as (u1, ca1),
        webhook_server(recorder([], "later", add=True)) as (u2, ca2),
    ):
        store.create(
            MUTATING_WEBHOOKS, config("a", hook("first.example.com", u1, ca1, reinvocationPolicy=policy))
        )
        store.create(MUTATING_WEBHOOKS, config("b", hook("later.example.com", u2, ca2)))
        await kube.create(PODS, pod("p"))
    assert len(seen) == calls
    if calls == 2:
        assert seen[1][1]["object"]["metadata"]["labels"] == {"later": "1"}


async def slow(req: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(3)
    return {}


async def broken_patch(req: dict[str, Any]) -> dict[str, Any]:
    return patch_of([{"op": "remove", "path": "/spec/doesNotExist"}])


async def server_error(req: dict[str, Any]) -> dict[str, Any]:
    return {"raw": web.Response(status=500, text="boom")}


async def wrong_uid(req: dict[str, Any]) -> dict[str, Any]:
    return {"uid": "not-the-request"}


@pytest.mark.parametrize(
    ("handler", "fail_text", "ignore_admits"),
    [
        (slow, "context deadline exceeded", True),
        (server_error, "the server responded with the status code 500", True),
        (wrong_uid, 'expected response.uid="', True),
        # A patch that does not apply fails the request whatever the failurePolicy: the real
        # dispatcher returns it as an internal error outside the call-error path.
        (broken_patch, "Internal error occurred: JsonPatchPathNotFound", False),
    ],
)
@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
async def test_failures_follow_the_failure_policy(
    *,
    store: Store,
    kube: AioClusterClient,
    handler: Handler,
    fail_text: str,
    ignore_admits: bool,
    policy: str,
) -> None:
    # Dynamic Admission Control "Failure policy" and "Timeouts"; mutating/dispatcher.go error paths.
    async with webhook_server(handler) as (url, ca):
        store.create(
            MUTATING_WEBHOOKS,
            config("m", hook("faulty.example.com", url, ca, failurePolicy=policy, timeoutSeconds=1)),
        )
        if policy == "Ignore" and ignore_admits:
            assert (await kube.create(PODS, pod("p")))["metadata"]["name"] == "p"
            return
        with pytest.raises(Unavailable) as err:
            await kube.create(PODS, pod("p"))
    assert err.value.code == 500 and fail_text in err.value.message
    if handler is not broken_patch:
        assert err.value.message.startswith(
            'Internal error occurred: failed calling webhook "faulty.example.com": '
        )


async def test_selectors_decide_which_requests_a_webhook_sees(store: Store, kube: AioClusterClient) -> None:
    # generic/webhook.go: namespaceSelector on the namespace's labels, objectSelector on the object's.
    seen: list[tuple[str, dict[str, Any]]] = []
    store.create(NAMESPACES, {"metadata": {"name": "gpu", "labels": {"team": "ml"}}})
    async with webhook_server(recorder(seen, "s", add=False)) as (url, ca):
        h = hook(
            "sel.example.com",
            url,
            ca,
            namespaceSelector={"matchLabels": {"team": "ml"}},
            objectSelector={"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]},
        )
        store.create(VALIDATING_WEBHOOKS, config("v", h, kind="ValidatingWebhookConfiguration"))
        await kube.create(PODS, pod("a", namespace="default"))
        await kube.create(PODS, pod("b", namespace="gpu", labels={"skip": "1"}))
        await kube.create(PODS, pod("c", namespace="gpu"))
    assert [req["name"] for _, req in seen] == ["c"]


async def test_kubernetes_io_metadata_name_selects_namespaces(store: Store, kube: AioClusterClient) -> None:
    # NamespaceLifecycle sets kubernetes.io/metadata.name on every namespace, which charts use to exclude.
    seen: list[tuple[str, dict[str, Any]]] = []
    async with webhook_server(recorder(seen, "s", add=False)) as (url, ca):
        sel = {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}
            ]
        }
        store.create(
            VALIDATING_WEBHOOKS,
            config(
                "v",
                hook("ns.example.com", url, ca, namespaceSelector=sel),
                kind="ValidatingWebhookConfiguration",
            ),
        )
        await kube.create(PODS, pod("sys", namespace="kube-system"))
        await kube.create(PODS, pod("user"))
    assert [req["name"] for _, req in seen] == ["user"]


async def test_match_conditions_are_judged_per_request(store: Store, kube: AioClusterClient) -> None:
    # generic/webhook.go matchConditions: every expression true (object, oldObject, request, the
    # request's own copy of the object); the programs are compiled once and reused, so each request
    # must still be judged on its own values. A condition that does not compile is an error of every
    # request it meets, judged by the failurePolicy each time.
    pytest.importorskip("celpy")
    seen: list[tuple[str, dict[str, Any]]] = []
    gpu_only = [
        {"name": "gpu", "expression": "'gpu' in object.metadata.labels"},
        {"name": "same", "expression": "request.object.metadata.name == object.metadata.name"},
        {"name": "create", "expression": "request.operation == 'CREATE' && oldObject == null"},
        # A true || or false && left side is the answer, whatever the right side (here an error) is.
        {"name": "or", "expression": "true || object.metadata.missing.field"},
        {"name": "and", "expression": "!(false && object.metadata.missing.field)"},
    ]
    broken = [{"name": "broken", "expression": "object.metadata.("}]
    async with webhook_server(recorder(seen, "s", add=False)) as (url, ca):
        store.create(
            VALIDATING_WEBHOOKS,
            config(
                "v",
                hook("cel.example.com", url, ca, matchConditions=gpu_only),
                hook("broken.example.com", url, ca, matchConditions=broken, failurePolicy="Ignore"),
                kind="ValidatingWebhookConfiguration",
            ),
        )
        for name, labels in [
            ("a", {"gpu": "1"}),
            ("b", {"cpu": "1"}),
            ("c", {"gpu": "2"}),
            ("d", {"tier": "web"}),
        ]:
            await kube.create(PODS, pod(name, labels=labels))
        assert [req["name"] for _, req in seen] == ["a", "c"]
        store.create(
            VALIDATING_WEBHOOKS,
            config(
                "w",
                hook("fail.example.com", url, ca, matchConditions=broken),
                kind="ValidatingWebhookConfiguration",
            ),
        )
        for name in ("e", "f"):
            with pytest.raises(Unavailable) as err:
                await kube.create(PODS, pod(name, labels={"gpu": "1"}))
            assert err.value.code == 500
            assert "failed calling webhook \"fail.example.com\": matchCondition 'broken'" in err.value.message
    assert [req["name"] for _, req in seen] == ["a", "c"]


async def test_dry_run_reaches_webhooks_and_persists_nothing(store: Store, api: RunningDouble) -> None:
    # Dynamic Admission Control "Side effects": request.dryRun is true; nothing is stored.
    seen: list[tuple[str, dict[str, Any]]] = []
    async with webhook_server(recorder(seen, "d", add=True)) as (url, ca):
        store.create(MUTATING_WEBHOOKS, config("m", hook("dry.example.com", url, ca)))
        headers = {"Authorization": f"Bearer {api.admin_token}"}
        async with (
            aiohttp.ClientSession() as s,
            s.post(
                api.url + "/api/v1/namespaces/default/pods?dryRun=All",
                json=pod("p"),
                headers=headers,
                ssl=ssl_context(api),
            ) as r,
        ):
            body = await r.json()
    assert r.status == 201 and body["metadata"]["labels"] == {"d": "1"}
    assert seen[0][1]["dryRun"] is True
    assert not store.list(PODS, namespace="default").items


async def test_service_reference_is_mapped_to_loopback_and_tls_checked(store: Store, tmp_path: Path) -> None:
    # clientConfig.service: server name SERVICE.NAMESPACE.svc, verified against caBundle.
    seen: list[tuple[str, dict[str, Any]]] = []
    async with webhook_server(recorder(seen, "svc", add=False), hosts=("guard.vgpu.svc",)) as (url, ca):
        port = int(url.rsplit(":", 1)[1])
        services = {("vgpu", "guard", 443): f"127.0.0.1:{port}"}
        async with serve_double(tmp_path, store=store, services=services) as api:
            c = await AioClusterClient.from_kubeconfig(str(api.kubeconfig))
            try:
                spec = hook("svc.example.com", url, ca)
                spec["clientConfig"] = {
                    "service": {"namespace": "vgpu", "name": "guard", "path": "/validate"},
                    "caBundle": ca,
                }
                store.create(VALIDATING_WEBHOOKS, config("v", spec, kind="ValidatingWebhookConfiguration"))
                await c.create(PODS, pod("ok"))
                other_ca = base64.b64encode(make_serving_tls().ca_pem).decode()
                spec["clientConfig"]["caBundle"] = other_ca
                cur = store.get(VALIDATING_WEBHOOKS, "v")
                cur["webhooks"][0]["clientConfig"]["caBundle"] = other_ca
                store.replace(VALIDATING_WEBHOOKS, cur)
                with pytest.raises(Unavailable, match="certificate verify failed"):
                    await c.create(PODS, pod("bad-ca"))
            finally:
                await c.close()
    assert [req["name"] for _, req in seen] == ["ok"]


def test_v1_configurations_are_defaulted_and_validated(store: Store) -> None:
    # admissionregistration/v1 defaults.go and validation.go: sideEffects None|NoneOnDryRun only.
    made = store.create(MUTATING_WEBHOOKS, config("m", hook("ok.example.com", "https://127.0.0.1:1", "")))
    h = made["webhooks"][0]
    assert (h["failurePolicy"], h["matchPolicy"], h["timeoutSeconds"], h["reinvocationPolicy"]) == (
        "Fail",
        "Equivalent",
        10,
        "Never",
    )
    with pytest.raises(Invalid, match='sideEffects: Unsupported value: "Some"'):
        store.create(
            MUTATING_WEBHOOKS,
            config("bad", hook("bad.example.com", "https://127.0.0.1:1", "", sideEffects="Some")),
        )
    with pytest.raises(Invalid, match="'https' is the only allowed URL scheme"):
        store.create(MUTATING_WEBHOOKS, config("http", hook("http.example.com", "http://127.0.0.1:1", "")))


def test_warning_recorder_keeps_texts_as_the_api_server_does() -> None:
    # endpoints/filters/warning.go: past 4096 characters every text is cut to 256 runes, then texts
    # are kept until 4096 again (checked against kube-apiserver 1.20 by tests/contract/test_admission.py).
    from vgpu_guard.apidouble._webhook_warnings import recorded as _recorded

    assert _recorded(["a", "b"]) == ["a", "b"]
    many = [f"{i:02d}" + "é" * 298 for i in range(20)]
    kept = _recorded(many)
    assert len(kept) == 16 and all(len(t) == 256 for t in kept) and kept[0].startswith("00")
