"""Generic writes: optimistic concurrency, names, finalizers, preconditions, dry run, patch types,
unconditional PUT and deletecollection."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.contract.conftest import Contract, Side
from tests.contract.raw import Reply

pytestmark = pytest.mark.asyncio(loop_scope="session")

NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"
JSON_PATCH = "application/json-patch+json"


def config_map(name: str, labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels or {}},
        "data": data or {"k": "v"},
    }


def masked(text: Any, **values: str) -> Any:
    """``text`` with each value (a uid, a resourceVersion) replaced by its placeholder name."""
    if not isinstance(text, str):
        return text
    for placeholder, value in values.items():
        if value:
            text = text.replace(value, placeholder)
    return text


def shape(reply: Reply, **values: str) -> dict[str, Any]:
    out = reply.status_shape
    out["message"] = masked(out["message"], **values)
    if isinstance(reply.body, dict) and reply.body.get("kind") == "Status":
        details = dict(reply.body.get("details") or {})
        details.pop("uid", None)
        out["details"] = details
    return out


async def create(side: Side, ns: str, obj: dict[str, Any]) -> dict[str, Any]:
    reply = await side.admin.post(f"/api/v1/namespaces/{ns}/configmaps", obj)
    assert reply.status == 201, reply.body
    body: dict[str, Any] = reply.body
    return body


async def test_update_with_a_stale_resource_version_is_a_conflict(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        path = f"/api/v1/namespaces/{ns}/configmaps/a"
        stale = await create(side, ns, config_map("a"))
        fresh = dict(stale, data={"k": "first"})
        first = await side.admin.put(path, fresh)
        late = await side.admin.put(path, dict(stale, data={"k": "late"}))
        late_patch = await side.admin.patch(
            path, {"metadata": {"resourceVersion": stale["metadata"]["resourceVersion"]}, "data": {"k": "x"}}
        )
        late_json_patch = await side.admin.patch(
            path,
            [
                {
                    "op": "replace",
                    "path": "/metadata/resourceVersion",
                    "value": stale["metadata"]["resourceVersion"],
                },
                {"op": "replace", "path": "/data/k", "value": "y"},
            ],
            content_type=JSON_PATCH,
        )
        garbled = await side.admin.put(
            path, {**first.body, "metadata": {**first.body["metadata"], "resourceVersion": "abc"}}
        )
        now = await side.admin.get(path)
        return {
            "first": first.status,
            "late": shape(late),
            "late_patch": shape(late_patch),
            "late_json_patch": shape(late_json_patch),
            "garbled": shape(garbled),
            "kept": now.body["data"],
        }

    await contract.agree(probe)


async def test_create_of_an_existing_name_is_already_exists(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        await create(side, ns, config_map("a"))
        again = await side.admin.post(f"/api/v1/namespaces/{ns}/configmaps", config_map("a", k="other"))
        space = await side.admin.post(
            "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        )
        kept = await side.admin.get(f"/api/v1/namespaces/{ns}/configmaps/a")
        return {"config_map": shape(again), "namespace": shape(space), "kept": kept.body["data"]}

    await contract.agree(probe)


async def test_generate_name_appends_five_characters(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        path = f"/api/v1/namespaces/{ns}/configmaps"
        out: dict[str, Any] = {}
        for what, meta in {
            "prefix": {"generateName": "gen-"},
            "name_wins": {"generateName": "gen-", "name": "fixed"},
            "long_prefix": {"generateName": "p" * 100},
            "bad_prefix": {"generateName": "Bad_"},
            "neither": {},
        }.items():
            reply = await side.admin.post(path, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta})
            if reply.status != 201:
                # The generated name is random: only its shape is compared.
                out[what] = json.loads(re.sub(r"Bad_[a-z0-9]{5}\b", "Bad_XXXXX", json.dumps(shape(reply))))
                continue
            name = reply.body["metadata"]["name"]
            prefix = meta.get("generateName", "")[:58]
            suffix = name[len(prefix) :]
            out[what] = {
                "http": reply.status,
                "starts_with_prefix": name.startswith(prefix),
                "length": len(name),
                "suffix_chars_allowed": all(c in NAME_CHARS for c in suffix) if "name" not in meta else None,
                "name_if_given": meta.get("name") and name,
                "generate_name_kept": reply.body["metadata"].get("generateName"),
            }
        return out

    await contract.agree(probe)


async def test_finalizers_keep_a_deleted_object_until_they_are_removed(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        path = f"/api/v1/namespaces/{ns}/configmaps/held"
        obj = config_map("held")
        obj["metadata"]["finalizers"] = ["example.com/hold"]
        await create(side, ns, obj)
        deleted = await side.admin.delete(path)
        still = await side.admin.get(path)
        again = await side.admin.delete(path)
        added = await side.admin.patch(
            path, {"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}}
        )
        data = await side.admin.patch(path, {"data": {"k": "while-terminating"}})
        released = await side.admin.patch(path, {"metadata": {"finalizers": None}})
        gone = await side.admin.get(path)

        def view(reply: Any) -> Any:
            if reply.status >= 300:
                return shape(reply)
            meta = reply.body["metadata"]
            return {
                "http": reply.status,
                "kind": reply.body.get("kind"),
                "deleting": bool(meta.get("deletionTimestamp")),
                "grace": meta.get("deletionGracePeriodSeconds"),
                "finalizers": meta.get("finalizers"),
                "data": reply.body.get("data"),
            }

        return {
            "deleted": view(deleted),
            "still": view(still),
            "again": view(again),
            "added": view(added),
            "data": view(data),
            "released": view(released),
            "gone": shape(gone),
        }

    await contract.agree(probe)


async def test_delete_preconditions_that_do_not_hold_are_a_conflict(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        path = f"/api/v1/namespaces/{ns}/configmaps/a"
        obj = await create(side, ns, config_map("a"))
        uid, rv = obj["metadata"]["uid"], obj["metadata"]["resourceVersion"]
        other_uid = "00000000-0000-4000-8000-000000000000"
        by_uid = await side.admin.delete(
            path, {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": other_uid}}
        )
        by_rv = await side.admin.delete(
            path, {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"resourceVersion": "1"}}
        )
        matching = await side.admin.delete(
            path,
            {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "preconditions": {"uid": uid, "resourceVersion": rv},
            },
        )
        return {
            "by_uid": shape(by_uid, UID=uid, OTHER=other_uid),
            "by_rv": shape(by_rv, RV=rv),
            "matching": [matching.status, matching.body.get("kind")],
            "gone": (await side.admin.get(path)).status,
        }

    await contract.agree(probe)


async def test_dry_run_writes_answer_but_store_nothing(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        path = f"/api/v1/namespaces/{ns}/configmaps"
        created = await side.admin.post(path, config_map("dry"), dryRun="All")
        after_create = await side.admin.get(f"{path}/dry")
        real = await create(side, ns, config_map("a"))
        updated = await side.admin.put(f"{path}/a", dict(real, data={"k": "dry"}), dryRun="All")
        patched = await side.admin.patch(f"{path}/a?dryRun=All", {"data": {"k": "dry-patch"}})
        deleted = await side.admin.delete(f"{path}/a", dryRun="All")
        after = await side.admin.get(f"{path}/a")
        unknown = await side.admin.post(path, config_map("b"), dryRun="Some")

        def meta_of(reply: Any) -> Any:
            meta = reply.body.get("metadata") or {}
            return {
                "http": reply.status,
                "kind": reply.body.get("kind"),
                "data": reply.body.get("data"),
                "has": sorted(k for k in ("uid", "creationTimestamp", "resourceVersion") if meta.get(k)),
            }

        return {
            "create": meta_of(created),
            "after_create": after_create.status,
            "update": meta_of(updated),
            "update_rv_unchanged": updated.body["metadata"].get("resourceVersion")
            == real["metadata"]["resourceVersion"],
            "patch": meta_of(patched),
            "delete": meta_of(deleted),
            "after": [
                after.status,
                after.body.get("data"),
                after.body["metadata"]["resourceVersion"] == real["metadata"]["resourceVersion"],
            ],
            "unknown": shape(unknown),
        }

    await contract.agree(probe)


async def test_unsupported_patch_content_types_are_a_415(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        path = f"/api/v1/namespaces/{ns}/configmaps/a"
        await create(side, ns, config_map("a"))
        out = {}
        for ctype in ("text/plain", "application/json", "application/yaml"):
            reply = await side.admin.request("PATCH", path, data='{"data":{"k":"w"}}', content_type=ctype)
            out[ctype] = shape(reply)
        return out

    await contract.agree(probe)


async def test_json_patch_failures(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        path = f"/api/v1/namespaces/{ns}/configmaps/a"
        await create(side, ns, config_map("a"))
        out = {}
        for what, ops in {
            "test_fails": [
                {"op": "test", "path": "/data/k", "value": "other"},
                {"op": "replace", "path": "/data/k", "value": "w"},
            ],
            "missing_path": [{"op": "replace", "path": "/data/missing", "value": "w"}],
            "remove_added": [{"op": "remove", "path": "/data/missing"}],
            "remove_absent": [{"op": "remove", "path": "/data/absent"}],
            "missing_parent": [{"op": "add", "path": "/nothing/here", "value": "x"}],
            "move_and_copy": [
                {"op": "copy", "from": "/data/k", "path": "/data/copied"},
                {"op": "move", "from": "/data/copied", "path": "/data/moved"},
            ],
            "no_path": [{"op": "add", "value": "x"}],
            "unknown_op": [{"op": "frobnicate", "path": "/data/k"}],
            "not_a_list": {"op": "replace", "path": "/data/k", "value": "w"},
            "test_passes": [
                {"op": "test", "path": "/data/k", "value": "v"},
                {"op": "replace", "path": "/data/k", "value": "w"},
            ],
        }.items():
            reply = await side.admin.patch(path, ops, content_type=JSON_PATCH)
            out[what] = shape(reply) if reply.status != 200 else reply.body["data"]
        return out

    await contract.agree(probe)


async def test_put_without_resource_version_is_unconditional(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        path = f"/api/v1/namespaces/{ns}/configmaps/a"
        created = await create(side, ns, config_map("a"))
        body = config_map("a", k="put")
        reply = await side.admin.put(path, body)
        same = await side.admin.put(path, config_map("a", k="put"))
        missing = await side.admin.put(f"/api/v1/namespaces/{ns}/configmaps/nope", config_map("nope"))
        other_name = await side.admin.put(path, config_map("b"))
        return {
            "http": reply.status,
            "data": reply.body.get("data"),
            "grew": int(reply.body["metadata"]["resourceVersion"])
            > int(created["metadata"]["resourceVersion"]),
            "no_op_keeps_version": same.body["metadata"]["resourceVersion"]
            == reply.body["metadata"]["resourceVersion"],
            "missing": shape(missing),
            "other_name": shape(other_name),
        }

    await contract.agree(probe)


async def test_delete_collection_with_a_label_selector(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        path = f"/api/v1/namespaces/{ns}/configmaps"
        for name, tier in (("a", "web"), ("b", "web"), ("c", "db")):
            await create(side, ns, config_map(name, {"tier": tier}))
        reply = await side.admin.delete(path, labelSelector="tier=web")
        left = await side.admin.get(path)
        bad = await side.admin.delete(path, labelSelector="tier in web")
        body = reply.body if isinstance(reply.body, dict) else {}
        return {
            "http": reply.status,
            "kind": body.get("kind"),
            "items": sorted(i["metadata"]["name"] for i in body.get("items") or []),
            "left": sorted(i["metadata"]["name"] for i in left.body["items"]),
            "bad": shape(bad),
        }

    await contract.agree(probe)


async def test_body_and_url_must_agree(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        path = f"/api/v1/namespaces/{ns}/configmaps"
        elsewhere = config_map("x")
        elsewhere["metadata"]["namespace"] = "default"
        with_rv = config_map("y")
        with_rv["metadata"]["resourceVersion"] = "5"
        other_kind = shape(await side.admin.post(path, dict(config_map("z"), kind="Secret")))
        # Past its first words the decoder's text for another known kind is that kind's own decoding.
        other_kind["message"] = other_kind["message"].split(": ")[0]
        renamed = config_map("b")
        return {
            "namespace": shape(await side.admin.post(path, elsewhere)),
            "resource_version": shape(await side.admin.post(path, with_rv)),
            "other_kind": other_kind,
            "unknown_kind": shape(await side.admin.post(path, dict(config_map("z"), kind="Frob"))),
            "api_version": shape(await side.admin.post(path, dict(config_map("z"), apiVersion="v2"))),
            "other_group": shape(await side.admin.post(path, dict(config_map("z"), apiVersion="apps/v1"))),
            "not_json": shape(
                await side.admin.request("POST", path, data="{nope", content_type="application/json")
            ),
            "array": shape(
                await side.admin.request("POST", path, data="[1, 2]", content_type="application/json")
            ),
            "name_on_put": shape(await side.admin.put(f"{path}/a", renamed)),
        }

    await contract.agree(probe)
