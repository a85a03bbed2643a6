"""What kubectl and Helm ask beyond plain JSON, on the double and on kube-apiserver 1.20.

Content negotiation (protobuf and Table Accept headers), OpenAPI v2 (the document kubectl
validates and explains with), strategic merge patch of a pod label (kubectl label), server-side
apply (Helm v4), impersonation (kubectl --as) and the streaming-list watch (kubectl wait).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.contract.conftest import Contract, Side
from tests.contract.crds import crd, installed, spec_schema
from tests.contract.raw import RawClient, Reply

pytestmark = pytest.mark.asyncio(loop_scope="session")
Obj = dict[str, Any]
PROTOBUF = "application/vnd.kubernetes.protobuf"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
PROTO_V2 = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


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


def printed_crd() -> Obj:
    body = crd(
        "printers",
        "Printer",
        spec_schema(
            {
                "node": {"type": "string"},
                "count": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string"}},
            }
        ),
        group="clients.contract.vgpu-guard.io",
    )
    body["spec"]["versions"][0]["additionalPrinterColumns"] = [
        {"name": "Node", "type": "string", "jsonPath": ".spec.node"},
        {"name": "Count", "type": "integer", "jsonPath": ".spec.count", "description": "How many."},
        {"name": "First-Tag", "type": "string", "jsonPath": ".spec.tags[0]", "priority": 1},
        {"name": "Missing", "type": "integer", "jsonPath": ".spec.nothing"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    return body


async def test_custom_resources_as_tables_and_protobuf_refused(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        async with installed(side, printed_crd()):
            path = f"/apis/clients.contract.vgpu-guard.io/v1/namespaces/{ns}/printers"
            obj = {"apiVersion": "clients.contract.vgpu-guard.io/v1", "kind": "Printer", "metadata": {"name": "p"},
                   "spec": {"node": "n1", "count": 3, "tags": ["a", "b"]}}  # fmt: skip
            assert (await side.admin.post(path, obj)).status == 201
            table = (await side.admin.request("GET", path, accept=TABLE)).body
            one = (await side.admin.request("GET", path + "/p", accept=TABLE)).body
            refused = await side.admin.request("GET", path, accept=PROTOBUF)
            fallback = await side.admin.request("GET", path, accept=f"{PROTOBUF}, application/json")
            return {
                "protobuf_or_json": shape(fallback),
                "kind": (table["kind"], table["apiVersion"]),
                "columns": table["columnDefinitions"],
                "cells": [row["cells"][:-1] for row in table["rows"]],  # the Age cell is a duration
                "object": [
                    (row["object"]["kind"], row["object"]["metadata"]["name"]) for row in table["rows"]
                ],
                "one": [row["cells"][:-1] for row in one["rows"]],
                "protobuf_only": refused.status,
            }

    await contract.agree(probe)


async def test_pods_namespaces_and_nodes_as_tables(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
               "spec": {"containers": [{"name": "c", "image": "nginx"}, {"name": "d", "image": "nginx"}],
                        "readinessGates": [{"conditionType": "example.com/ready"}]}}  # fmt: skip
        assert (await side.admin.post(f"/api/v1/namespaces/{ns}/pods", pod)).status == 201
        pods = (await side.admin.request("GET", f"/api/v1/namespaces/{ns}/pods", accept=TABLE)).body
        one = (await side.admin.request("GET", f"/api/v1/namespaces/{ns}", accept=TABLE)).body
        nodes = (await side.admin.request("GET", "/api/v1/nodes", accept=TABLE)).body
        age = 4  # the Age cell is a duration: left out
        return {
            "pods": (
                pods["kind"],
                pods["columnDefinitions"],
                [r["cells"][:age] + r["cells"][age + 1 :] for r in pods["rows"]],
            ),
            "pod_objects": [(r["object"]["kind"], r["object"]["metadata"]["name"]) for r in pods["rows"]],
            "namespace": (one["columnDefinitions"], [r["cells"][:2] for r in one["rows"]]),
            "node_columns": nodes["columnDefinitions"],
        }

    await contract.agree(probe)


async def test_an_accept_with_nothing_served_is_not_acceptable(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        return (await side.admin.request("GET", "/api/v1/namespaces", accept="text/html")).status_shape

    await contract.agree(probe)


def ledger_like_crd() -> Obj:
    schema = {
        "type": "object",
        "description": "A ledger-like object.",
        "required": ["spec"],
        "properties": {
            "spec": {
                "type": "object",
                "required": ["nodeName"],
                "properties": {
                    "nodeName": {"type": "string", "description": "The node.", "minLength": 1},
                    "entries": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["uid"],
                        "items": {
                            "type": "object",
                            "required": ["uid"],
                            "properties": {"uid": {"type": "string"}},
                        },
                    },
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    "size": {
                        "x-kubernetes-int-or-string": True,
                        "anyOf": [{"type": "integer"}, {"type": "string"}],
                    },
                    "maybe": {"type": "string", "nullable": True},
                },
            }
        },
    }
    return crd("ledgerlikes", "LedgerLike", schema, group="openapi.contract.vgpu-guard.io", scope="Cluster")


async def _openapi_definitions(side: Side, name: str) -> Obj:
    """The v2 document once ``name`` is published (the real server publishes CRDs a moment later)."""
    for _ in range(300):
        doc = (await side.admin.request("GET", "/openapi/v2", accept="application/json", seconds=60)).body
        if isinstance(doc, dict) and name in doc.get("definitions", {}):
            definitions: Obj = doc["definitions"]
            return definitions
        await asyncio.sleep(0.1)
    raise AssertionError(f"{side.name}: {name} never appeared in /openapi/v2")


async def test_openapi_v2_definitions_of_served_kinds(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        async with installed(side, ledger_like_crd()):
            defs = await _openapi_definitions(side, "io.vgpu-guard.contract.openapi.v1.LedgerLike")
            v3 = await side.admin.get("/openapi/v3")
            proto = await side.admin.request("GET", "/openapi/v2", accept=PROTO_V2, seconds=60)
            refused = await side.admin.request("GET", "/openapi/v2", accept="text/html")
            return {
                "pod": sorted(defs["io.k8s.api.core.v1.Pod"]["properties"]),
                "pod_spec": sorted(defs["io.k8s.api.core.v1.PodSpec"]["properties"]),
                "node": sorted(defs["io.k8s.api.core.v1.Node"]["properties"]),
                "ledger_like": defs["io.vgpu-guard.contract.openapi.v1.LedgerLike"],
                "ledger_like_list": defs["io.vgpu-guard.contract.openapi.v1.LedgerLikeList"],
                "v3": v3.status,
                "protobuf": (proto.status, proto.content_type),
                "not_acceptable": (refused.status, refused.body),
            }

    await contract.agree(probe)


async def test_strategic_merge_patch_of_a_pod_label(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "1"}},
               "spec": {"containers": [{"name": "c", "image": "nginx"}]}}  # fmt: skip
        assert (await side.admin.post(f"/api/v1/namespaces/{ns}/pods", pod)).status == 201
        patch = {"metadata": {"labels": {"tier": "gpu", "a": None}}}
        reply = await side.admin.patch(
            f"/api/v1/namespaces/{ns}/pods/p", patch, "application/strategic-merge-patch+json"
        )
        return {"http": reply.status, "labels": reply.body["metadata"].get("labels")}

    await contract.agree(probe)


async def test_server_side_apply_creates_updates_and_needs_a_manager(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        path = f"/api/v1/namespaces/{ns}/configmaps/applied"

        def config(**data: str) -> Obj:
            return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": data}

        async def apply(body: Obj, **query: str) -> Reply:
            return await side.admin.request(
                "PATCH",
                path,
                json_body=body,
                content_type="application/apply-patch+yaml",
                query=query or None,
            )

        created = await apply(config(a="1", b="2"), fieldManager="helm")
        updated = await apply(config(b="3"), fieldManager="helm", force="true")
        nameless = await apply(config(c="4"))
        return {
            "created": (created.status, created.body.get("data")),
            "updated": (updated.status, updated.body.get("data")),
            "no_manager": nameless.status_shape,
        }

    await contract.agree(probe)


async def review(client: RawClient, headers: dict[str, str], **attrs: str) -> Obj:
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attrs}}  # fmt: skip
    reply = await client.request("POST", SSAR, json_body=body, headers=headers)
    if reply.status != 201:
        return {"http": reply.status, "body": reply.body}
    return {"http": reply.status, "allowed": reply.body["status"].get("allowed")}


async def test_impersonated_self_subject_access_reviews(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        nobody = await side.service_account_client(ns, "nobody")
        try:
            as_sa = {"Impersonate-User": f"system:serviceaccount:{ns}:default"}
            return {
                "sa_list_pods": await review(side.admin, as_sa, namespace=ns, verb="list", resource="pods"),
                "masters": await review(
                    side.admin,
                    {"Impersonate-User": "carol", "Impersonate-Group": "system:masters"},
                    verb="delete",
                    resource="nodes",
                ),
                "not_allowed_to_impersonate": await review(
                    nobody, as_sa, namespace=ns, verb="list", resource="pods"
                ),
                "group_without_user": await review(
                    side.admin, {"Impersonate-Group": "devs"}, verb="get", resource="pods"
                ),
            }
        finally:
            await nobody.close()

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
