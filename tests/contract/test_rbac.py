"""RBAC: what an identity without rights is told, grants taking effect, authentication failures,
and SelfSubjectAccessReview.

A ServiceAccount the probe creates has no rights on either side (the real server's bootstrap
policy gives it discovery and access reviews only). Grants are Roles, ClusterRoles and bindings
the probe creates; cluster-scoped ones carry the probe's namespace in their name and are deleted
at the end. The real server's RBAC authorizer reads them through an informer, so a grant takes
effect a moment later there: probes poll (``until_status``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.contract.conftest import Contract, Side
from tests.contract.crds import GROUP, crd, installed, spec_schema
from tests.contract.raw import RawClient, Reply

pytestmark = pytest.mark.asyncio(loop_scope="session")

Obj = dict[str, Any]
RBAC = "/apis/rbac.authorization.k8s.io/v1"
REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


def shape(reply: Reply) -> Obj:
    """Status and details of a refusal (or just the code of a success)."""
    if reply.status < 400:
        return {"http": reply.status}
    body = reply.body if isinstance(reply.body, dict) else {}
    return {**reply.status_shape, "details": body.get("details")}


async def until_status(call: Any, want: int, seconds: float = 10.0) -> Reply:
    """Repeat ``call`` until it answers ``want`` (RBAC changes reach the real authorizer late)."""
    reply: Reply = await call()
    for _ in range(int(seconds / 0.1)):
        if reply.status == want:
            break
        await asyncio.sleep(0.1)
        reply = await call()
    return reply


def role(name: str, rules: list[Obj], *, cluster: bool = False) -> Obj:
    kind = "ClusterRole" if cluster else "Role"
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "rules": rules,
    }


def binding(name: str, role_kind: str, role_name: str, subjects: list[Obj], *, cluster: bool = False) -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding" if cluster else "RoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name},
        "subjects": subjects,
    }


def account(ns: str, name: str) -> Obj:
    return {"kind": "ServiceAccount", "name": name, "namespace": ns}


def config_map(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}


async def as_nobody(side: Side, ns: str, name: str = "nobody") -> RawClient:
    return await side.service_account_client(ns, name)


# -- denials -----------------------------------------------------------------------------------
async def test_service_account_without_rights_is_forbidden_in_a_namespace(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        assert (await side.admin.post(f"/api/v1/namespaces/{ns}/configmaps", config_map("c"))).status == 201
        sa = await as_nobody(side, ns)
        try:
            base = f"/api/v1/namespaces/{ns}/configmaps"
            watch_status, _, watch_body = await sa.watch(base, seconds=2)
            return {
                "list": shape(await sa.get(base)),
                "get": shape(await sa.get(f"{base}/c")),
                "get_missing": shape(await sa.get(f"{base}/missing")),
                "create": shape(await sa.post(base, config_map("d"))),
                "update": shape(await sa.put(f"{base}/c", config_map("c"))),
                "patch": shape(await sa.patch(f"{base}/c", {"data": {"k": "w"}})),
                "delete": shape(await sa.delete(f"{base}/c")),
                "deletecollection": shape(await sa.delete(base)),
                "watch": [
                    watch_status,
                    watch_body.get("message") if isinstance(watch_body, dict) else watch_body,
                ],
                "all_namespaces": shape(await sa.get("/api/v1/configmaps")),
            }
        finally:
            await sa.close()

    await contract.agree(probe)


async def test_forbidden_at_the_cluster_scope(contract: Contract) -> None:
    # Cluster-scoped resources are refused "at the cluster scope"; a namespace's own URL is in
    # that namespace.
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        sa = await as_nobody(side, ns)
        try:
            node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "contract-node"}}
            return {
                "list_nodes": shape(await sa.get("/api/v1/nodes")),
                "get_node": shape(await sa.get("/api/v1/nodes/contract-node")),
                "create_node": shape(await sa.post("/api/v1/nodes", node)),
                "list_namespaces": shape(await sa.get("/api/v1/namespaces")),
                "get_own_namespace": shape(await sa.get(f"/api/v1/namespaces/{ns}")),
                "delete_own_namespace": shape(await sa.delete(f"/api/v1/namespaces/{ns}")),
                "list_crds": shape(await sa.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")),
                "list_priorityclasses": shape(await sa.get("/apis/scheduling.k8s.io/v1/priorityclasses")),
            }
        finally:
            await sa.close()

    await contract.agree(probe)


async def test_forbidden_on_subresources(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        sa = await as_nobody(side, ns)
        pods = f"/api/v1/namespaces/{ns}/pods"
        target = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "p"},
            "target": {"kind": "Node", "name": "n"},
        }
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
        try:
            return {
                "bind": shape(await sa.post(f"{pods}/p/binding", target)),
                "get_status": shape(await sa.get(f"{pods}/p/status")),
                "update_status": shape(await sa.put(f"{pods}/p/status", pod)),
                "patch_status": shape(await sa.patch(f"{pods}/p/status", {"status": {}})),
                "node_status": shape(await sa.patch("/api/v1/nodes/n/status", {"status": {}})),
            }
        finally:
            await sa.close()

    await contract.agree(probe)


async def test_forbidden_on_custom_and_unknown_resources(contract: Contract) -> None:
    # Authorization comes before routing: a resource nobody serves is 403 too, not 404.
    schema = spec_schema({"size": {"type": "integer"}})

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        sa = await as_nobody(side, ns)
        try:
            async with installed(side, crd("rbacprobes", "RbacProbe", schema)):
                base = f"/apis/{GROUP}/v1/namespaces/{ns}/rbacprobes"
                body = {
                    "apiVersion": f"{GROUP}/v1",
                    "kind": "RbacProbe",
                    "metadata": {"name": "r"},
                    "spec": {"size": 1},
                }
                return {
                    "list": shape(await sa.get(base)),
                    "create": shape(await sa.post(base, body)),
                    "get": shape(await sa.get(f"{base}/r")),
                    "all_namespaces": shape(await sa.get(f"/apis/{GROUP}/v1/rbacprobes")),
                    "unknown_core_resource": shape(await sa.get(f"/api/v1/namespaces/{ns}/widgets")),
                    "unknown_group": shape(await sa.get("/apis/nothing.example.com/v1/things")),
                }
        finally:
            await sa.close()

    await contract.agree(probe)


# -- grants ------------------------------------------------------------------------------------
async def test_role_and_role_binding_take_effect(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        sa = await as_nobody(side, ns, "worker")
        base = f"/api/v1/namespaces/{ns}/configmaps"
        try:
            before = shape(await sa.get(base))
            rules = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create"]}]
            made_role = await side.admin.post(f"{RBAC}/namespaces/{ns}/roles", role("cm-editor", rules))
            made_binding = await side.admin.post(
                f"{RBAC}/namespaces/{ns}/rolebindings",
                binding("worker-edits", "Role", "cm-editor", [account(ns, "worker")]),
            )
            listed = await until_status(lambda: sa.get(base), 200)
            created = await sa.post(base, config_map("mine"))
            return {
                "before": before,
                "grant": [made_role.status, made_binding.status],
                "list_after": [listed.status, listed.body.get("kind")],
                "create_after": [created.status, created.body.get("metadata", {}).get("name")],
                "delete_still_forbidden": shape(await sa.delete(f"{base}/mine")),
                "update_still_forbidden": shape(await sa.put(f"{base}/mine", config_map("mine"))),
                "secrets_still_forbidden": shape(await sa.get(f"/api/v1/namespaces/{ns}/secrets")),
            }
        finally:
            await sa.close()

    await contract.agree(probe)


async def test_cluster_role_through_a_role_binding_grants_one_namespace(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        other = await side.namespace()
        sa = await as_nobody(side, ns, "reader")
        name = f"contract-pod-reader-{ns}"
        rules = [{"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["list", "get"]}]
        made = await side.admin.post(f"{RBAC}/clusterroles", role(name, rules, cluster=True))
        try:
            bound = await side.admin.post(
                f"{RBAC}/namespaces/{ns}/rolebindings",
                binding("reader-pods", "ClusterRole", name, [account(ns, "reader")]),
            )
            own = await until_status(lambda: sa.get(f"/api/v1/namespaces/{ns}/pods"), 200)
            return {
                "grant": [made.status, bound.status],
                "own_namespace": shape(own),
                "other_namespace": shape(await sa.get(f"/api/v1/namespaces/{other}/pods")),
                "all_namespaces": shape(await sa.get("/api/v1/pods")),
                "nodes_not_granted_by_a_role_binding": shape(await sa.get("/api/v1/nodes")),
            }
        finally:
            await side.admin.delete(f"{RBAC}/clusterroles/{name}")
            await sa.close()

    await contract.agree(probe)


async def test_cluster_role_binding_grants_everywhere(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        sa = await as_nobody(side, ns, "watcher")
        name = f"contract-node-reader-{ns}"
        rules = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]},
                 {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["get"]}]  # fmt: skip
        made = await side.admin.post(f"{RBAC}/clusterroles", role(name, rules, cluster=True))
        bound = await side.admin.post(
            f"{RBAC}/clusterrolebindings",
            binding(name, "ClusterRole", name, [account(ns, "watcher")], cluster=True),
        )
        try:
            nodes = await until_status(lambda: sa.get("/api/v1/nodes"), 200)
            return {
                "grant": [made.status, bound.status],
                "nodes": [nodes.status, nodes.body.get("kind")],
                "pod_status_of_a_missing_pod": shape(
                    await sa.get(f"/api/v1/namespaces/{ns}/pods/none/status")
                ),
                "the_pod_itself": shape(await sa.get(f"/api/v1/namespaces/{ns}/pods/none")),
            }
        finally:
            await side.admin.delete(f"{RBAC}/clusterrolebindings/{name}")
            await side.admin.delete(f"{RBAC}/clusterroles/{name}")
            await sa.close()

    await contract.agree(probe)


async def test_resource_names_limit_a_rule_to_named_objects(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        for name in ("allowed", "other"):
            assert (
                await side.admin.post(f"/api/v1/namespaces/{ns}/configmaps", config_map(name))
            ).status == 201
        sa = await as_nobody(side, ns, "named")
        rules = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "update", "delete"],
                  "resourceNames": ["allowed"]}]  # fmt: skip
        await side.admin.post(f"{RBAC}/namespaces/{ns}/roles", role("one-map", rules))
        await side.admin.post(
            f"{RBAC}/namespaces/{ns}/rolebindings",
            binding("named", "Role", "one-map", [account(ns, "named")]),
        )
        base = f"/api/v1/namespaces/{ns}/configmaps"
        try:
            got = await until_status(lambda: sa.get(f"{base}/allowed"), 200)
            return {
                "get_named": [got.status, got.body.get("metadata", {}).get("name")],
                "get_other": shape(await sa.get(f"{base}/other")),
                "list": shape(await sa.get(base)),
                "update_named": shape(await sa.put(f"{base}/allowed", config_map("allowed"))),
                "delete_other": shape(await sa.delete(f"{base}/other")),
                "deletecollection": shape(await sa.delete(base)),
            }
        finally:
            await sa.close()

    await contract.agree(probe)


# -- authentication ----------------------------------------------------------------------------
async def test_an_unknown_bearer_token_is_unauthorized_everywhere(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        stranger = side.admin.as_token("not-a-token-anyone-has")
        anonymous = side.admin.as_token("")
        try:
            out: Obj = {}
            for path in (
                f"/api/v1/namespaces/{ns}/configmaps",
                "/api",
                "/apis",
                "/api/v1",
                "/version",
                "/healthz",
            ):
                reply = await stranger.get(path)
                out[f"unknown token {path}"] = shape(reply)
            post = await stranger.post(f"/api/v1/namespaces/{ns}/configmaps", config_map("x"))
            out["unknown token create"] = shape(post)
            for path in ("/version", "/healthz", "/api"):
                reply = await anonymous.get(path)
                out[f"no token {path}"] = shape(reply) if reply.status >= 400 else reply.status
            return out
        finally:
            await stranger.close()
            await anonymous.close()

    await contract.agree(probe)


# -- SelfSubjectAccessReview -------------------------------------------------------------------
def review(**attributes: str) -> Obj:
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes}}  # fmt: skip


async def ask(client: RawClient, body: Obj) -> Any:
    reply = await client.post(REVIEWS, body)
    if reply.status != 201:
        return shape(reply)
    return {
        "http": 201,
        "kind": reply.body.get("kind"),
        "spec": reply.body.get("spec"),
        "status": reply.body.get("status"),
    }


async def test_self_subject_access_review_answers_allowed_and_denied(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        other = await side.namespace()
        sa = await as_nobody(side, ns, "asker")
        try:
            out: Obj = {"before": await ask(sa, review(namespace=ns, verb="list", resource="configmaps"))}
            rules = [
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]},
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "verbs": ["update"],
                    "resourceNames": ["only"],
                },
                {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
            ]
            await side.admin.post(f"{RBAC}/namespaces/{ns}/roles", role("asker", rules))
            await side.admin.post(
                f"{RBAC}/namespaces/{ns}/rolebindings",
                binding("asker", "Role", "asker", [account(ns, "asker")]),
            )
            await until_status(lambda: sa.get(f"/api/v1/namespaces/{ns}/configmaps"), 200)
            for key, attrs in (
                ("list", {"namespace": ns, "verb": "list", "resource": "configmaps"}),
                (
                    "update_named",
                    {"namespace": ns, "verb": "update", "resource": "configmaps", "name": "only"},
                ),
                (
                    "update_other",
                    {"namespace": ns, "verb": "update", "resource": "configmaps", "name": "other"},
                ),
                ("update_any", {"namespace": ns, "verb": "update", "resource": "configmaps"}),
                ("bind", {"namespace": ns, "verb": "create", "resource": "pods", "subresource": "binding"}),
                ("pods", {"namespace": ns, "verb": "create", "resource": "pods"}),
                ("other_namespace", {"namespace": other, "verb": "list", "resource": "configmaps"}),
                ("cluster_scope", {"verb": "list", "resource": "configmaps"}),
            ):
                out[key] = await ask(sa, review(**attrs))
            out["admin"] = await ask(side.admin, review(namespace=ns, verb="delete", resource="nodes"))
            return out
        finally:
            await sa.close()

    await contract.agree(probe)


async def test_self_subject_access_review_needs_one_kind_of_attributes(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        sa = await as_nobody(side, ns)
        try:
            empty = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {}}
            listed = await sa.get(REVIEWS)
            return {
                "no_attributes": await ask(sa, empty),
                "empty_resource_attributes": await ask(sa, review()),
                "get_is_not_served": shape(listed),
            }
        finally:
            await sa.close()

    await contract.agree(probe)
