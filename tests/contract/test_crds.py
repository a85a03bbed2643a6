"""Custom resources: schema validation texts, pruning, defaulting, status, versions, CRD validation.

Each probe installs a CRD of its own (tests/contract/crds.py) and removes it at the end. Error
texts are compared exactly, but independent of the order the real server lists several errors in
(``crds.invalid``). Our own CRDs (manifests/crds) and Volcano's Queue are probed as users write
them, because those are the CRDs the product depends on.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.contract.conftest import Contract, Side
from tests.contract.crds import CRDS, GROUP, crd, install, installed, invalid, remove, spec_schema, written

pytestmark = pytest.mark.asyncio(loop_scope="session")

Obj = dict[str, Any]
ROOT = Path(__file__).resolve().parents[2]


def obj(kind: str, name: str, spec: Any = None, *, version: str = "v1", **top: Any) -> Obj:
    body: Obj = {"apiVersion": f"{GROUP}/{version}", "kind": kind, "metadata": {"name": name}, **top}
    if spec is not None:
        body["spec"] = spec
    return body


async def create_each(side: Side, base: str, kind: str, specs: list[Any]) -> list[Obj]:
    """Create one object per spec; the refusals (or what was stored) in order."""
    out = []
    for i, spec in enumerate(specs):
        reply = await side.admin.post(base, obj(kind, f"x{i}", spec))
        out.append({"spec": spec, **written(reply, "spec")})
    return out


# -- validation texts --------------------------------------------------------------------------
TYPED = spec_schema(
    {
        "count": {"type": "integer"},
        "ratio": {"type": "number"},
        "name": {"type": "string"},
        "flag": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "nested": {"type": "object", "properties": {"deep": {"type": "string"}}},
        "limits": {"type": "object", "additionalProperties": {"type": "integer"}},
    }
)


async def test_crd_type_mismatch_texts(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        async with installed(side, crd("typeprobes", "TypeProbe", TYPED)):
            base = f"/apis/{GROUP}/v1/namespaces/{ns}/typeprobes"
            return await create_each(
                side,
                base,
                "TypeProbe",
                [
                    {"count": "three"},
                    {"count": 1.5},
                    {"count": 2.0},
                    {"ratio": "half"},
                    {"ratio": 1},
                    {"name": 7},
                    {"flag": "yes"},
                    {"tags": "a,b"},
                    {"nested": "x"},
                    {"nested": {"deep": {"x": 1}}},
                    {"limits": {"gpu": "two"}},
                    {"count": True, "name": False},
                ],
            )

    await contract.agree(probe)


BOUNDED = spec_schema(
    {
        "mode": {"type": "string", "enum": ["fast", "slow"]},
        "level": {"type": "integer", "enum": [1, 2, 3]},
        "size": {"type": "integer", "minimum": 1, "maximum": 10},
        "share": {
            "type": "number",
            "minimum": 0,
            "maximum": 1,
            "exclusiveMinimum": True,
            "exclusiveMaximum": True,
        },
        "step": {"type": "integer", "multipleOf": 4},
        "big": {"type": "integer", "maximum": 1000000},
        "name": {"type": "string", "pattern": "^[a-z]+$"},
        "short": {"type": "string", "minLength": 2},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    }
)


async def test_crd_enum_pattern_and_bound_texts(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        async with installed(side, crd("boundprobes", "BoundProbe", BOUNDED)):
            base = f"/apis/{GROUP}/v1/namespaces/{ns}/boundprobes"
            return await create_each(
                side,
                base,
                "BoundProbe",
                [
                    {"mode": "medium"},
                    {"mode": 5},
                    {"level": 4},
                    {"size": 0},
                    {"size": 11},
                    {"share": 0},
                    {"share": 1},
                    {"share": 0.5},
                    {"step": 6},
                    {"big": 1000001},
                    {"name": "Abc"},
                    {"short": "a"},
                    {"tags": []},
                ],
            )

    await contract.agree(probe)


async def test_crd_string_checks_stop_at_the_first_failure(contract: Contract) -> None:
    # go-openapi's string validator reports minLength and stops; numbers report every bound.
    schema = spec_schema(
        {
            "name": {"type": "string", "minLength": 3, "pattern": "^[a-z]+$"},
            "size": {"type": "integer", "minimum": 5, "maximum": 3, "multipleOf": 2},
        }
    )

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        async with installed(side, crd("firstprobes", "FirstProbe", schema)):
            base = f"/apis/{GROUP}/v1/namespaces/{ns}/firstprobes"
            return await create_each(side, base, "FirstProbe", [{"name": "AB"}, {"size": 7}, {"size": 4}])

    await contract.agree(probe)


async def test_crd_required_fields_and_nulls(contract: Contract) -> None:
    # Nulls the schema does not allow are dropped before validation (so a required one is
    # "Required"), replaced by the default if there is one; nullable fields keep them.
    schema = spec_schema(
        {
            "size": {"type": "integer"},
            "owner": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
            "note": {"type": "string", "nullable": True},
            "color": {"type": "string", "default": "red"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        required=["size"],
    )

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        async with installed(side, crd("needprobes", "NeedProbe", schema)):
            base = f"/apis/{GROUP}/v1/namespaces/{ns}/needprobes"
            out = await create_each(
                side,
                base,
                "NeedProbe",
                [
                    {},
                    {"size": None},
                    {"size": 1, "owner": {}},
                    {"size": 1, "note": None, "color": None, "labels": {"a": None, "b": "x"}},
                ],
            )
            no_spec = await side.admin.post(base, {"apiVersion": f"{GROUP}/v1", "kind": "NeedProbe",
                                                    "metadata": {"name": "nospec"}})  # fmt: skip
            out.append({"no_spec": written(no_spec, "spec")})
            return out

    await contract.agree(probe)


async def test_crd_several_errors_at_once(contract: Contract) -> None:
    # One 422 lists every error: "Kind.group "name" is invalid: [a, b, ...]", causes with fields.
    schema = spec_schema(
        {
            "size": {"type": "integer", "minimum": 1},
            "mode": {"type": "string", "enum": ["fast", "slow"]},
            "owner": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
            "limits": {"type": "object", "additionalProperties": {"type": "integer"}},
        },
        required=["size", "mode"],
    )

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        async with installed(side, crd("manyprobes", "ManyProbe", schema)):
            base = f"/apis/{GROUP}/v1/namespaces/{ns}/manyprobes"
            spec = {"size": "big", "owner": {"name": 5}, "limits": {"gpu": "x", "cpu": 1}}
            first = await side.admin.post(base, obj("ManyProbe", "many", spec))
            second = await side.admin.post(base, obj("ManyProbe", "many", {"size": 0, "mode": "x"}))
            return {"four": invalid(first), "two": invalid(second)}

    await contract.agree(probe)


async def test_crd_max_length_and_max_items_texts(contract: Contract) -> None:
    schema = spec_schema(
        {
            "name": {"type": "string", "maxLength": 3},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 1},
        }
    )

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        async with installed(side, crd("longprobes", "LongProbe", schema)):
            base = f"/apis/{GROUP}/v1/namespaces/{ns}/longprobes"
            return await create_each(side, base, "LongProbe", [{"name": "abcd"}, {"tags": ["a", "b"]}])

    await contract.agree(probe)


async def test_crd_array_item_errors_name_the_item(contract: Contract) -> None:
    schema = spec_schema({"tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}}})

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        async with installed(side, crd("itemprobes", "ItemProbe", schema)):
            base = f"/apis/{GROUP}/v1/namespaces/{ns}/itemprobes"
            return await create_each(side, base, "ItemProbe", [{"tags": ["a", 5]}, {"tags": ["c"]}])

    await contract.agree(probe)


async def test_crd_empty_string_is_not_null(contract: Contract) -> None:
    # Our GPULedger writes strings that may be empty; 1.20 takes "" for null (go-openapi).
    schema = spec_schema({"name": {"type": "string"}, "group": {"type": "string", "minLength": 1}})

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        async with installed(side, crd("emptyprobes", "EmptyProbe", schema)):
            base = f"/apis/{GROUP}/v1/namespaces/{ns}/emptyprobes"
            return await create_each(side, base, "EmptyProbe", [{"name": ""}, {"group": ""}])

    await contract.agree(probe)


async def test_crd_int_or_string_fields(contract: Contract) -> None:
    quantity = "^[0-9]+(m|Mi|Gi)?$"
    schema = spec_schema(
        {
            "port": {"x-kubernetes-int-or-string": True},
            "share": {"x-kubernetes-int-or-string": True, "pattern": "^[0-9]+%$"},
            # what controller-gen writes for a resource.Quantity (Volcano's queues do)
            "memory": {
                "x-kubernetes-int-or-string": True,
                "anyOf": [{"type": "integer"}, {"type": "string"}],
                "pattern": quantity,
            },
        }
    )

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        async with installed(side, crd("portprobes", "PortProbe", schema)):
            base = f"/apis/{GROUP}/v1/namespaces/{ns}/portprobes"
            return await create_each(
                side,
                base,
                "PortProbe",
                [
                    {"port": 80, "share": "50%", "memory": "2Gi"},
                    {"port": "http", "share": 3, "memory": 5},
                    {"port": True},
                    {"port": [80]},
                    {"port": {"x": 1}},
                    {"share": "half"},
                    {"memory": "lots"},
                    {"memory": False},
                ],
            )

    await contract.agree(probe)


# -- pruning, defaults, status, lists, versions ------------------------------------------------
async def test_crd_pruning_and_preserve_unknown_fields(contract: Contract) -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "known": {"type": "string"},
                    "nested": {"type": "object", "properties": {"a": {"type": "string"}}},
                    "items": {
                        "type": "array",
                        "items": {"type": "object", "properties": {"n": {"type": "string"}}},
                    },
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    "freeTyped": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                        "properties": {"k": {"type": "string"}},
                    },
                    "map": {
                        "type": "object",
                        "additionalProperties": {"type": "object", "properties": {"v": {"type": "string"}}},
                    },
                },
            },
        },
    }
    spec = {
        "known": "k",
        "extra": 1,
        "nested": {"a": "x", "zzz": 1},
        "items": [{"n": "1", "q": 2}],
        "free": {"any": {"deep": [1, {"x": 2}]}},
        "freeTyped": {"k": "v", "other": 5},
        "map": {"one": {"v": "w", "junk": 1}},
    }

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        async with installed(side, crd("pruneprobes", "PruneProbe", schema)):
            base = f"/apis/{GROUP}/v1/namespaces/{ns}/pruneprobes"
            made = await side.admin.post(base, obj("PruneProbe", "p", spec, unknownTop=1, status={"x": 1}))
            read = await side.admin.get(f"{base}/p")
            patched = await side.admin.patch(f"{base}/p", {"spec": {"late": 1, "nested": {"b": 2}}})
            return {
                "create": written(made, "spec", "status", "unknownTop"),
                "get": written(read, "spec"),
                "patch": written(patched, "spec"),
            }

    await contract.agree(probe)


async def test_crd_defaults_on_create_and_on_read(contract: Contract) -> None:
    # Defaults apply on every write; a default added later shows on read (from storage).
    props: Obj = {
        "size": {"type": "integer", "default": 3},
        "nested": {"type": "object", "default": {}, "properties": {"a": {"type": "string", "default": "A"}}},
        "items": {
            "type": "array",
            "items": {"type": "object", "properties": {"n": {"type": "string", "default": "x"}}},
        },
        "map": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "properties": {"v": {"type": "integer", "default": 1}},
            },
        },
    }
    later = {**props, "color": {"type": "string", "default": "blue"}}

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        body = crd("defaultprobes", "DefaultProbe", spec_schema(props))
        async with installed(side, body) as name:
            base = f"/apis/{GROUP}/v1/namespaces/{ns}/defaultprobes"
            made = await side.admin.post(
                base, obj("DefaultProbe", "d", {"items": [{}, {"n": "y"}], "map": {"m": {}}})
            )
            empty = await side.admin.post(base, obj("DefaultProbe", "e", {}))
            current = (await side.admin.get(f"{CRDS}/{name}")).body
            current["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = spec_schema(later)
            updated = await side.admin.put(f"{CRDS}/{name}", current)
            read: Any = None
            for _ in range(100):  # the real server picks the new schema up a moment later
                read = (await side.admin.get(f"{base}/d")).body
                if "color" in read.get("spec", {}):
                    break
                await asyncio.sleep(0.1)
            listed = (await side.admin.get(base)).body
            return {
                "create": written(made, "spec"),
                "empty_spec": written(empty, "spec"),
                "crd_update": updated.status,
                "read_after_update": read.get("spec"),
                "list_after_update": sorted((i["metadata"]["name"], i.get("spec")) for i in listed["items"]),
            }

    await contract.agree(probe)


async def test_crd_status_subresource_and_generation(contract: Contract) -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
            "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
        },
    }

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        async with installed(side, crd("statusprobes", "StatusProbe", schema, status=True)):
            base = f"/apis/{GROUP}/v1/namespaces/{ns}/statusprobes"
            out: Obj = {}
            made = await side.admin.post(base, obj("StatusProbe", "s", {"size": 1}, status={"phase": "Made"}))
            out["create"] = [made.status, made.body.get("status"), made.body["metadata"].get("generation")]
            current = made.body
            current["status"], current["spec"] = {"phase": "Running"}, {"size": 99}
            reply = await side.admin.put(f"{base}/s/status", current)
            out["put_status"] = [reply.status, reply.body.get("spec"), reply.body.get("status"),
                                 reply.body["metadata"].get("generation")]  # fmt: skip
            reply = await side.admin.patch(f"{base}/s", {"spec": {"size": 2}, "status": {"phase": "Hacked"}})
            out["patch_main"] = [reply.status, reply.body.get("spec"), reply.body.get("status"),
                                 reply.body["metadata"].get("generation")]  # fmt: skip
            reply = await side.admin.patch(f"{base}/s", {"metadata": {"labels": {"a": "b"}}})
            out["patch_labels"] = [reply.status, reply.body["metadata"].get("generation")]
            reply = await side.admin.patch(
                f"{base}/s/status", {"status": {"phase": "Done"}, "spec": {"size": 5}}
            )
            out["patch_status"] = [reply.status, reply.body.get("spec"), reply.body.get("status"),
                                   reply.body["metadata"].get("generation")]  # fmt: skip
            reply = await side.admin.get(f"{base}/s/status")
            out["get_status"] = [reply.status, reply.body.get("kind"), reply.body.get("status")]
            return out

    await contract.agree(probe)


async def test_undeclared_subresources_of_a_custom_resource_are_not_found(contract: Contract) -> None:
    # The CRD handler answers a subresource the CRD does not declare with NotFound of the object.
    schema = {"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                               "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}  # fmt: skip

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        async with installed(side, crd("plainprobes", "PlainProbe", schema)):
            base = f"/apis/{GROUP}/v1/namespaces/{ns}/plainprobes"
            made = await side.admin.post(base, obj("PlainProbe", "p", {"x": 1}, status={"y": 2}))
            out: Obj = {"create": written(made, "spec", "status")}
            for method, path in (
                ("GET", "p/status"),
                ("PATCH", "p/status"),
                ("GET", "p/scale"),
                ("GET", "nope/status"),
            ):
                reply = await side.admin.request(
                    method, f"{base}/{path}", json_body={} if method == "PATCH" else None,
                    content_type="application/merge-patch+json" if method == "PATCH" else None,
                )  # fmt: skip
                out[f"{method} {path}"] = [reply.status_shape, reply.body.get("details")]
            return out

    await contract.agree(probe)


async def test_crd_list_items_carry_kind_and_api_version(contract: Contract) -> None:
    schema = spec_schema({"size": {"type": "integer"}})

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        async with installed(side, crd("listprobes", "ListProbe", schema)):
            base = f"/apis/{GROUP}/v1/namespaces/{ns}/listprobes"
            for name in ("a", "b"):
                assert (await side.admin.post(base, obj("ListProbe", name, {"size": 1}))).status == 201
            listed = (await side.admin.get(base)).body
            everywhere = (await side.admin.get(f"/apis/{GROUP}/v1/listprobes")).body
            return {
                "list": [listed.get("kind"), listed.get("apiVersion")],
                "items": [
                    [i.get("kind"), i.get("apiVersion"), i["metadata"].get("generation")]
                    for i in listed["items"]
                ],
                "all_namespaces": [everywhere.get("kind"), len(everywhere["items"])],
            }

    await contract.agree(probe)


async def test_crd_served_versions_rewrite_api_version(contract: Contract) -> None:
    # No conversion webhook: reading another served version only rewrites apiVersion, and what a
    # version's schema does not declare is pruned on the way (storage and read).
    v1 = spec_schema({"a": {"type": "string"}})
    v2 = spec_schema({"a": {"type": "string"}, "b": {"type": "string", "default": "bee"}})
    versions = [
        {"name": "v1alpha1", "served": True, "storage": False, "schema": {"openAPIV3Schema": v1}},
        {"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": v1}},
        {"name": "v2beta1", "served": True, "storage": False, "schema": {"openAPIV3Schema": v2}},
        {"name": "v3", "served": False, "storage": False, "schema": {"openAPIV3Schema": v1}},
    ]

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        async with installed(side, crd("versionprobes", "VersionProbe", versions=versions)):
            api = f"/apis/{GROUP}"
            out: Obj = {}
            made = await side.admin.post(
                f"{api}/v1/namespaces/{ns}/versionprobes", obj("VersionProbe", "m1", {"a": "x"})
            )
            out["create_v1"] = written(made, "apiVersion", "spec")
            got = await side.admin.get(f"{api}/v2beta1/namespaces/{ns}/versionprobes/m1")
            out["get_v2beta1"] = written(got, "apiVersion", "spec")
            listed = (await side.admin.get(f"{api}/v1alpha1/namespaces/{ns}/versionprobes")).body
            out["list_v1alpha1"] = [listed.get("apiVersion"), [i.get("apiVersion") for i in listed["items"]]]
            made = await side.admin.post(
                f"{api}/v2beta1/namespaces/{ns}/versionprobes",
                obj("VersionProbe", "m2", {"a": "y"}, version="v2beta1"),
            )
            out["create_v2beta1"] = written(made, "apiVersion", "spec")
            got = await side.admin.get(f"{api}/v1/namespaces/{ns}/versionprobes/m2")
            out["get_m2_v1"] = written(got, "apiVersion", "spec")
            wrong = await side.admin.post(
                f"{api}/v2beta1/namespaces/{ns}/versionprobes", obj("VersionProbe", "m3", {"a": "z"})
            )
            out["create_with_other_api_version"] = wrong.status_shape
            unserved = await side.admin.get(f"{api}/v3/namespaces/{ns}/versionprobes")
            out["unserved"] = [unserved.status, unserved.content_type, unserved.body]
            return out

    await contract.agree(probe)


async def test_deleting_a_crd_removes_its_objects(contract: Contract) -> None:
    schema = spec_schema({"size": {"type": "integer"}})
    body = crd("goneprobes", "GoneProbe", schema)

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        base = f"/apis/{GROUP}/v1/namespaces/{ns}/goneprobes"
        name = await install(side, body)
        try:
            assert (await side.admin.post(base, obj("GoneProbe", "g", {"size": 1}))).status == 201
        finally:
            await remove(side, name)
        after = await side.admin.get(base)
        await install(side, body)
        try:
            again = await side.admin.get(base)
        finally:
            await remove(side, name)
        return {
            "while_gone": [after.status, after.content_type, after.body],
            "recreated": [again.status, len(again.body.get("items", []))],
        }

    await contract.agree(probe)


# -- CRDs themselves ---------------------------------------------------------------------------
async def test_crd_names_and_conversion_are_defaulted(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        body = crd(
            "plainerprobes", "PlainerProbe", {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        )
        del body["spec"]["names"]["singular"], body["spec"]["names"]["listKind"]
        async with installed(side, body) as name:
            got = (await side.admin.get(f"{CRDS}/{name}")).body
            status = got["status"]
            return {
                "spec": got["spec"],
                "generation": got["metadata"].get("generation"),
                "acceptedNames": status.get("acceptedNames"),
                "storedVersions": status.get("storedVersions"),
                "conditions": sorted(
                    [c["type"], c["status"], c.get("reason"), c.get("message")]
                    for c in status.get("conditions") or []
                ),
            }

    await contract.agree(probe)


def _field(schema: Obj) -> Obj:
    """A schema whose ``spec.a`` is ``schema``."""
    return spec_schema({"a": schema})


BAD_SCHEMAS: dict[str, Obj] = {
    "property_without_type": {"type": "object", "properties": {"spec": {"properties": {"a": {"type": "string"}}}}},
    "root_not_object": {"type": "string"},
    "root_without_type": {"properties": {"spec": {"type": "object"}}},
    "unknown_type": _field({"type": "strin"}),
    "array_without_items": _field({"type": "array"}),
    "items_without_type": _field({"type": "array", "items": {"enum": ["x"]}}),
    "properties_and_additional": spec_schema({"a": {"type": "string"}}, additionalProperties={"type": "string"}),
    "default_of_wrong_type": _field({"type": "string", "default": 5}),
    "default_not_in_enum": _field({"type": "string", "enum": ["x"], "default": "y"}),
    "default_below_minimum": _field({"type": "integer", "minimum": 3, "default": 1}),
    "default_object_field": _field({"type": "object", "default": {"b": 5}, "properties": {"b": {"type": "string"}}}),
    "bad_pattern": _field({"type": "string", "pattern": "a(b"}),
    "metadata_fields": {"type": "object", "properties": {"metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}}},
    "unique_items": _field({"type": "array", "items": {"type": "string"}, "uniqueItems": True}),
    "ref": _field({"$ref": "#/definitions/x"}),
    "pattern_properties": _field({"type": "object", "patternProperties": {"x": {"type": "string"}}}),
    "preserve_false": _field({"type": "object", "x-kubernetes-preserve-unknown-fields": False}),
    "typed_any_of": _field({"type": "string", "anyOf": [{"type": "string"}]}),
}  # fmt: skip


def _bad_crds() -> list[tuple[str, Obj]]:
    ok = _field({"type": "string"})
    out = [(key, crd("badprobes", "BadProbe", schema)) for key, schema in BAD_SCHEMAS.items()]
    no_schema = crd("badprobes", "BadProbe", ok)
    del no_schema["spec"]["versions"][0]["schema"]
    bad_scope = crd("badprobes", "BadProbe", ok)
    bad_scope["spec"]["scope"] = "Global"
    wrong_name = crd("badprobes", "BadProbe", ok)
    wrong_name["metadata"]["name"] = "wrong.contract.vgpu-guard.io"
    differing = [
        {
            "name": "v1",
            "served": True,
            "storage": True,
            "schema": {"openAPIV3Schema": _field({"minLength": 1})},
        },
        {"name": "v2", "served": True, "storage": False, "schema": {"openAPIV3Schema": ok}},
    ]
    out += [
        ("no_schema", no_schema),
        ("bad_scope", bad_scope),
        ("wrong_name", wrong_name),
        ("group_without_dot", crd("badprobes", "BadProbe", ok, group="nodots")),
        ("second_version_schema", crd("badprobes", "BadProbe", versions=differing)),
    ]
    return out


async def test_crd_with_an_invalid_schema_is_refused(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        out: Obj = {}
        for key, body in _bad_crds():
            reply = await side.admin.post(CRDS, body)
            out[key] = invalid(reply)
            if reply.status == 201:
                await remove(side, body["metadata"]["name"])
        return out

    await contract.agree(probe)


# -- our CRDs and Volcano's --------------------------------------------------------------------
def _manifest(path: Path) -> Obj:
    body: Obj = yaml.safe_load(path.read_text())
    return body


async def test_gpu_ledger_and_gang_placement_validation(contract: Contract) -> None:
    ledger = _manifest(ROOT / "manifests/crds/gpuledgers.vgpu-guard.io.yaml")
    gang = _manifest(ROOT / "manifests/crds/gangplacements.vgpu-guard.io.yaml")

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        out: Obj = {}
        async with installed(side, ledger), installed(side, gang):
            placements = f"/apis/vgpu-guard.io/v1alpha1/namespaces/{ns}/gangplacements"
            ledgers = "/apis/vgpu-guard.io/v1alpha1/gpuledgers"

            def gp(name: str, spec: Any) -> Obj:
                return {
                    "apiVersion": "vgpu-guard.io/v1alpha1",
                    "kind": "GangPlacement",
                    "metadata": {"name": name},
                    "spec": spec,
                }

            for i, spec in enumerate(
                [
                    {
                        "group": "g",
                        "cluster": "ib-a",
                        "minMember": 2,
                        "perPod": {"gpus": [{"count": 1, "cores": 50}]},
                    },
                    {"group": "g", "cluster": "ib-a", "minMember": 0},
                    {"cluster": 3},
                    {
                        "group": "g",
                        "cluster": "c",
                        "minMember": 1,
                        "mode": 3,
                        "perPod": {"cpu": 2, "gpus": {}},
                    },
                ]
            ):
                out[f"gang{i}"] = written(await side.admin.post(placements, gp(f"gp{i}", spec)), "spec")
            missing = await side.admin.post(placements, {"apiVersion": "vgpu-guard.io/v1alpha1", "kind": "GangPlacement",
                                                         "metadata": {"name": "nospec"}})  # fmt: skip
            out["gang_without_spec"] = invalid(missing)
            node = {"apiVersion": "vgpu-guard.io/v1alpha1", "kind": "GPULedger", "metadata": {"name": "probe-node-1"},
                    "spec": {"nodeName": 5, "junk": True}}  # fmt: skip
            out["ledger_bad"] = written(await side.admin.post(ledgers, node), "spec")
            node_ok = {
                "apiVersion": "vgpu-guard.io/v1alpha1",
                "kind": "GPULedger",
                "metadata": {"name": "probe-node-2"},
                "spec": {"nodeName": "n2"},
            }
            out["ledger_ok"] = written(await side.admin.post(ledgers, node_ok), "spec")
            await side.admin.delete(f"{ledgers}/probe-node-2")
        return out

    await contract.agree(probe)


VOLCANO = ROOT / "vgpu_guard/data/crds/volcano"
QUEUES = "/apis/scheduling.volcano.sh/v1beta1/queues"


def _queue(name: str, spec: Any = None) -> Obj:
    body: Obj = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name}}
    if spec is not None:
        body["spec"] = spec
    return body


async def _with_queue_crd(side: Side) -> tuple[str, bool]:
    """Install Volcano's queues CRD unless the cluster has it; (name, installed here)."""
    body = _manifest(VOLCANO / "scheduling.volcano.sh_queues.yaml")
    name: str = body["metadata"]["name"]
    if (await side.admin.get(f"{CRDS}/{name}")).status == 200:
        return name, False
    return await install(side, body), True


async def test_volcano_queue_with_invalid_fields(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        name, ours = await _with_queue_crd(side)
        out: Obj = {}
        try:
            for i, spec in enumerate(
                [
                    {"weight": 0},
                    {"weight": "x", "reclaimable": "yes"},
                    {"capability": {"cpu": "abc", "memory": True, "nvidia.com/gpu": 2}},
                    {"weight": 70000, "priority": 1.5},
                ]
            ):
                reply = await side.admin.post(QUEUES, _queue(f"contract-bad-q{i}", spec))
                out[f"q{i}"] = invalid(reply)
                if reply.status == 201:
                    await side.admin.delete(f"{QUEUES}/contract-bad-q{i}")
        finally:
            if ours:
                await remove(side, name)
        return out

    await contract.agree(probe)


async def test_volcano_queue_defaults(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        name, ours = await _with_queue_crd(side)
        out: Obj = {}
        try:
            for key, spec in (
                ("empty_spec", {}),
                ("null_weight", {"weight": None}),
                ("extra_field", {"capability": {"cpu": "1500m"}, "extra": 1}),
                ("no_spec", None),
            ):
                reply = await side.admin.post(QUEUES, _queue(f"contract-q-{key.replace('_', '-')}", spec))
                out[key] = written(reply, "spec")
                if reply.status == 201:
                    await side.admin.delete(f"{QUEUES}/contract-q-{key.replace('_', '-')}")
        finally:
            if ours:
                await remove(side, name)
        return out

    await contract.agree(probe)
