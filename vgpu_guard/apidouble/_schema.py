"""Structural schemas of CRDs: pruning, defaulting and validation as kube-apiserver applies them.

Follows the Kubernetes docs "Custom Resources / Versions in CustomResourceDefinitions" and
"Extend the Kubernetes API with CustomResourceDefinitions" (sections *Specifying a structural
schema*, *Field pruning*, *Defaulting*, *Validation*) and
staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/ (pruning/algorithm.go,
defaulting/algorithm.go, defaulting/prunenulls.go). The order on a write is: prune fields the
schema does not declare, drop ``null``s the schema does not allow (unless a ``default`` replaces
them), apply ``default``s, then validate; ``apiVersion``, ``kind`` and ``metadata`` at the root are
never pruned by the schema (metadata is validated as ObjectMeta elsewhere).

Validation is go-openapi's ``SchemaValidator`` as apiextensions-apiserver runs it (checked against
a real 1.20 API server by tests/contract/test_crds.py): every failing check of a value is reported
(type, enum, number bounds, items, properties), except that the string checks stop at the first
failure (maxLength, then minLength, then pattern); an ``anyOf`` nothing matches adds the path-less
``<nil>`` error and the first alternative's errors. Errors use the API server's ``field.Error``
wording, because users compare texts. Where a later Kubernetes words a check differently and the
double follows the later one (maxLength, maxItems, array item paths with ``[i]``), the contract
suite lists it as a known difference.

``schema_problems`` is the part of CRD validation that checks a schema itself (structural rules,
defaults that fail their own schema, regular expressions RE2 cannot compile).
``x-kubernetes-validations`` (CEL) rules are NOT evaluated: ``cel_rules`` reports how many a schema
carries so the double can say so (a warning on CRD create) instead of pretending.
"""

from __future__ import annotations

import copy
import decimal
import functools
import json
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

from vgpu_guard.apidouble._status import Cause
from vgpu_guard.engine.objects import Obj

__all__ = ["StructuralSchema", "field_path", "schema_problems"]

_ROOT_KEEP = ("apiVersion", "kind", "metadata")
_TYPES = ("array", "boolean", "integer", "number", "object", "string")
Path = tuple[str | int, ...]


def field_path(parts: Iterable[str | int]) -> str:
    """``['spec', 'tasks', 0, 'name']`` -> ``spec.tasks[0].name`` (field.Path.String)."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += f".{p}" if out else str(p)
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


def _go_float(value: float) -> str:
    """A float64 as Go's ``%v`` prints it: shortest digits, ``e+06`` from an exponent of 6 up."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "0"
    sign, digits, exponent = decimal.Decimal(repr(float(value))).normalize().as_tuple()
    text = "".join(map(str, digits))
    dp = len(text) + int(exponent)  # where the decimal point sits in ``text``
    minus = "-" if sign else ""
    if dp - 1 < -4 or dp - 1 >= 6:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        exp = dp - 1
        return f"{minus}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if dp <= 0:
        return f"{minus}0.{'0' * -dp}{text}"
    if dp >= len(text):
        return f"{minus}{text}{'0' * (dp - len(text))}"
    return f"{minus}{text[:dp]}.{text[dp:]}"


def _number(limit: Any, data: Any) -> str:
    """A bound from the schema as go-openapi prints it: an int64 when checking integer data
    against an integral bound (``MaximumInt``), otherwise a float64 (``1e+06``)."""
    if isinstance(data, int) and float(limit).is_integer():
        return str(int(limit))
    return _go_float(float(limit))


def _render(value: Any) -> str:
    """A value as ``field.Error`` prints it: strings (and null) quoted, scalars bare."""
    if value is None:
        return '"null"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return f'"{_go_type(value)}"'


def _quoted(value: Any) -> str:
    """One of ``field.NotSupported``'s supported values: strings as they are, others as JSON, quoted."""
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return json.dumps(text, ensure_ascii=False)


def _same(a: Any, b: Any) -> bool:
    """JSON equality without Python's ``1 == 1.0 == True``."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


_PERL_ONLY = re.compile(r"\(\?(<?[=!]|P?<\w+>|P=)")


@functools.lru_cache(maxsize=512)
def _regex(pattern: str) -> re.Pattern[str] | str | None:
    """The compiled pattern; a Go-worded error text when RE2 would refuse it; None when unsure."""
    perl = _PERL_ONLY.search(pattern)
    if perl:
        return f"invalid or unsupported Perl syntax: `{perl.group(0)}`"
    backref = re.search(r"\\[1-9]", pattern)
    if backref:
        return f"invalid escape sequence: `{backref.group(0)}`"
    try:
        return re.compile(pattern)
    except re.error as e:
        pos = e.pos if e.pos is not None else 0
        msg = str(e.msg)
        if msg.startswith("missing ), unterminated subpattern"):
            return f"missing closing ): `{pattern}`"
        if msg.startswith("unterminated character set"):
            return f"missing closing ]: `{pattern[pos:]}`"
        if msg.startswith("multiple repeat"):
            return f"invalid nested repetition operator: `{pattern[max(pos - 1, 0) : pos + 1]}`"
        if msg.startswith("nothing to repeat"):
            return f"missing argument to repetition operator: `{pattern[pos : pos + 1]}`"
        if msg.startswith("unbalanced parenthesis"):
            return f"unexpected ): `{pattern}`"
        return None  # Go's RE2 may well accept what Python cannot compile (\p{L}, \z): do not refuse


def _is_type(value: Any, want: str) -> bool:
    match want:
        case "string":
            return isinstance(value, str)
        case "boolean":
            return isinstance(value, bool)
        case "integer":
            if isinstance(value, float):  # go-openapi: a float64 without a fraction is an integer
                return value.is_integer()
            return isinstance(value, int) and not isinstance(value, bool)
        case "number":
            return isinstance(value, int | float) and not isinstance(value, bool)
        case "array":
            return isinstance(value, list)
        case "object":
            return isinstance(value, dict)
    return True


class _Validator:
    """One validation run: causes at ``field_root`` + path; "in body" names the path in the value."""

    def __init__(self, field_root: str = ""):
        self.field_root = field_root

    def _paths(self, path: Path) -> tuple[str, str]:
        """(field path for the cause, path the "in body" text names) of ``path``."""
        rel = field_path(path)
        if not self.field_root or not rel:
            return (rel or self.field_root), rel
        return (self.field_root + rel if rel.startswith("[") else f"{self.field_root}.{rel}"), rel

    def run(self, value: Any, schema: Any) -> list[Cause]:
        out: list[Cause] = []
        self._value(value, schema, (), out, root=True)
        return out

    def _invalid(self, out: list[Cause], path: Path, shown: str, why: str) -> None:
        at, body = self._paths(path)
        out.append(Cause("FieldValueInvalid", at, f"{at}: Invalid value: {shown}: {body} in body {why}"))

    def _value(self, value: Any, s: Any, path: Path, out: list[Cause], *, root: bool = False) -> None:
        if not isinstance(s, dict):
            return
        types = ["integer", "string"] if s.get("x-kubernetes-int-or-string") else []
        if not types and isinstance(s.get("type"), str) and s["type"]:
            types = [s["type"]]
        if value is None:
            if types and not s.get("nullable"):
                got = '"null"'
                self._invalid(out, path, got, f"must be of type {','.join(types)}: {got}")
            self._enum(value, s, path, out)
            return
        if types and not any(_is_type(value, t) for t in types):
            got = f'"{_go_type(value)}"'
            self._invalid(out, path, got, f"must be of type {','.join(types)}: {got}")
        self._composition(value, s, path, out)
        if isinstance(value, str):
            self._string(value, s, path, out)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            self._bounds(value, s, path, out)
        elif isinstance(value, list):
            self._items(value, s, path, out)
        self._enum(value, s, path, out)
        if isinstance(value, dict):
            self._object(value, s, path, out, root=root)

    def _composition(self, value: Any, s: Obj, path: Path, out: list[Cause]) -> None:
        _, body = self._paths(path)
        branches: Sequence[Any] = s.get("anyOf") or ()
        if branches:
            results = [self._branch(value, b, path) for b in branches]
            if all(results):
                at = "<nil>"
                why = f'"{body}" must validate at least one schema (anyOf)'
                out.append(Cause("FieldValueInvalid", at, f'{at}: Invalid value: "": {why}'))
                out.extend(results[0])
        branches = s.get("allOf") or ()
        if branches:
            results = [self._branch(value, b, path) for b in branches]
            for r in results:
                out.extend(r)
            failed = sum(1 for r in results if r)
            if failed:
                extra = "Validated none" if failed == len(results) else ""
                why = f'"{body}" must validate all the schemas (allOf){extra}'
                out.append(Cause("FieldValueInvalid", "<nil>", f'<nil>: Invalid value: "": {why}'))
        branches = s.get("oneOf") or ()
        if branches:
            results = [self._branch(value, b, path) for b in branches]
            valid = sum(1 for r in results if not r)
            if valid != 1:
                extra = "Found none valid" if valid == 0 else f"Found {valid} valid alternatives"
                why = f'"{body}" must validate one and only one schema (oneOf). {extra}'
                out.append(Cause("FieldValueInvalid", "<nil>", f'<nil>: Invalid value: "": {why}'))
                if valid == 0:
                    out.extend(results[0])
        if isinstance(s.get("not"), dict) and not self._branch(value, s["not"], path):
            why = f'"{body}" must not validate the schema (not)'
            out.append(Cause("FieldValueInvalid", "<nil>", f'<nil>: Invalid value: "": {why}'))

    def _branch(self, value: Any, s: Any, path: Path) -> list[Cause]:
        sub: list[Cause] = []
        self._value(value, s, path, sub)
        return sub

    def _string(self, value: str, s: Obj, path: Path, out: list[Cause]) -> None:
        # go-openapi's stringValidator returns at the first failing check.
        at, _ = self._paths(path)
        if "maxLength" in s and len(value) > int(s["maxLength"]):
            msg = f"{at}: Too long: may not be more than {int(s['maxLength'])} bytes"
            out.append(Cause("FieldValueTooLong", at, msg))
        elif "minLength" in s and len(value) < int(s["minLength"]):
            self._invalid(out, path, _render(value), f"should be at least {int(s['minLength'])} chars long")
        elif isinstance(s.get("pattern"), str):
            compiled = _regex(s["pattern"])
            if isinstance(compiled, re.Pattern) and not compiled.search(value):
                self._invalid(out, path, _render(value), f"should match '{s['pattern']}'")

    def _bounds(self, value: float, s: Obj, path: Path, out: list[Cause]) -> None:
        shown = _render(value)
        factor = s.get("multipleOf")
        if isinstance(factor, int | float) and factor > 0:
            mult = value / factor if factor >= 1 else (1 / factor) * value
            if not math.isclose(mult, round(mult), rel_tol=0, abs_tol=1e-9):
                self._invalid(out, path, shown, f"should be a multiple of {_number(factor, value)}")
        if isinstance(s.get("maximum"), int | float):
            limit = s["maximum"]
            if s.get("exclusiveMaximum") and value >= limit:
                self._invalid(out, path, shown, f"should be less than {_number(limit, value)}")
            elif value > limit:
                self._invalid(out, path, shown, f"should be less than or equal to {_number(limit, value)}")
        if isinstance(s.get("minimum"), int | float):
            limit = s["minimum"]
            if s.get("exclusiveMinimum") and value <= limit:
                self._invalid(out, path, shown, f"should be greater than {_number(limit, value)}")
            elif value < limit:
                self._invalid(out, path, shown, f"should be greater than or equal to {_number(limit, value)}")

    def _items(self, value: list[Any], s: Obj, path: Path, out: list[Cause]) -> None:
        if isinstance(s.get("items"), dict):
            for i, item in enumerate(value):
                self._value(item, s["items"], (*path, i), out)
        at, _ = self._paths(path)
        if "minItems" in s and len(value) < int(s["minItems"]):
            self._invalid(out, path, str(len(value)), f"should have at least {int(s['minItems'])} items")
        if "maxItems" in s and len(value) > int(s["maxItems"]):
            msg = f"{at}: Too many: {len(value)}: must have at most {int(s['maxItems'])} items"
            out.append(Cause("FieldValueTooMany", at, msg))
        if s.get("uniqueItems") and len({json.dumps(v, sort_keys=True) for v in value}) < len(value):
            self._invalid(out, path, '""', "shouldn't contain duplicates")

    def _enum(self, value: Any, s: Obj, path: Path, out: list[Cause]) -> None:
        allowed = s.get("enum")
        if not isinstance(allowed, list) or any(_same(value, a) for a in allowed):
            return
        at, _ = self._paths(path)
        msg = (
            f"{at}: Unsupported value: {_render(value)}: supported values: {', '.join(map(_quoted, allowed))}"
        )
        out.append(Cause("FieldValueNotSupported", at, msg))

    def _object(self, value: Obj, s: Obj, path: Path, out: list[Cause], *, root: bool) -> None:
        count = len(value)
        if "maxProperties" in s and count > int(s["maxProperties"]):
            at, _ = self._paths(path)
            msg = f"{at}: Too many: {count}: must have at most {int(s['maxProperties'])} items"
            out.append(Cause("FieldValueTooMany", at, msg))
        if "minProperties" in s and count < int(s["minProperties"]):
            self._invalid(out, path, str(count), f"should have at least {int(s['minProperties'])} properties")
        for key in s.get("required") or []:
            if key not in value:
                at, _ = self._paths((*path, key))
                out.append(Cause("FieldValueRequired", at, f"{at}: Required value"))
        props: Obj = s.get("properties") or {}
        additional = s.get("additionalProperties")
        for key, item in value.items():
            if root and key == "metadata":
                continue  # ObjectMeta, validated by the generic object-meta validation
            if key in props:
                self._value(item, props[key], (*path, key), out)
            elif isinstance(additional, dict):
                self._value(item, additional, (*path, key), out)


class StructuralSchema:
    """One CRD version's ``openAPIV3Schema``: ``prune``, ``apply_defaults``, ``validate``."""

    def __init__(self, schema: dict[str, Any]):
        self.schema = schema
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
        """Drop nulls the schema does not allow, then fill absent (or null) fields that declare a
        ``default``, in place (defaulting/prunenulls.go, defaulting/algorithm.go)."""
        self._default(obj, self.schema, root=True)

    def _default(self, value: Any, s: Any, *, root: bool = False) -> None:
        if not isinstance(s, dict):
            return
        if isinstance(value, dict):
            props: Obj = s.get("properties") or {}
            additional = s.get("additionalProperties")
            for key in list(value):
                if root and key == "metadata":
                    continue
                sub = props.get(key, additional if isinstance(additional, dict) else None)
                if (
                    value[key] is None
                    and isinstance(sub, dict)
                    and not sub.get("nullable")
                    and "default" not in sub
                ):
                    del value[key]  # a null the schema does not allow, and nothing to default it to
            for key, sub in props.items():
                if root and key == "metadata":
                    continue
                if not isinstance(sub, dict) or "default" not in sub:
                    continue
                if key not in value or (value[key] is None and not sub.get("nullable")):
                    value[key] = copy.deepcopy(sub["default"])
            for key, item in value.items():
                if root and key == "metadata":
                    continue
                if key in props:
                    self._default(item, props[key])
                elif isinstance(additional, dict):
                    self._default(item, additional)
        elif isinstance(value, list) and isinstance(s.get("items"), dict):
            for item in value:
                self._default(item, s["items"])

    # -- validation --------------------------------------------------------------------------
    def validate(self, obj: dict[str, Any]) -> list[Cause]:
        """Every schema violation as a ``Cause`` with its field path, in path order."""
        causes = _Validator().run(obj, self.schema)
        return sorted(causes, key=lambda c: c.field)


# -- the schema itself (CRD validation) ---------------------------------------------------------
def schema_problems(schema: Any, at: str) -> list[Cause]:
    """What apiextensions validation says about one ``openAPIV3Schema`` found at ``at``."""
    out: list[Cause] = []
    _check(schema, at, "root", out)
    return out


_WHY_TYPE = {
    "root": "must not be empty at the root",
    "items": "must not be empty for specified array items",
}


def _forbidden(out: list[Cause], path: str, why: str) -> None:
    out.append(Cause("FieldValueForbidden", path, f"{path}: Forbidden: {why}"))


def _check(s: Any, at: str, where: str, out: list[Cause]) -> None:
    """kube-apiserver's structural-schema checks of one node, then of the nodes under it; the
    causes in its order (type, unsupported features, shape, values), as a denial lists them."""
    if not isinstance(s, dict):
        return
    if "$ref" in s:  # no structural schema can be built: nothing else is checked here
        _forbidden(out, f"{at}.$ref", "$ref is not supported")
        return
    _check_type(s, at, where, out)
    _check_unsupported(s, at, out)
    _check_shape(s, at, where, out)
    _check_values(s, at, where, out)
    props, additional = s.get("properties"), s.get("additionalProperties")
    if isinstance(props, dict):
        for key, sub in props.items():
            if where == "root" and key == "metadata":
                continue
            _check(sub, f"{at}.properties[{key}]", "property", out)
    if isinstance(s.get("items"), dict):
        _check(s["items"], f"{at}.items", "items", out)
    if isinstance(additional, dict):
        _check(additional, f"{at}.additionalProperties", "additional", out)


def _check_type(s: dict[str, Any], at: str, where: str, out: list[Cause]) -> None:
    """A type is required (unless an extension exempts the node), an object at the root, and one
    of the supported ones."""
    kind = s.get("type")
    exempt = (
        s.get("x-kubernetes-int-or-string")
        or s.get("x-kubernetes-preserve-unknown-fields") is True
        or s.get("x-kubernetes-embedded-resource")
    )
    if not kind and (where == "root" or not exempt):
        why = _WHY_TYPE.get(where, "must not be empty for specified object fields")
        out.append(Cause("FieldValueRequired", f"{at}.type", f"{at}.type: Required value: {why}"))
    elif where == "root" and kind != "object":
        msg = f"{at}.type: Invalid value: {_render(kind)}: must be object at the root"
        out.append(Cause("FieldValueInvalid", f"{at}.type", msg))
    elif kind and kind not in _TYPES:
        allowed = ", ".join(f'"{t}"' for t in _TYPES)
        msg = f"{at}.type: Unsupported value: {_render(kind)}: supported values: {allowed}"
        out.append(Cause("FieldValueNotSupported", f"{at}.type", msg))


def _check_unsupported(s: dict[str, Any], at: str, out: list[Cause]) -> None:
    """What a structural schema may not use: patternProperties, uniqueItems, preserve-unknown-fields
    set to false, and types inside allOf/anyOf/oneOf/not (but int-or-string's own)."""
    if "patternProperties" in s:
        _forbidden(out, f"{at}.patternProperties", "patternProperties is not supported")
    if s.get("uniqueItems") is True:
        why = "uniqueItems cannot be set to true since the runtime complexity becomes quadratic"
        _forbidden(out, f"{at}.uniqueItems", why)
    if s.get("x-kubernetes-preserve-unknown-fields") is False:
        path = f"{at}.x-kubernetes-preserve-unknown-fields"
        out.append(
            Cause("FieldValueInvalid", path, f"{path}: Invalid value: false: must be true or undefined")
        )
    int_or_string = bool(s.get("x-kubernetes-int-or-string"))
    for key in ("allOf", "anyOf", "oneOf"):
        for i, branch in enumerate(s.get(key) or []):
            if isinstance(branch, dict) and "type" in branch:
                if int_or_string and key in ("anyOf", "allOf") and branch["type"] in ("integer", "string"):
                    continue  # the one typed value validation structural schemas allow
                _forbidden(out, f"{at}.{key}[{i}].type", "must be empty to be structural")
    if isinstance(s.get("not"), dict) and "type" in s["not"]:
        _forbidden(out, f"{at}.not.type", "must be empty to be structural")


def _check_shape(s: dict[str, Any], at: str, where: str, out: list[Cause]) -> None:
    """An array's items, properties beside additionalProperties, and the root's metadata."""
    if s.get("type") == "array" and not isinstance(s.get("items"), dict):
        out.append(
            Cause("FieldValueRequired", f"{at}.items", f"{at}.items: Required value: must be specified")
        )
    props = s.get("properties")
    additional = s.get("additionalProperties")
    if props and (isinstance(additional, dict) or additional is True):
        _forbidden(
            out, f"{at}.additionalProperties", "additionalProperties and properties are mutual exclusive"
        )
    if where == "root" and isinstance(props, dict) and isinstance(props.get("metadata"), dict):
        meta_props = props["metadata"].get("properties") or {}
        if set(meta_props) - {"name", "generateName"}:
            why = (
                "must not specify anything other than name and generateName, "
                "but metadata is implicitly specified"
            )
            _forbidden(out, f"{at}.properties[metadata]", why)


def _check_values(s: dict[str, Any], at: str, where: str, out: list[Cause]) -> None:
    """A pattern must compile (as Go's RE2 would), and a default must pass its own schema."""
    if isinstance(s.get("pattern"), str):
        compiled = _regex(s["pattern"])
        if isinstance(compiled, str):
            path = f"{at}.pattern"
            why = f"must be a valid regular expression, but isn't: error parsing regexp: {compiled}"
            out.append(
                Cause("FieldValueInvalid", path, f"{path}: Invalid value: {_render(s['pattern'])}: {why}")
            )
    if "default" in s and where != "root":
        out.extend(_Validator(f"{at}.default").run(s["default"], s))
