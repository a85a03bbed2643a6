"""Structural schemas of CRDs: pruning, defaulting and validation as kube-apiserver applies them.

Follows the Kubernetes docs "Custom Resources / Versions in CustomResourceDefinitions" and
"Extend the Kubernetes API with CustomResourceDefinitions" (sections *Specifying a structural
schema*, *Field pruning*, *Defaulting*, *Validation*) and
staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/ (pruning/algorithm.go,
defaulting/algorithm.go). The order on a write is: prune fields the schema does not declare, apply
``default``s, then validate; ``apiVersion``, ``kind`` and ``metadata`` at the root are never pruned
by the schema (metadata is validated as ObjectMeta elsewhere).

Validation maps the OpenAPI v3 subset to JSON Schema draft 4 (same ``exclusiveMinimum`` semantics)
and renders errors in the API server's ``field.Error`` wording, because users compare texts.
``x-kubernetes-validations`` (CEL) rules are NOT evaluated: ``cel_rules`` reports how many a schema
carries so the double can say so (a warning on CRD create) instead of pretending.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from typing import Any

import jsonschema

from vgpu_guard.apidouble._status import Cause

__all__ = ["StructuralSchema", "field_path"]

_ROOT_KEEP = ("apiVersion", "kind", "metadata")


def field_path(parts: Iterable[str | int]) -> str:
    """``['spec', 'tasks', 0, 'name']`` -> ``spec.tasks[0].name`` (field.Path.String)."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += f".{p}" if out else str(p)
    return out


def _to_jsonschema(s: Any) -> Any:
    """Translate one OpenAPI v3 (structural) schema node to JSON Schema draft 4."""
    if not isinstance(s, dict):
        return {}
    out: dict[str, Any] = {}
    for key in (
        "enum", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "pattern", "minLength",
        "maxLength", "minItems", "maxItems", "uniqueItems", "minProperties", "maxProperties", "multipleOf",
    ):  # fmt: skip
        if key in s:
            out[key] = s[key]
    if s.get("required"):
        out["required"] = list(s["required"])
    if "properties" in s:
        out["properties"] = {k: _to_jsonschema(v) for k, v in s["properties"].items()}
    if "items" in s:
        out["items"] = _to_jsonschema(s["items"])
    if isinstance(s.get("additionalProperties"), dict):
        out["additionalProperties"] = _to_jsonschema(s["additionalProperties"])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in s:
            out[key] = [_to_jsonschema(x) for x in s[key]]
    if "not" in s:
        out["not"] = _to_jsonschema(s["not"])
    if s.get("x-kubernetes-int-or-string"):
        out["anyOf"] = [*out.get("anyOf", []), {"type": "integer"}, {"type": "string"}]
    elif "type" in s:
        out["type"] = [s["type"], "null"] if s.get("nullable") else s["type"]
    if s.get("nullable") and "enum" in out:
        out["enum"] = [*out["enum"], None]
    return out


def _go_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _render(value: Any) -> str:
    """A value as ``field.Invalid`` prints it: strings quoted, scalars bare, composites by type."""
    if isinstance(value, dict | list):
        return f'"{_go_type(value)}"'
    return json.dumps(value)


class StructuralSchema:
    """One CRD version's ``openAPIV3Schema``: ``prune``, ``apply_defaults``, ``validate``."""

    def __init__(self, schema: dict[str, Any]):
        self.schema = schema
        root = copy.deepcopy(_to_jsonschema(schema))
        # metadata is ObjectMeta, checked by the generic object-meta validation, not the schema.
        root.get("properties", {}).pop("metadata", None)
        self._validator = jsonschema.Draft4Validator(root)
        self.cel_rules = self._count_cel(schema)

    @staticmethod
    def _count_cel(s: Any) -> int:
        if isinstance(s, dict):
            own = len(s.get("x-kubernetes-validations") or [])
            return own + sum(StructuralSchema._count_cel(v) for v in s.values())
        if isinstance(s, list):
            return sum(StructuralSchema._count_cel(v) for v in s)
        return 0

    # -- pruning -----------------------------------------------------------------------------
    def prune(self, obj: dict[str, Any]) -> None:
        """Drop, in place, every field the schema does not declare (pruning/algorithm.go)."""
        self._prune(obj, self.schema, root=True)

    def _prune(self, value: Any, s: Any, *, root: bool = False) -> None:
        if not isinstance(s, dict):
            return
        if isinstance(value, dict):
            props = s.get("properties")
            additional = s.get("additionalProperties")
            preserve = bool(s.get("x-kubernetes-preserve-unknown-fields"))
            embedded = bool(s.get("x-kubernetes-embedded-resource"))
            for key in list(value):
                if (root or embedded) and key in _ROOT_KEEP:
                    continue
                if props is not None and key in props:
                    self._prune(value[key], props[key])
                elif isinstance(additional, dict):
                    self._prune(value[key], additional)
                elif not preserve and additional is not True:
                    del value[key]
        elif isinstance(value, list) and isinstance(s.get("items"), dict):
            for item in value:
                self._prune(item, s["items"])

    # -- defaulting --------------------------------------------------------------------------
    def apply_defaults(self, obj: dict[str, Any]) -> None:
        """Fill absent fields that declare a ``default``, in place (defaulting/algorithm.go)."""
        self._default(obj, self.schema, root=True)

    def _default(self, value: Any, s: Any, *, root: bool = False) -> None:
        if not isinstance(s, dict):
            return
        if isinstance(value, dict):
            for key, sub in (s.get("properties") or {}).items():
                if root and key == "metadata":
                    continue
                if key not in value and isinstance(sub, dict) and "default" in sub:
                    value[key] = copy.deepcopy(sub["default"])
                if key in value:
                    self._default(value[key], sub)
            additional = s.get("additionalProperties")
            if isinstance(additional, dict):
                props = s.get("properties") or {}
                for key, item in value.items():
                    if key not in props:
                        self._default(item, additional)
        elif isinstance(value, list) and isinstance(s.get("items"), dict):
            for item in value:
                self._default(item, s["items"])

    # -- validation --------------------------------------------------------------------------
    def validate(self, obj: dict[str, Any]) -> list[Cause]:
        """Every schema violation as a ``Cause`` with its field path, in path order."""
        causes: list[Cause] = []
        for err in sorted(self._validator.iter_errors(obj), key=lambda e: [str(p) for p in e.absolute_path]):
            causes.extend(self._causes(err))
        return causes

    @staticmethod
    def _causes(err: jsonschema.ValidationError) -> list[Cause]:
        path = field_path(err.absolute_path)
        at = path or "<root>"
        v: Any = err.validator_value
        inst: Any = err.instance
        bad = f"{at}: Invalid value: {_render(inst)}: {at} in body"
        match err.validator:
            case "required":
                missing = [k for k in v if isinstance(inst, dict) and k not in inst]
                fields = [f"{path}.{k}" if path else k for k in missing]
                return [Cause("FieldValueRequired", f, f"{f}: Required value") for f in fields]
            case "type":
                want = v if isinstance(v, str) else next(t for t in v if t != "null")
                got = _go_type(inst)
                msg = f'{at}: Invalid value: "{got}": {at} in body must be of type {want}: "{got}"'
            case "anyOf" if any(sub.get("type") == "integer" for sub in v if isinstance(sub, dict)):
                msg = f"{bad} must be of type integer or string"
            case "enum":
                allowed = ", ".join(_render(x) for x in v)
                msg = f"{at}: Unsupported value: {_render(inst)}: supported values: {allowed}"
                return [Cause("FieldValueNotSupported", path, msg)]
            case "minimum":
                msg = f"{bad} should be greater than or equal to {v}"
            case "maximum":
                msg = f"{bad} should be less than or equal to {v}"
            case "minLength":
                msg = f"{bad} should be at least {v} chars long"
            case "maxLength":
                return [Cause("FieldValueTooLong", path, f"{at}: Too long: may not be more than {v} bytes")]
            case "pattern":
                msg = f"{bad} should match '{v}'"
            case "minItems":
                msg = f"{at}: Invalid value: {len(inst)}: {at} in body should have at least {v} items"
            case "maxItems":
                msg = f"{at}: Too many: {len(inst)}: must have at most {v} items"
                return [Cause("FieldValueTooMany", path, msg)]
            case _:
                msg = f"{at}: Invalid value: {_render(inst)}: {err.message}"
        return [Cause("FieldValueInvalid", path, msg)]
