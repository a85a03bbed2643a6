"""The legacy ``bindings`` resource: the same bind as pods/binding, through another door.

Sources: kube-apiserver 1.20 pkg/registry/core/pod/storage/storage.go (``LegacyBindingREST.Create``
-> ``BindingREST.Create`` -> ``assignPod``), pkg/registry/core/rest/storage_core.go (registered as
"bindings"), staging/.../endpoints/handlers/create.go (no name in the URL: the object's) and
requestinfo.go (RBAC: ``create`` on ``bindings``, no name). The answers are 1.20.2's, probed in
tests/contract/test_bindings.py. Tests taking ``client`` run on both adapters.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.apidouble_support.admission import AdmissionChain
from tests.apidouble_support.http.server import RunningDouble, serve_double
from tests.apidouble_support.rbac import ROLE_BINDINGS, ROLES, RBACAuthorizer
from tests.apidouble_support.tokens import kubeconfig_for
from tests.contract.raw import RawClient
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.apidouble.frontend import Frontend
from vgpu_guard.apidouble.identity import service_account
from vgpu_guard.apidouble.store import Store
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.errors import Conflict, Forbidden, KubeError, NotFound
from vgpu_guard.kube.resources import BINDINGS, NAMESPACES, PODS, VALIDATING_WEBHOOKS

from .objects import pod
from .test_admission import config, hook, recorder, webhook_server

Obj = dict[str, Any]
SUCCESS = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
ASSIGNED = 'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "gpu-1"'


def binding(name: str, node: str, **annotations: str) -> Obj:
    meta: Obj = {"name": name}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Binding", "metadata": meta, "target": {"kind": "Node", "name": node}}


async def test_a_binding_through_bindings_binds_the_pod_it_names(client: Any) -> None:
    # storage.go setPodHostAndAnnotations, reached through LegacyBindingREST: node, annotations
    # over the pod's, PodScheduled True; the answer is a Status Success with code 201.
    body = pod("p")
    body["metadata"]["annotations"] = {"keep": "me", "over": "old"}
    await client.create(PODS, body)
    answer = await client.create(BINDINGS, binding("p", "gpu-1", over="new", y="2"), namespace="default")
    assert answer == SUCCESS
    out = await client.get(PODS, "p", namespace="default")
    assert out["spec"]["nodeName"] == "gpu-1"
    assert out["metadata"]["annotations"] == {"keep": "me", "over": "new", "y": "2"}
    scheduled = [c for c in out["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert [(c["status"], c["lastProbeTime"]) for c in scheduled] == [("True", None)]


async def test_one_bind_two_doors_so_either_second_binding_conflicts(client: Any) -> None:
    # Both doors end in assignPod: once bound through one, the other answers the same 409.
    await client.create(PODS, pod("p"))
    await client.create(BINDINGS, binding("p", "gpu-1"), namespace="default")
    with pytest.raises(Conflict) as through_subresource:
        await client.bind("default", "p", node="gpu-2", annotations={})
    with pytest.raises(Conflict) as through_bindings:
        await client.create(BINDINGS, binding("p", "gpu-1"), namespace="default")
    assert through_subresource.value.message == through_bindings.value.message == ASSIGNED
    assert (await client.get(PODS, "p", namespace="default"))["spec"]["nodeName"] == "gpu-1"


async def test_bindings_refusals_are_the_binds(client: Any) -> None:
    # NotFound from the pod's GuaranteedUpdate, the store's KeyFunc without a name (400),
    # ValidatePodBinding as a plain 500, NamespaceLifecycle for a missing namespace.
    with pytest.raises(NotFound) as ghost:
        await client.create(BINDINGS, binding("ghost", "gpu-1"), namespace="default")
    assert ghost.value.message == 'pods "ghost" not found'
    with pytest.raises(KubeError) as no_name:
        await client.create(BINDINGS, binding("", "gpu-1"), namespace="default")
    assert (no_name.value.code, no_name.value.reason, no_name.value.message) == (
        400,
        "BadRequest",
        "Name parameter required.",
    )
    await client.create(PODS, pod("p"))
    with pytest.raises(KubeError) as no_target:
        await client.create(BINDINGS, binding("p", ""), namespace="default")
    assert (no_target.value.code, no_target.value.message) == (500, "target.name: Required value")
    with pytest.raises(NotFound) as nowhere:
        await client.create(BINDINGS, binding("p", "gpu-1"), namespace="nowhere")
    assert nowhere.value.message == 'namespaces "nowhere" not found'
    assert "nodeName" not in (await client.get(PODS, "p", namespace="default"))["spec"]


async def test_a_dry_run_binding_changes_nothing_but_is_refused_as_the_real_one(client: Any) -> None:
    # GuaranteedUpdate with dryRun still reads the pod and runs the update function.
    await client.create(PODS, pod("p"))
    assert await client.create(BINDINGS, binding("p", "gpu-1"), namespace="default", dry_run=True) == SUCCESS
    assert "nodeName" not in (await client.get(PODS, "p", namespace="default"))["spec"]
    await client.bind("default", "p", node="gpu-1", annotations={})
    with pytest.raises(Conflict, match="already assigned"):
        await client.create(BINDINGS, binding("p", "gpu-2"), namespace="default", dry_run=True)


async def test_a_terminating_namespace_refuses_the_bindings_resource(store: Store) -> None:
    # lifecycle/admission.go: Forbidden on the request's resource (bindings), with its cause.
    store.create(NAMESPACES, {"metadata": {"name": "going", "finalizers": ["example.com/hold"]}})
    store.create(PODS, pod("p", namespace="going"))
    store.delete(NAMESPACES, "going")
    with pytest.raises(Forbidden) as err:
        store.bind("going", None, binding("p", "gpu-1"))
    assert err.value.message == (
        'bindings "p" is forbidden: unable to create new content in namespace going because it is being terminated'
    )
    details = err.value.status["details"]
    assert (details["kind"], details["name"]) == ("bindings", "p")
    assert details["causes"] == [
        {
            "reason": "NamespaceTerminating",
            "message": "namespace going is being terminated",
            "field": "metadata.namespace",
        }
    ]


def test_pending_names_each_door_as_admission_sees_it(store: Store) -> None:
    # Admission attributes: resource bindings without a subresource, or pods with "binding";
    # kind Binding v1 and the pod's name for both (the Binding's own for the legacy door).
    store.create(PODS, pod("p"))
    legacy = store.prepare.bind("default", None, binding("p", "gpu-1"))
    door = store.prepare.bind("default", "p", binding("p", "gpu-1"))
    assert (legacy.binds, legacy.admitted_resource, legacy.subresource, legacy.name) == (
        True,
        "bindings",
        "",
        "p",
    )
    assert (door.binds, door.admitted_resource, door.subresource, door.name) == (True, "pods", "binding", "p")
    assert legacy.kind == door.kind == ("", "v1", "Binding")


def test_pods_binding_needs_the_urls_name_in_the_binding(store: Store) -> None:
    # BindingREST.Create: name != binding.Name is a 400, an empty one included (1.20.2 refuses it).
    store.create(PODS, pod("p"))
    for meta in ({}, {"name": "other"}):
        with pytest.raises(KubeError) as err:
            store.bind("default", "p", {"metadata": meta, "target": {"name": "gpu-1"}})
        assert (err.value.code, err.value.message) == (
            400,
            "name in URL does not match name in Binding object",
        )


@pytest.fixture(params=["memory", "aio"])
async def admitted(request: pytest.FixtureRequest, store: Store, tmp_path: Path) -> AsyncIterator[Any]:
    """A client whose writes meet the webhooks stored in ``store`` (in-process or over HTTPS)."""
    if request.param == "memory":
        chain = AdmissionChain(store)
        try:
            yield MemoryClusterClient(store, frontend=Frontend(store, admission=chain))
        finally:
            await chain.close()  # its webhook calls' connection pool
        return
    async with serve_double(tmp_path, store=store) as api:
        c = await AioClusterClient.from_kubeconfig(str(api.kubeconfig))
        try:
            yield c
        finally:
            await c.close()


def _rule(resource: str) -> list[Obj]:
    return [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": [resource]}]


async def test_webhooks_see_the_door_they_registered_for(store: Store, admitted: Any) -> None:
    # generic/webhook.go rules: "bindings" and "*" match the legacy door only; "pods/binding" and
    # "pods/*" the subresource only (as 1.20.2 calls them, tests/contract/test_bindings.py).
    seen: list[tuple[str, Obj]] = []
    async with webhook_server(recorder(seen, "", add=False)) as (url, ca):
        hooks = [
            hook(f"{tag}.example.com", url, ca, rules=_rule(resource))
            for tag, resource in (
                ("legacy", "bindings"),
                ("sub", "pods/binding"),
                ("all", "*"),
                ("pods", "pods/*"),
            )
        ]
        store.create(VALIDATING_WEBHOOKS, config("v", *hooks, kind="ValidatingWebhookConfiguration"))
        store.create(PODS, pod("p"))
        store.create(PODS, pod("q"))
        await admitted.create(BINDINGS, binding("p", "gpu-1", a="1"), namespace="default")
        legacy = [req for _, req in seen]
        seen.clear()
        await admitted.bind("default", "q", node="gpu-1", annotations={})
        sub = [req for _, req in seen]
    assert len(legacy) == 2 and len(sub) == 2  # two of the four hooks each
    for req in legacy:
        assert (
            req["resource"]
            == req["requestResource"]
            == {"group": "", "version": "v1", "resource": "bindings"}
        )
        assert "subResource" not in req and "requestSubResource" not in req
        assert req["kind"] == req["requestKind"] == {"group": "", "version": "v1", "kind": "Binding"}
        assert (req["name"], req["namespace"], req["operation"]) == ("p", "default", "CREATE")
        assert req["object"]["metadata"]["annotations"] == {"a": "1"}
    for req in sub:
        assert req["resource"]["resource"] == "pods" and req["subResource"] == "binding"
        assert req["name"] == "q"


async def test_a_validating_webhook_for_bindings_refuses_the_legacy_door(store: Store, admitted: Any) -> None:
    # A denial of the bindings CREATE leaves the pod unbound; the pods/binding door does not meet it.
    async def deny(req: Obj) -> Obj:
        return {"allowed": False, "status": {"code": 403, "message": f"no {req['name']}"}}

    async with webhook_server(deny) as (url, ca):
        deny_hook = hook("deny.example.com", url, ca, rules=_rule("bindings"))
        store.create(VALIDATING_WEBHOOKS, config("v", deny_hook, kind="ValidatingWebhookConfiguration"))
        store.create(PODS, pod("p"))
        with pytest.raises(Forbidden) as denied:
            await admitted.create(BINDINGS, binding("p", "gpu-1"), namespace="default")
        assert denied.value.message == 'admission webhook "deny.example.com" denied the request: no p'
        assert "nodeName" not in store.get(PODS, "p", namespace="default")["spec"]
        await admitted.bind("default", "p", node="gpu-1", annotations={})
    assert store.get(PODS, "p", namespace="default")["spec"]["nodeName"] == "gpu-1"


# -- RBAC ----------------------------------------------------------------------------------------
LEGACY_BINDER = service_account("default", "legacy-binder")


def _grant(store: Store, name: str, resource: str) -> None:
    rule = {"apiGroups": [""], "resources": [resource], "verbs": ["create"]}
    store.create(ROLES, {"metadata": {"name": name, "namespace": "default"}, "rules": [rule]})
    ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}
    subject = {"kind": "ServiceAccount", "name": "legacy-binder", "namespace": "default"}
    store.create(
        ROLE_BINDINGS,
        {"metadata": {"name": name, "namespace": "default"}, "roleRef": ref, "subjects": [subject]},
    )


@pytest.fixture(params=["memory", "aio"])
async def as_binder(request: pytest.FixtureRequest, store: Store, tmp_path: Path) -> AsyncIterator[Any]:
    """A ServiceAccount allowed ``create`` on ``bindings`` only (and on pods/binding by resourceName
    p, which a create on the collection never carries)."""
    _grant(store, "bindings", "bindings")
    store.create(PODS, pod("p"))
    store.create(PODS, pod("q"))
    if request.param == "memory":
        frontend = Frontend(store, authorizer=RBACAuthorizer(store))
        yield MemoryClusterClient(store, user=LEGACY_BINDER, frontend=frontend)
        return
    async with serve_double(tmp_path, store=store, authorizer=RBACAuthorizer) as api:
        c = await AioClusterClient.from_kubeconfig(str(kubeconfig_for(api, LEGACY_BINDER)))
        try:
            yield c
        finally:
            await c.close()


async def test_rbac_create_on_bindings_is_not_create_on_pods_binding(store: Store, as_binder: Any) -> None:
    # requestinfo.go: POST .../bindings is create on resource "bindings" with no name; 1.20.2's
    # forbiddenMessage for each door (tests/contract/test_bindings.py).
    user = LEGACY_BINDER.username
    await as_binder.create(BINDINGS, binding("p", "gpu-1"), namespace="default")
    with pytest.raises(Forbidden) as sub:
        await as_binder.bind("default", "q", node="gpu-1", annotations={})
    assert sub.value.message == (
        f'pods "q" is forbidden: User "{user}" cannot create resource "pods/binding" in API group "" '
        'in the namespace "default"'
    )
    store.delete(ROLES, "bindings", namespace="default")
    _grant(store, "sub", "pods/binding")
    with pytest.raises(Forbidden) as legacy:
        await as_binder.create(BINDINGS, binding("q", "gpu-1"), namespace="default")
    assert legacy.value.message == (
        f'bindings is forbidden: User "{user}" cannot create resource "bindings" in API group "" '
        'in the namespace "default"'
    )
    assert legacy.value.status["details"] == {"kind": "bindings"}
    await as_binder.bind("default", "q", node="gpu-1", annotations={})


# -- HTTP ----------------------------------------------------------------------------------------
async def _call(api: RunningDouble, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    raw = RawClient.from_kubeconfig(api.kubeconfig)
    try:
        reply = await raw.request(method, path, json_body=body)
    finally:
        await raw.close()
    return reply.status, reply.body


async def test_http_serves_create_only_and_lists_it_in_discovery(double: RunningDouble) -> None:
    # 1.20.2: discovery lists "bindings" (verbs ["create"]); every other method on the collection
    # is go-restful's 405; a name after it, or the cluster scope, is a path nothing serves.
    status, core = await _call(double, "GET", "/api/v1")
    entry = next(r for r in core["resources"] if r["name"] == "bindings")
    assert {k: entry[k] for k in ("namespaced", "kind", "verbs")} == {
        "namespaced": True,
        "kind": "Binding",
        "verbs": ["create"],
    }
    for method in ("GET", "PUT", "PATCH", "DELETE"):
        status, body = await _call(double, method, "/api/v1/namespaces/default/bindings", {})
        assert (status, body["reason"], body["details"]) == (405, "MethodNotAllowed", {}), method
    for path in ("/api/v1/namespaces/default/bindings/p", "/api/v1/bindings"):
        status, body = await _call(double, "GET", path)
        assert (status, body["message"]) == (404, "the server could not find the requested resource"), path
    status, body = await _call(double, "POST", "/api/v1/namespaces/default/bindings", [1])
    assert status == 400 and body["message"].startswith(
        "the object provided is unrecognized (must be of type Binding): couldn't get version/kind"
    )
    status, body = await _call(
        double, "POST", "/api/v1/namespaces/default/bindings", {**binding("p", "n"), "kind": "Pod"}
    )
    assert (status, body["message"]) == (
        400,
        'Pod in version "v1" cannot be handled as a Binding: converting (v1.Pod) to (core.Binding): '
        "unknown conversion",
    )
