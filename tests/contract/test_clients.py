"""What kubectl and Helm ask beyond plain JSON, on the double and on kube-apiserver 1.20.

The double serves JSON only (issue 37 item 6): kubectl's and Helm's fidelity (protobuf, Tables,
OpenAPI, strategic merge patch, server-side apply, impersonation) is what the real control plane
proves (tests/e2e/test_clients.py runs them there). Here: a protobuf Accept with a JSON
alternative, an Accept nothing serves, the streaming-list watch (kubectl wait), and the double's
refusals of what the real server serves, which must take the Status form kube-apiserver gives
its own refusals (tests/apidouble/test_refusals.py pins the double's words).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.contract.conftest import Contract, Side
from tests.contract.crds import crd, installed, spec_schema
from tests.contract.raw import Reply

pytestmark = pytest.mark.asyncio(loop_scope="session")
Obj = dict[str, Any]
PROTOBUF = "application/vnd.kubernetes.protobuf"
SMP = "application/strategic-merge-patch+json"
CLIENTS = "clients.contract.vgpu-guard.io"
# A JSON conversion no server makes: past go-restful's route check, refused by the handler.
UNKNOWN_TABLE = "application/json;as=Table;v=v9;g=meta.k8s.io"


def shape(reply: Reply) -> Obj:
    body = reply.body if isinstance(reply.body, dict) else {}
    return {"http": reply.status, "content_type": reply.content_type, "kind": body.get("kind")}


async def test_protobuf_with_a_json_alternative_is_answered_in_json(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        reply = await side.admin.request(
            "GET", f"/api/v1/namespaces/{ns}/pods", accept=f"{PROTOBUF}, application/json"
        )
        return shape(reply)

    await contract.agree(probe)


async def test_an_accept_with_nothing_served_is_not_acceptable(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        return (await side.admin.request("GET", "/api/v1/namespaces", accept="text/html")).status_shape

    await contract.agree(probe)


def refusal_form(reply: Reply) -> Obj:
    """A refusal as a client parses it: HTTP code, content type, the body's keys and Status fields,
    and the message up to its list (what each server accepts differs; the form must not)."""
    body = reply.body if isinstance(reply.body, dict) else {}
    fields = {key: body.get(key) for key in ("kind", "apiVersion", "status", "reason", "code")}
    message = str(body.get("message", "")).partition(": ")[0]
    return {"http": reply.status, "content_type": reply.content_type, "keys": sorted(body), **fields,
            "message": message}  # fmt: skip


async def test_the_doubles_refusals_take_the_api_servers_form(contract: Contract) -> None:
    """What the real server serves and the double refuses (a protobuf-only Accept, a strategic
    merge patch of a ConfigMap, /openapi/v2): the double's refusal has the form the real server
    gives its own refusal of the kind: 406 for an Accept it cannot meet (a Table version it does not
    know), 415 for a patch
    type a resource does not take (strategic merge of a custom resource), 404 with the index of its
    paths for a path it does not serve (/openapi/v3 on 1.20)."""

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
        assert (await side.admin.post(f"/api/v1/namespaces/{ns}/configmaps", config_map)).status == 201
        cm = f"/api/v1/namespaces/{ns}/configmaps/c"
        open_schema = spec_schema({}, **{"x-kubernetes-preserve-unknown-fields": True})
        async with installed(side, crd("refusals", "Refusal", open_schema, group=CLIENTS)):
            cr = f"/apis/{CLIENTS}/v1/namespaces/{ns}/refusals"
            obj = {"apiVersion": f"{CLIENTS}/v1", "kind": "Refusal", "metadata": {"name": "r"}, "spec": {}}
            assert (await side.admin.post(cr, obj)).status == 201
            served = {
                "406": await side.admin.request("GET", cm, accept=PROTOBUF),
                "415": await side.admin.patch(cm, {"data": {"k": "v"}}, SMP),
                "404": await side.admin.request("GET", "/openapi/v2", seconds=60),
            }
            refused = {
                "406": await side.admin.request("GET", cm, accept=UNKNOWN_TABLE),
                "415": await side.admin.patch(f"{cr}/r", {"spec": {"k": "v"}}, SMP),
                "404": await side.admin.get("/openapi/v3"),
            }
        if side.name == "real":  # it serves what the double refuses, and refuses the others
            assert {key: reply.status for key, reply in served.items()} == {
                "406": 200,
                "415": 200,
                "404": 200,
            }
            return {key: refusal_form(reply) for key, reply in refused.items()}
        return {key: refusal_form(reply) for key, reply in served.items()}

    await contract.agree(probe)


async def test_a_streaming_list_watch_is_refused(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        status, events, body = await side.admin.watch(
            f"/api/v1/namespaces/{ns}/pods",
            seconds=3,
            sendInitialEvents="true",
            resourceVersionMatch="NotOlderThan",
            allowWatchBookmarks="true",
        )
        return {"http": status, "events": len(events), "message": (body or {}).get("message")}

    await contract.agree(probe)
