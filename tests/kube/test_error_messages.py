"""Every error that leaves the cluster-access layer is one line an operator can act on: the verb,
the resource (group/version/plural), the object, the HTTP code and reason, the server's message and,
for the common cases, what to check. Golden strings against both adapters: the in-process double
client, and the production ``AioClusterClient`` over HTTPS (the served double) or over a fake
aiohttp server that answers what a test tells it to.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from kubernetes.aio import client as kclient

from tests.apidouble.objects import node, pod
from tests.apidouble_support.faults import FaultPlan, conflict_error, timeout_error, unavailable_error
from tests.apidouble_support.http.server import serve_double
from tests.apidouble_support.rbac import RBACAuthorizer
from tests.apidouble_support.tokens import kubeconfig_for
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.apidouble.frontend import Frontend
from vgpu_guard.apidouble.identity import service_account
from vgpu_guard.apidouble.store import Store
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.errors import (
    AlreadyExists,
    Conflict,
    Expired,
    Forbidden,
    KubeError,
    NotFound,
    Request,
    Unavailable,
    error_from_status,
)
from vgpu_guard.kube.informer import Informer
from vgpu_guard.kube.resources import LEDGERS, NODES, PODS, QUEUES

Obj = dict[str, Any]
READER = service_account("tenant", "reader")

NO_QUEUES_CRD = "; the resource is not served: is its CRD queues.scheduling.volcano.sh installed?"
MISSING_POD = 'get v1/pods default/nope: HTTP 404 NotFound: pods "nope" not found; Pod default/nope not found'
NO_NAMESPACE = (
    'create v1/pods ghost/p: HTTP 404 NotFound: namespaces "ghost" not found; namespace ghost not found'
)
FORBIDDEN_NODES = (
    'list v1/nodes: HTTP 403 Forbidden: nodes is forbidden: User "system:serviceaccount:tenant:reader" '
    'cannot list resource "nodes" in API group "" at the cluster scope; '
    "forbidden: system:serviceaccount:tenant:reader may not list nodes (check the chart's RBAC)"
)
FORBIDDEN_BIND = (
    'create v1/pods/binding default/p: HTTP 403 Forbidden: pods "p" is forbidden: '
    'User "system:serviceaccount:tenant:reader" cannot create resource "pods/binding" in API group "" '
    'in the namespace "default"; forbidden: system:serviceaccount:tenant:reader may not create '
    "pods/binding in namespace default (check the chart's RBAC)"
)
STALE_POD = (
    'update v1/pods default/p: HTTP 409 Conflict: Operation cannot be fulfilled on pods "p": '
    "the object has been modified; please apply your changes to the latest version and try again; "
    "conflict on Pod default/p: its resourceVersion changed; re-read it and decide again"
)
EXISTS_POD = (
    'create v1/pods default/p: HTTP 409 AlreadyExists: pods "p" already exists; Pod default/p already exists'
)


# -- both adapters over the same double ----------------------------------------------------------


@pytest.fixture(params=["memory", "https"])
async def connect(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[[Store, bool], Awaitable[Any]]]:
    """``connect(store, as_reader)``: a client of ``store`` as the admin or as READER (RBAC on)."""
    closers: list[Callable[[], Awaitable[None]]] = []
    served: list[Any] = []

    async def make(store: Store, as_reader: bool) -> Any:
        if request.param == "memory":
            if not as_reader:
                return MemoryClusterClient(store)
            frontend = Frontend(store, authorizer=RBACAuthorizer(store))
            return MemoryClusterClient(store, user=READER, frontend=frontend)
        ctx = serve_double(tmp_path, store=store, authorizer=RBACAuthorizer if as_reader else None)
        api = await ctx.__aenter__()
        served.append(ctx)
        kubeconfig = kubeconfig_for(api, READER) if as_reader else api.kubeconfig
        client = await AioClusterClient.from_kubeconfig(str(kubeconfig))
        closers.append(client.close)
        return client

    yield make
    for close in closers:
        await close()
    for ctx in served:
        await ctx.__aexit__(None, None, None)


async def failure(call: Awaitable[Any]) -> KubeError:
    with pytest.raises(KubeError) as err:
        await call
    return err.value


async def test_a_collection_that_is_not_served_names_its_crd(connect: Any, request: Any) -> None:
    client = await connect(Store(), False)
    error = await failure(client.list(QUEUES))
    assert isinstance(error, NotFound)
    said = (
        "HTTP 404 NotFound: the server could not find the requested resource"
        if request.node.callspec.params["connect"] == "memory"
        else "HTTP 404"  # an API group nothing serves: kube-apiserver answers "404 page not found"
    )
    assert str(error) == f"list scheduling.volcano.sh/v1beta1/queues: {said}{NO_QUEUES_CRD}"
    assert (error.verb, error.resource, error.name, error.namespace) == ("list", QUEUES, "", "")


async def test_a_missing_object_is_named_with_its_kind(connect: Any) -> None:
    client = await connect(Store(), False)
    error = await failure(client.get(PODS, "nope", namespace="default"))
    assert isinstance(error, NotFound) and str(error) == MISSING_POD
    assert (error.verb, error.target, error.object_ref) == ("get", "v1/pods", "default/nope")
    assert (error.code, error.reason, error.message) == (404, "NotFound", 'pods "nope" not found')


async def test_a_missing_namespace_is_named(connect: Any) -> None:
    client = await connect(Store(), False)
    error = await failure(client.create(PODS, pod("p", namespace="ghost")))
    assert str(error) == NO_NAMESPACE


async def test_conflicts_name_the_object(connect: Any) -> None:
    client = await connect(Store(), False)
    old = await client.create(PODS, pod("p"))
    exists = await failure(client.create(PODS, pod("p")))
    assert isinstance(exists, AlreadyExists) and str(exists) == EXISTS_POD
    await client.patch(PODS, "p", {"metadata": {"labels": {"x": "1"}}}, namespace="default")
    stale = await failure(client.replace(PODS, old))
    assert type(stale) is Conflict and str(stale) == STALE_POD


async def test_rbac_refusals_name_the_user_the_verb_and_the_resource(connect: Any) -> None:
    store = Store()
    store.create(PODS, pod("p"))
    client = await connect(store, True)
    listing = await failure(client.list(NODES))
    assert isinstance(listing, Forbidden) and str(listing) == FORBIDDEN_NODES
    binding = await failure(client.bind("default", "p", node="n1", annotations={}))
    assert str(binding) == FORBIDDEN_BIND
    assert (binding.verb, binding.subresource, binding.namespace) == ("create", "binding", "default")


# -- injected faults of the in-process double ----------------------------------------------------


async def test_injected_faults_carry_the_call_they_hit() -> None:
    store = Store()
    store.create(NODES, node("n1"))
    plan = FaultPlan()
    plan.add(verb="list", resource=NODES, error=unavailable_error())
    plan.add(verb="get", resource=NODES, error=timeout_error())
    plan.add(verb="replace", resource=LEDGERS, error=conflict_error("n1"))
    client = MemoryClusterClient(store, faults=plan)
    assert str(await failure(client.list(NODES))) == (
        "list v1/nodes: HTTP 503 ServiceUnavailable: injected fault: the server is currently unable to "
        "handle the request; the API server is unavailable (a retry may succeed)"
    )
    assert str(await failure(client.get(NODES, "n1"))) == (
        "get v1/nodes n1: injected fault: request timed out; "
        "the API server is slow or unreachable (a retry may succeed)"
    )
    ledger = {"apiVersion": "vgpu-guard.io/v1alpha1", "kind": "GPULedger", "metadata": {"name": "n1"}}
    assert str(await failure(client.replace(LEDGERS, ledger))) == (
        'update vgpu-guard.io/v1alpha1/gpuledgers n1: HTTP 409 Conflict: Operation cannot be fulfilled on "n1": '
        "the object has been modified; please apply your changes to the latest version and try again; "
        "conflict on GPULedger n1: its resourceVersion changed; re-read it and decide again"
    )


async def test_the_informer_names_the_missing_crd(caplog: pytest.LogCaptureFixture) -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        raise _Stop

    informer = Informer(MemoryClusterClient(Store()), QUEUES, absent_recheck_seconds=30, sleep=sleep)
    with caplog.at_level(logging.WARNING, logger="vgpu_guard.kube.informer"), pytest.raises(_Stop):
        await informer.run()
    assert [r.getMessage() for r in caplog.records] == [
        "queues: list scheduling.volcano.sh/v1beta1/queues: HTTP 404 NotFound: the server could not find "
        f"the requested resource{NO_QUEUES_CRD}; treating as empty, checking again in 30s"
    ]


class _Stop(Exception):
    """Ends the informer's loop at its first sleep."""


# -- the production adapter against answers a fake server makes up -----------------------------

Answer = tuple[int, str]  # HTTP status, body


@pytest.fixture
async def fake_api() -> AsyncIterator[Callable[[Answer], Awaitable[AioClusterClient]]]:
    """``fake_api((status, body))``: an ``AioClusterClient`` whose every request gets that answer."""
    runners: list[web.AppRunner] = []
    clients: list[AioClusterClient] = []

    async def start(answer: Answer) -> AioClusterClient:
        async def reply(_: web.Request) -> web.Response:
            return web.Response(status=answer[0], text=answer[1], content_type="application/json")

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", reply)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        client = AioClusterClient(kclient.ApiClient(kclient.Configuration(host=f"http://127.0.0.1:{port}")))
        clients.append(client)
        return client

    yield start
    for c in clients:
        await c.close()
    for r in runners:
        await r.cleanup()


def status(code: int, reason: str, message: str) -> str:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code}
    return json.dumps(body | {"reason": reason, "message": message})


@pytest.mark.parametrize(
    ("answer", "kind", "text"),
    [
        (
            (401, status(401, "Unauthorized", "Unauthorized")),
            KubeError,
            "get v1/nodes n1: HTTP 401 Unauthorized: Unauthorized; the API server did not accept our "
            "credentials: check the kubeconfig's user or the token",
        ),
        (
            (429, status(429, "TooManyRequests", "Too many requests, please try again later.")),
            Unavailable,
            "get v1/nodes n1: HTTP 429 TooManyRequests: Too many requests, please try again later.; "
            "the API server is overloaded (a retry may succeed)",
        ),
        (
            (503, "service unavailable"),
            Unavailable,
            "get v1/nodes n1: HTTP 503; the API server is unavailable (a retry may succeed)",
        ),
        (
            (404, "404 page not found"),
            NotFound,
            "get v1/nodes n1: HTTP 404; the resource is not served: is v1 enabled on this API server?",
        ),
        (
            (200, "{not json"),
            Unavailable,
            "get v1/nodes n1: HTTP 200: the server sent invalid JSON (9 bytes)",
        ),
    ],
)
async def test_answers_of_a_fake_server(
    fake_api: Any, answer: Answer, kind: type[KubeError], text: str
) -> None:
    client = await fake_api(answer)
    error = await failure(client.get(NODES, "n1"))
    assert type(error) is kind and str(error) == text


async def test_a_watch_error_event_names_the_watch(fake_api: Any) -> None:
    gone = status(410, "Expired", "too old resource version: 5 (10)")
    client = await fake_api((200, json.dumps({"type": "ERROR", "object": json.loads(gone)}) + "\n"))
    with pytest.raises(Expired) as err:
        async for _ in client.watch(PODS, resource_version="5", namespace="default"):
            pass
    assert str(err.value) == (
        "watch v1/pods in namespace default: HTTP 410 Expired: too old resource version: 5 (10)"
    )
    assert err.value.namespace == "default"


async def test_an_unreachable_server_says_so(fake_api: Any) -> None:
    client = await fake_api((200, "{}"))
    client.api.configuration.host = "http://127.0.0.1:9"  # nothing listens on the discard port
    error = await failure(client.list(PODS, namespace="team-a"))
    assert type(error) is Unavailable
    assert str(error) == (
        "list v1/pods in namespace team-a: cannot connect to 127.0.0.1:9: Connection refused; "
        "the connection to the API server failed (a retry may succeed)"
    )


# -- the mapping itself ---------------------------------------------------------------------------


def test_an_error_about_nothing_is_the_servers_message() -> None:
    bare = error_from_status(404, {"reason": "NotFound", "message": 'pods "p" not found', "code": 404})
    assert str(bare) == 'pods "p" not found' and bare.verb == ""


def test_a_webhook_refusal_gets_no_rbac_remedy() -> None:
    denied = 'admission webhook "pods.vgpu-guard.io" denied the request: [vgpu-memory] too much'
    error = error_from_status(
        403,
        {"reason": "Forbidden", "message": denied, "code": 403},
        Request("create", PODS, "p", "default"),
    )
    assert str(error) == f"create v1/pods default/p: HTTP 403 Forbidden: {denied}"


def test_a_conflict_that_is_not_a_stale_version_names_only_the_object() -> None:
    said = 'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "n1"'
    error = error_from_status(
        409,
        {"reason": "Conflict", "message": said, "code": 409},
        Request("create", PODS, "p", "default", "binding"),
    )
    assert (
        str(error)
        == f"create v1/pods/binding default/p: HTTP 409 Conflict: {said}; conflict on Pod default/p"
    )


def test_a_non_resource_path_is_named() -> None:
    error = error_from_status(404, None, Request("get", path="/version"))
    assert str(error) == "get /version: HTTP 404; the API server does not serve this path"
