"""The OpenAPI v2 document as gnostic's ``openapi.v2.Document`` protobuf (what kubectl reads).

kubectl 1.32 fetches ``/openapi/v2`` with
``Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf`` and nothing else, then
``proto.Unmarshal``s the body: JSON would not do. The field numbers are
those of vendor/github.com/googleapis/gnostic/openapiv2/OpenAPIv2.proto in Kubernetes 1.20.2;
the mapping from JSON follows gnostic's compiler (``type`` as a TypeItem list, ``$ref`` as
``_ref``, maps as repeated Named* pairs, vendor extensions and free values as ``Any{yaml}``).
Only what a Kubernetes document contains is encoded.
"""

from __future__ import annotations

from typing import Any

import yaml

from vgpu_guard.apidouble.http._protobuf import tag_bytes, tag_double, tag_varint
from vgpu_guard.engine.objects import Obj

__all__ = ["encode_document"]

_SCHEMA_STRINGS = {"$ref": 1, "format": 2, "title": 3, "description": 4, "pattern": 13, "discriminator": 26}
_SCHEMA_NUMBERS = {"multipleOf": 6, "maximum": 7, "minimum": 9}
_SCHEMA_INTS = {
    "maxLength": 11, "minLength": 12, "maxItems": 14, "minItems": 15,
    "maxProperties": 17, "minProperties": 18,
}  # fmt: skip
_SCHEMA_BOOLS = {"exclusiveMaximum": 8, "exclusiveMinimum": 10, "uniqueItems": 16, "readOnly": 27}
# Query/path/header parameter sub-schemas share a layout (required 1, in 2, description 3, name 4,
# then these), shifted by one where ``allowEmptyValue`` (query and formData only) sits at 5.
_PARAM_REST = (
    "type", "format", "items", "collectionFormat", "default", "maximum", "exclusiveMaximum", "minimum",
    "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems", "minItems", "uniqueItems", "enum",
    "multipleOf",
)  # fmt: skip
_OPERATIONS = {"get": 2, "put": 3, "post": 4, "delete": 5, "options": 6, "head": 7, "patch": 8}


def _any(value: Any) -> bytes:
    """gnostic's Any: the value as YAML text (field 2)."""
    return tag_bytes(2, yaml.safe_dump(value, default_flow_style=False, sort_keys=False))


def _named_any(number: int, name: str, value: Any) -> bytes:
    return tag_bytes(number, tag_bytes(1, name) + tag_bytes(2, _any(value)))


def _extensions(number: int, obj: Obj) -> bytes:
    return b"".join(_named_any(number, k, v) for k, v in obj.items() if k.startswith("x-"))


def _strings(number: int, values: Any) -> bytes:
    return b"".join(tag_bytes(number, str(v)) for v in values or ())


def schema(s: Obj) -> bytes:
    """openapi.v2.Schema."""
    out = bytearray()
    for key, number in _SCHEMA_STRINGS.items():
        if isinstance(s.get(key), str):
            out += tag_bytes(number, s[key])
    if "default" in s:
        out += tag_bytes(5, _any(s["default"]))
    for key, number in _SCHEMA_NUMBERS.items():
        if isinstance(s.get(key), (int, float)) and not isinstance(s[key], bool):
            out += tag_double(number, float(s[key]))
    for key, number in _SCHEMA_INTS.items():
        if isinstance(s.get(key), int):
            out += tag_varint(number, s[key])
    for key, number in _SCHEMA_BOOLS.items():
        out += tag_varint(number, 1 if s.get(key) is True else 0)
    out += _strings(19, s.get("required"))
    for value in s.get("enum") or ():
        out += tag_bytes(20, _any(value))
    extra = s.get("additionalProperties")
    if isinstance(extra, dict):
        out += tag_bytes(21, tag_bytes(1, schema(extra)))
    elif isinstance(extra, bool):
        out += tag_bytes(21, b"\x10\x01" if extra else b"\x10\x00")
    kinds = s.get("type")
    if kinds:
        out += tag_bytes(22, _strings(1, [kinds] if isinstance(kinds, str) else kinds))
    items = s.get("items")
    if isinstance(items, dict):
        out += tag_bytes(23, tag_bytes(1, schema(items)))
    elif isinstance(items, list):
        out += tag_bytes(23, b"".join(tag_bytes(1, schema(i)) for i in items))
    for sub in s.get("allOf") or ():
        out += tag_bytes(24, schema(sub))
    props = s.get("properties")
    if isinstance(props, dict):
        named = b"".join(tag_bytes(1, tag_bytes(1, n) + tag_bytes(2, schema(p))) for n, p in props.items())
        out += tag_bytes(25, named)
    if "example" in s:
        out += tag_bytes(30, _any(s["example"]))
    out += _extensions(31, s)
    return bytes(out)


def _sub_schema(p: Obj, *, empty_value_field: bool) -> bytes:
    out = bytearray(tag_varint(1, 1 if p.get("required") is True else 0))
    for key, number in (("in", 2), ("description", 3), ("name", 4)):
        if p.get(key):
            out += tag_bytes(number, str(p[key]))
    shift = 5
    if empty_value_field:
        out += tag_varint(5, 1 if p.get("allowEmptyValue") else 0)
        shift = 6
    for offset, key in enumerate(_PARAM_REST):
        number, value = shift + offset, p.get(key)
        if value is None:
            continue
        if key in ("type", "format", "collectionFormat", "pattern"):
            out += tag_bytes(number, str(value))
        elif key == "items":
            out += tag_bytes(number, _primitives(value))
        elif key == "default":
            out += tag_bytes(number, _any(value))
        elif key in ("maximum", "minimum", "multipleOf"):
            out += tag_double(number, float(value))
        elif key in ("exclusiveMaximum", "exclusiveMinimum", "uniqueItems"):
            out += tag_varint(number, 1 if value else 0)
        elif key == "enum":
            out += b"".join(tag_bytes(number, _any(v)) for v in value)
        else:
            out += tag_varint(number, int(value))
    out += _extensions(shift + len(_PARAM_REST), p)
    return bytes(out)


def _primitives(p: Obj) -> bytes:
    """PrimitivesItems: type 1, format 2, items 3 (the rest does not occur in Kubernetes')."""
    out = tag_bytes(1, p["type"]) if p.get("type") else b""
    out += tag_bytes(2, p["format"]) if p.get("format") else b""
    return out + (tag_bytes(3, _primitives(p["items"])) if isinstance(p.get("items"), dict) else b"")


def _parameter(p: Obj) -> bytes:
    """ParametersItem: a $ref, a body parameter, or a non-body one by its ``in``."""
    if "$ref" in p:
        return tag_bytes(2, tag_bytes(1, p["$ref"]))
    if p.get("in") == "body":
        body = tag_bytes(1, p.get("description", "")) if p.get("description") else b""
        body += (
            tag_bytes(2, p.get("name", ""))
            + tag_bytes(3, "body")
            + tag_varint(4, 1 if p.get("required") else 0)
        )
        body += tag_bytes(5, schema(p.get("schema") or {})) + _extensions(6, p)
        return tag_bytes(1, tag_bytes(1, body))
    where = {"header": 1, "formData": 2, "query": 3, "path": 4}.get(str(p.get("in")), 3)
    sub = _sub_schema(p, empty_value_field=where in (2, 3))
    return tag_bytes(1, tag_bytes(2, tag_bytes(where, sub)))


def _response(r: Obj) -> bytes:
    out = tag_bytes(1, r.get("description", ""))
    if isinstance(r.get("schema"), dict):
        out += tag_bytes(2, tag_bytes(1, schema(r["schema"])))
    return out + _extensions(5, r)


def _operation(op: Obj) -> bytes:
    out = bytearray(_strings(1, op.get("tags")))
    for key, number in (("summary", 2), ("description", 3), ("operationId", 5)):
        if op.get(key):
            out += tag_bytes(number, op[key])
    out += _strings(6, op.get("produces")) + _strings(7, op.get("consumes"))
    out += b"".join(tag_bytes(8, _parameter(p)) for p in op.get("parameters") or ())
    codes = b"".join(
        tag_bytes(1, tag_bytes(1, code) + tag_bytes(2, tag_bytes(1, _response(r))))
        for code, r in (op.get("responses") or {}).items()
    )
    out += tag_bytes(9, codes) + _strings(10, op.get("schemes"))
    out += tag_varint(11, 1 if op.get("deprecated") else 0) + _extensions(13, op)
    return bytes(out)


def _path_item(item: Obj) -> bytes:
    out = bytearray(tag_bytes(1, item["$ref"]) if item.get("$ref") else b"")
    for verb, number in _OPERATIONS.items():
        if isinstance(item.get(verb), dict):
            out += tag_bytes(number, _operation(item[verb]))
    out += b"".join(tag_bytes(9, _parameter(p)) for p in item.get("parameters") or ())
    return bytes(out) + _extensions(10, item)


def _security_definition(d: Obj) -> bytes:
    """Only apiKey occurs in Kubernetes' document (BearerToken)."""
    body = tag_bytes(1, d.get("type", "")) + tag_bytes(2, d.get("name", "")) + tag_bytes(3, d.get("in", ""))
    body += tag_bytes(4, d["description"]) if d.get("description") else b""
    return tag_bytes(2, body + _extensions(5, d))


def encode_document(doc: Obj) -> bytes:
    """openapi.v2.Document for a Kubernetes OpenAPI v2 document."""
    out = bytearray(tag_bytes(1, doc.get("swagger", "2.0")))
    info = doc.get("info") or {}
    out += tag_bytes(2, tag_bytes(1, info.get("title", "")) + tag_bytes(2, info.get("version", "")))
    paths = b"".join(
        tag_bytes(2, tag_bytes(1, p) + tag_bytes(2, _path_item(item)))
        for p, item in doc.get("paths", {}).items()
    )
    out += tag_bytes(8, paths)
    defs = b"".join(
        tag_bytes(1, tag_bytes(1, n) + tag_bytes(2, schema(s))) for n, s in doc.get("definitions", {}).items()
    )
    out += tag_bytes(9, defs)
    for requirement in doc.get("security") or ():
        pairs = b"".join(
            tag_bytes(1, tag_bytes(1, name) + tag_bytes(2, _strings(1, scopes)))
            for name, scopes in requirement.items()
        )
        out += tag_bytes(12, pairs)
    secdefs = b"".join(
        tag_bytes(1, tag_bytes(1, n) + tag_bytes(2, _security_definition(d)))
        for n, d in (doc.get("securityDefinitions") or {}).items()
    )
    if secdefs:
        out += tag_bytes(13, secdefs)
    return bytes(out)
