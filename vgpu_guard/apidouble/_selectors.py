"""Label and field selectors, parsed the way k8s.io/apimachinery/pkg/labels and pkg/fields do.

Label selector grammar (labels/selector.go): comma-separated requirements ``k``, ``!k``, ``k=v``,
``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``. ``!=`` and ``notin`` also match objects that
lack the key. Field selectors (fields/selector.go) only know ``=``, ``==`` and ``!=``; which field
names a resource supports is the resource's business (see ``vgpu_guard.apidouble._types``).
A selector that does not parse is a 400 for the client, raised here as ``SelectorError``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["FieldSelector", "LabelSelector", "SelectorError"]

Op = Literal["=", "!=", "in", "notin", "exists", "!"]


class SelectorError(ValueError):
    """Raised when a label or field selector cannot be parsed (the server answers 400)."""


_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@dataclass(frozen=True, slots=True)
class _Requirement:
    key: str
    op: Op
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        # "!=" and "notin" match when the key is absent too (labels/selector.go Requirement.Matches).
        return not present or labels[self.key] not in self.values


def _check(key: str, values: Sequence[str], text: str) -> None:
    if not _KEY.match(key) or len(key.rsplit("/", maxsplit=1)[-1]) > 63:
        raise SelectorError(f"unable to parse requirement: invalid label key {key!r} in {text!r}")
    for v in values:
        if len(v) > 63 or not _VALUE.match(v):
            raise SelectorError(f"unable to parse requirement: invalid label value {v!r} in {text!r}")


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside ``( )``."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unable to parse requirement: unbalanced ')' in {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise SelectorError(f"unable to parse requirement: unbalanced '(' in {text!r}")
    parts.append("".join(cur))
    return parts


_SET = re.compile(r"^\s*(\S+)\s+(in|notin)\s*\((.*)\)\s*$")


def _parse_requirement(part: str) -> _Requirement:
    text = part.strip()
    if not text:
        raise SelectorError("unable to parse requirement: empty requirement")
    m = _SET.match(text)
    if m:
        key, op, raw = m.group(1), m.group(2), m.group(3)
        values = [v.strip() for v in raw.split(",")] if raw.strip() else []
        if not values:
            raise SelectorError(f"unable to parse requirement: {op} needs at least one value in {text!r}")
        _check(key, values, text)
        return _Requirement(key, "in" if op == "in" else "notin", frozenset(values))
    for token, op in (("!=", "!="), ("==", "="), ("=", "=")):
        if token in text:
            key, _, value = text.partition(token)
            key, value = key.strip(), value.strip()
            _check(key, [value], text)
            return _Requirement(key, op, frozenset([value]))  # type: ignore[arg-type]
    if text.startswith("!"):
        key = text[1:].strip()
        _check(key, [], text)
        return _Requirement(key, "!", frozenset())
    if " " in text or not text:
        raise SelectorError(f"unable to parse requirement: found {text!r}, expected: in, notin, =, ==, !=")
    _check(text, [], text)
    return _Requirement(text, "exists", frozenset())


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A parsed label selector; the empty selector matches everything."""

    requirements: tuple[_Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        if text is None or not text.strip():
            return cls()
        return cls(tuple(_parse_requirement(p) for p in _split_top(text)))

    @classmethod
    def from_dict(cls, selector: Mapping[str, Any] | None) -> LabelSelector:
        """A ``metav1.LabelSelector`` (matchLabels + matchExpressions), as webhooks' selectors use."""
        if not selector:
            return cls()
        reqs: list[_Requirement] = []
        for key, value in sorted((selector.get("matchLabels") or {}).items()):
            _check(str(key), [str(value)], f"{key}={value}")
            reqs.append(_Requirement(str(key), "=", frozenset([str(value)])))
        ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
        for expr in selector.get("matchExpressions") or []:
            op = ops.get(str(expr.get("operator")))
            if op is None:
                raise SelectorError(f"{expr.get('operator')!r} is not a valid label selector operator")
            values = [str(v) for v in expr.get("values") or []]
            if op in ("in", "notin") and not values:
                raise SelectorError(
                    f"values: Required value: must be specified when `operator` is {expr['operator']!r}"
                )
            if op in ("exists", "!") and values:
                raise SelectorError(
                    f"values: Forbidden: may not be specified when `operator` is {expr['operator']!r}"
                )
            _check(str(expr.get("key", "")), values, str(expr))
            reqs.append(_Requirement(str(expr["key"]), op, frozenset(values)))  # type: ignore[arg-type]
        return cls(tuple(reqs))

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def __bool__(self) -> bool:
        return bool(self.requirements)


@dataclass(frozen=True, slots=True)
class FieldSelector:
    """A parsed field selector: ``(field, negated, value)`` terms, all of which must hold."""

    terms: tuple[tuple[str, bool, str], ...] = ()

    @classmethod
    def parse(cls, text: str | None, *, supported: frozenset[str]) -> FieldSelector:
        if text is None or not text.strip():
            return cls()
        terms = []
        for raw in text.split(","):
            part = raw.strip()
            token = next((t for t in ("!=", "==", "=") if t in part), None)
            if token is None:
                raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
            name, _, value = part.partition(token)
            name = name.strip()
            if name not in supported:
                raise SelectorError(f"field label not supported: {name}")
            terms.append((name, token == "!=", value.strip()))
        return cls(tuple(terms))

    def matches(self, obj: dict[str, Any], getter: Callable[[dict[str, Any], str], str]) -> bool:
        return all((getter(obj, name) == value) != neg for name, neg, value in self.terms)

    def __bool__(self) -> bool:
        return bool(self.terms)
