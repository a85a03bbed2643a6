"""``/openapi/v2``: the document kube-apiserver 1.20 serves, cut to what the double serves.

kubectl 1.32 asks for ``/openapi/v3`` first; a 1.20 server answers 404 there and kubectl falls back
to v2, which feeds ``kubectl explain`` and kubectl's (and Helm's) client-side validation. So the
double serves v2 only, like 1.20:

- the built-in paths and definitions are vendored from Kubernetes 1.20.2's swagger.json
  (``vgpu_guard/data/openapi/v2-builtin.json``, made by ``tests/apidouble/vendor_openapi.py``):
  only the resources the double serves, never more;
- each served CRD version adds ``<reversed group>.<version>.<Kind>`` and its list, built from the
  structural schema as apiextensions-apiserver 1.20 builds them (controller/openapi/builder and
  v2/conversion.go); CRD paths are not published (fewer than the real server, never more).

JSON when JSON is acceptable, gnostic's protobuf (``_openapi_pb``) when that is asked for, and a
bare 406 otherwise, as kube-openapi's handler answers.
"""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from importlib import resources
from typing import Any

from vgpu_guard.apidouble._types import TypeInfo
from vgpu_guard.apidouble.http._openapi_pb import encode_document
from vgpu_guard.apidouble.http._protobuf import fields, tag_bytes
from vgpu_guard.engine.objects import Obj

__all__ = [
    "PROTO_V2",
    "builtin_document",
    "crd_definitions",
    "openapi_document",
    "openapi_v2_answer",
    "rest_friendly_name",
    "unserved_feature",
]

_DEFS = "#/definitions/"
_OBJECT_META = _DEFS + "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_LIST_META = _DEFS + "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"
_CONVENTIONS = "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md"
_METADATA_DOC = f"Standard object's metadata. More info: {_CONVENTIONS}#metadata"
_LIST_METADATA_DOC = f"Standard list metadata. More info: {_CONVENTIONS}#types-kinds"
_GVK = "x-kubernetes-group-version-kind"
# What a structural schema keeps (apiserver/schema: Generic, Extensions, ValueValidation without
# the junctors, which v2 conversion drops); anything else in the CRD does not reach the document.
_KEPT = frozenset(
    {
        "description", "type", "title", "default", "format", "maximum", "exclusiveMaximum", "minimum",
        "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems", "minItems", "uniqueItems",
        "multipleOf", "enum", "maxProperties", "minProperties", "required", "properties", "items",
        "additionalProperties", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource",
        "x-kubernetes-int-or-string", "x-kubernetes-list-map-keys", "x-kubernetes-list-type",
        "x-kubernetes-map-type",
    }
)  # fmt: skip


@lru_cache(maxsize=1)
def builtin_document() -> Obj:
    """The vendored 1.20.2 subset (paths and definitions of the built-in kinds served)."""
    text = resources.files("vgpu_guard").joinpath("data/openapi/v2-builtin.json").read_text(encoding="utf-8")
    doc: Obj = json.loads(text)
    return doc


def rest_friendly_name(group: str, version: str, kind: str) -> str:
    """util.ToRESTFriendlyName: the group's domain reversed (``vgpu-guard.io`` -> ``io.vgpu-guard``)."""
    return ".".join([*reversed(group.split(".")), version, kind])


def _type_meta(name: str) -> Obj:
    """TypeMeta's apiVersion/kind property as every 1.20 definition words it."""
    prop: Obj = builtin_document()["definitions"]["io.k8s.api.core.v1.Pod"]["properties"][name]
    return copy.deepcopy(prop)


def _to_v2(schema: Any) -> Any:
    """One structural schema node as v2 conversion leaves it (ToStructuralOpenAPIV2)."""
    if not isinstance(schema, dict):
        return schema
    out: Obj = {k: copy.deepcopy(v) for k, v in schema.items() if k in _KEPT}
    props = schema.get("properties")
    if isinstance(props, dict):
        out["properties"] = {name: _to_v2(sub) for name, sub in props.items()}
        nullable = {n for n, sub in props.items() if isinstance(sub, dict) and sub.get("nullable")}
        if nullable and isinstance(out.get("required"), list):
            out["required"] = [r for r in out["required"] if r not in nullable] or None
    if isinstance(schema.get("items"), dict):
        out["items"] = _to_v2(schema["items"])
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        out["additionalProperties"] = _to_v2(extra)
        if extra.get("nullable"):
            out.pop("required", None)
    if schema.get("nullable"):
        for key in ("type", "items", "properties"):
            out.pop(key, None)
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        out.pop("items", None)
        out.pop("properties", None)
        if out.get("type") == "object":
            del out["type"]
    if out.get("type") == "array" and "items" not in out:
        del out["type"]
    if out.get("required") is None:
        out.pop("required", None)
    _embed(out)
    return out


def _embed(node: Obj) -> None:
    """addEmbeddedProperties: an embedded resource gets apiVersion, kind and metadata."""
    if not node.get("x-kubernetes-embedded-resource") or node.get("x-kubernetes-preserve-unknown-fields"):
        return
    props = node.setdefault("properties", {})
    props["apiVersion"] = {
        **_type_meta("apiVersion"),
        "description": (
            "apiVersion defines the versioned schema of this representation of an object. More info: "
            f"{_CONVENTIONS}#resources"
        ),
    }
    props["kind"] = {
        **_type_meta("kind"),
        "description": (
            "kind is a string value representing the type of this object. In CamelCase. More info: "
            f"{_CONVENTIONS}#types-kinds"
        ),
    }
    props["metadata"] = {"description": _METADATA_DOC, "$ref": _OBJECT_META}
    required = node.setdefault("required", [])
    required.extend(k for k in ("kind", "apiVersion") if k not in required)  # fmt: skip


def crd_definitions(info: TypeInfo) -> Obj:
    """The definitions one served CRD adds: per served version, the kind and its list."""
    out: Obj = {}
    for version in info.versions:
        gvk = [{"group": info.group, "kind": info.kind, "version": version}]
        raw = info.schemas[version].schema if version in info.schemas else None
        if not isinstance(raw, dict) or raw.get("x-kubernetes-preserve-unknown-fields"):
            kind_schema: Obj = {"type": "object"}
        else:
            kind_schema = _to_v2(raw)
            props = kind_schema.setdefault("properties", {})
            props["metadata"] = {"description": _METADATA_DOC, "$ref": _OBJECT_META}
            props["apiVersion"] = _type_meta("apiVersion")
            props["kind"] = _type_meta("kind")
        kind_schema[_GVK] = gvk
        name = rest_friendly_name(info.group, version, info.kind)
        out[name] = kind_schema
        out[rest_friendly_name(info.group, version, info.list_kind)] = {
            "description": f"{info.list_kind} is a list of {info.kind}",
            "required": ["items"],
            "properties": {
                "apiVersion": _type_meta("apiVersion"),
                "items": {
                    "description": f"List of {info.plural}. More info: {_CONVENTIONS}",
                    "type": "array",
                    "items": {"$ref": _DEFS + name},
                },
                "kind": _type_meta("kind"),
                "metadata": {"description": _LIST_METADATA_DOC, "$ref": _LIST_META},
            },
            _GVK: [{"group": info.group, "kind": info.list_kind, "version": version}],
        }
    return out


def openapi_document(types: list[TypeInfo]) -> Obj:
    """The whole v2 document: vendored built-ins plus the served CRDs' definitions."""
    base = builtin_document()
    definitions = dict(base["definitions"])
    for info in types:
        if info.crd_name is not None:
            definitions.update(crd_definitions(info))
    return {**base, "definitions": dict(sorted(definitions.items()))}


PROTO_V2 = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"


@lru_cache(maxsize=1)
def _builtin_protobuf() -> bytes:
    return encode_document(builtin_document())


def openapi_v2_answer(accept: str | None, types: list[TypeInfo]) -> tuple[int, str, bytes]:
    """(status, content type, body) as kube-openapi's handler answers ``/openapi/v2``: the first
    clause (by preference) naming JSON or gnostic protobuf, ``*`` matching; else a bare 406."""
    for clause in _accept_clauses(accept or "*/*"):
        major, _, minor = clause.partition("/")
        if major in ("application", "*") and minor in ("json", "*"):
            return (
                200,
                "application/json",
                json.dumps(openapi_document(types), separators=(",", ":")).encode(),
            )
        if major in ("application", "*") and minor in (PROTO_V2.split("/")[1], "*"):
            # Repeated fields of an embedded message merge when it appears twice, so the CRDs'
            # definitions are a second Definitions field after the cached built-in document.
            crds: Obj = {}
            for info in types:
                if info.crd_name is not None:
                    crds.update(crd_definitions(info))
            extra = encode_document({"definitions": crds}) if crds else b""
            return 200, "application/octet-stream", _builtin_protobuf() + _definitions_only(extra)
    return 406, "", b""


def _definitions_only(encoded: bytes) -> bytes:
    """The Definitions field (9) of an encoded document, dropping its swagger/info/paths fields."""
    out = bytearray()
    for number, value in fields(encoded):
        if number == 9 and isinstance(value, bytes):
            out += tag_bytes(9, value)
    return bytes(out)


def _accept_clauses(accept: str) -> list[str]:
    """goautoneg order: quality first; each clause as ``type/subtype`` without parameters."""
    ranked: list[tuple[float, int, str]] = []
    for i, raw in enumerate(accept.split(",")):
        media, *params = (p.strip() for p in raw.split(";"))
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if media and q > 0:
            ranked.append((-q, i, media.lower()))
    return [media for _, _, media in sorted(ranked)]


@lru_cache(maxsize=1)
def _unserved() -> frozenset[str]:
    text = (
        resources.files("vgpu_guard").joinpath("data/openapi/unserved-1.20.json").read_text(encoding="utf-8")
    )
    return frozenset(json.loads(text))


def unserved_feature(path: str) -> str | None:
    """The Kubernetes 1.20 resource a path names that the double does not serve (``pods/log``,
    ``deployments.apps/v1``), None for a path no 1.20 server serves either."""
    segs = [s for s in path.split("/") if s]
    if len(segs) >= 2 and segs[0] == "api":
        group, version, rest = "", segs[1], segs[2:]
    elif len(segs) >= 3 and segs[0] == "apis":
        group, version, rest = segs[1], segs[2], segs[3:]
    else:
        return None
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] != "finalize" and rest[2] != "status":
        rest = rest[2:]
    if not rest:
        return None
    sub = rest[2] if len(rest) >= 3 else ""
    key = "/".join([group, version, rest[0]] + ([sub] if sub else []))
    if key not in _unserved():
        return None
    what = f"{rest[0]}/{sub}" if sub else rest[0]
    return f"{what}.{group}/{version}" if group else f"{what} (v1)"
