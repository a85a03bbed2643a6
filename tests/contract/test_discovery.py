"""Discovery: /version, /api, /apis, group and resource lists, and what an unserved path answers.

The real server serves many more groups, versions and subresources than the double (which serves
what docs/apidouble.md lists, by design): probes compare only the entries both serve, and for
those, what clients rely on (names, scope, kind, verbs, short names, categories, preferred
version). Verb lists are compared as sets: their order differs between releases and clients do
not depend on it.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.contract.conftest import Contract, Side
from tests.contract.crds import GROUP, crd, installed, spec_schema

pytestmark = pytest.mark.asyncio(loop_scope="session")

Obj = dict[str, Any]
# Group versions the double serves (docs/apidouble.md); the real server serves these and more.
SHARED = {
    "admissionregistration.k8s.io": "v1",
    "apiextensions.k8s.io": "v1",
    "authorization.k8s.io": "v1",
    "coordination.k8s.io": "v1",
    "events.k8s.io": "v1",
    "rbac.authorization.k8s.io": "v1",
    "scheduling.k8s.io": "v1",
}


def entry(resource: Obj) -> Obj:
    """One APIResource as clients use it (singularName is compared on its own, see below)."""
    out = {
        k: resource.get(k)
        for k in ("name", "namespaced", "kind", "shortNames", "categories", "group", "version")
    }
    out["verbs"] = sorted(resource.get("verbs") or [])
    return out


def entries(listing: Obj, names: set[str]) -> list[Obj]:
    return sorted(
        (entry(r) for r in listing.get("resources", []) if r["name"] in names), key=lambda e: str(e["name"])
    )


async def test_version_answers_with_the_same_keys(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        reply = await side.admin.get("/version")
        return {"http": reply.status, "keys": sorted(reply.body), "major": reply.body.get("major")}

    await contract.agree(probe)


async def test_api_lists_the_core_version(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        body = (await side.admin.get("/api")).body
        return {
            "kind": body.get("kind"),
            "apiVersion": body.get("apiVersion"),
            "versions": body.get("versions"),
            "address_keys": [sorted(a) for a in body.get("serverAddressByClientCIDRs") or []],
        }

    await contract.agree(probe)


async def test_group_list_entries_for_the_groups_both_serve(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        body = (await side.admin.get("/apis")).body
        groups = {g["name"]: g for g in body.get("groups", [])}
        out: Obj = {"kind": body.get("kind"), "apiVersion": body.get("apiVersion")}
        for name, version in SHARED.items():
            group = groups.get(name) or {}
            listed = [v["version"] for v in group.get("versions", [])]
            one = (await side.admin.get(f"/apis/{name}")).body
            out[name] = {
                "preferred": group.get("preferredVersion"),
                "serves": version in listed,
                "well_formed": all(
                    v["groupVersion"] == f"{name}/{v['version']}" for v in group.get("versions", [])
                ),
                "group_document": [
                    one.get("kind"),
                    one.get("apiVersion"),
                    one.get("name"),
                    one.get("preferredVersion"),
                ],
            }
        return out

    await contract.agree(probe)


async def test_core_v1_pod_entries(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        body = (await side.admin.get("/api/v1")).body
        return {
            "document": [body.get("kind"), body.get("apiVersion"), body.get("groupVersion")],
            "pods": entries(body, {"pods", "pods/status", "pods/binding"}),
        }

    await contract.agree(probe)


async def test_core_v1_entries_of_the_other_served_resources(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        body = (await side.admin.get("/api/v1")).body
        names = {
            "namespaces",
            "namespaces/status",
            "nodes",
            "nodes/status",
            "events",
            "secrets",
            "configmaps",
            "serviceaccounts",
        }
        return entries(body, names)

    await contract.agree(probe)


async def test_namespaces_cannot_be_deleted_as_a_collection(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        reply = await side.admin.delete("/api/v1/namespaces")
        return {
            **reply.status_shape,
            "details": reply.body.get("details") if isinstance(reply.body, dict) else None,
        }

    await contract.agree(probe)


async def test_resource_lists_of_the_groups_both_serve(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        out: Obj = {}
        for name, version in SHARED.items():
            body = (await side.admin.get(f"/apis/{name}/{version}")).body
            served = {r["name"] for r in body.get("resources", [])}
            if name == "authorization.k8s.io":
                served = {"selfsubjectaccessreviews"}  # the only one the double serves
            out[name] = {
                "document": [body.get("kind"), body.get("apiVersion"), body.get("groupVersion")],
                "resources": entries(body, served),
            }
        return out

    await contract.agree(probe)


async def test_builtin_singular_names(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        body = (await side.admin.get("/api/v1")).body
        return {
            r["name"]: r.get("singularName")
            for r in body["resources"]
            if r["name"] in ("pods", "nodes", "configmaps")
        }

    await contract.agree(probe)


async def test_a_crd_group_and_its_resource_list(contract: Contract) -> None:
    v1 = spec_schema({"size": {"type": "integer"}})
    versions = [
        {"name": "v1alpha1", "served": True, "storage": False, "schema": {"openAPIV3Schema": v1}},
        {
            "name": "v1",
            "served": True,
            "storage": True,
            "schema": {"openAPIV3Schema": v1},
            "subresources": {"status": {}},
        },
        {"name": "v2beta1", "served": True, "storage": False, "schema": {"openAPIV3Schema": v1}},
        {"name": "v3", "served": False, "storage": False, "schema": {"openAPIV3Schema": v1}},
    ]
    body = crd("discoprobes", "DiscoProbe", versions=versions)
    body["spec"]["names"] |= {"shortNames": ["dp"], "categories": ["contract"]}

    async def probe(side: Side) -> Any:
        async with installed(side, body):
            group = (await side.admin.get(f"/apis/{GROUP}")).body
            listing = (await side.admin.get(f"/apis/{GROUP}/v1")).body
            alpha = (await side.admin.get(f"/apis/{GROUP}/v1alpha1")).body
            groups = {g["name"]: g for g in (await side.admin.get("/apis")).body["groups"]}
            return {
                "group": group,
                "in_group_list": groups.get(GROUP),
                "v1": [
                    listing.get("kind"),
                    listing.get("groupVersion"),
                    entries(listing, {"discoprobes", "discoprobes/status"}),
                ],
                "v1_singular": [r.get("singularName") for r in listing["resources"]],
                "v1alpha1_has_no_status": sorted(r["name"] for r in alpha["resources"]),
            }

    await contract.agree(probe)


async def test_paths_nothing_serves(contract: Contract) -> None:
    # A served group answers an unknown resource with a Status (the path is not in the message:
    # clients add it); a group nobody serves gets the NotFoundHandler's plain text.
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        out: Obj = {}
        for path in (
            "/api/v1/widgets",
            f"/api/v1/namespaces/{ns}/widgets/w",
            "/api/v2",
            "/apis/coordination.k8s.io/v9",
            "/apis/coordination.k8s.io/v1/leasez",
            f"/api/v1/namespaces/{ns}/configmaps/c/status",
            f"/api/v1/namespaces/{ns}/pods/p/nonsense",
            "/apis/nothing.example.com",
            "/apis/nothing.example.com/v1",
            f"/apis/nothing.example.com/v1/namespaces/{ns}/things",
        ):
            reply = await side.admin.get(path)
            body = reply.body
            out[path] = [reply.status, reply.content_type,
                         {**reply.status_shape, "details": body.get("details")} if isinstance(body, dict) else body]  # fmt: skip
        return out

    await contract.agree(probe)
