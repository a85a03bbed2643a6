"""Label and field selectors, parsed the way k8s.io/apimachinery/pkg/labels and pkg/fields do.

Label selector grammar (labels/selector.go): comma-separated requirements ``k``, ``!k``, ``k=v``,
``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k>n``, ``k<n``. ``!=`` and ``notin`` also
match objects that lack the key. The lexer and parser are a port of selector.go's, so a selector that
does not parse fails with the API server's own text (``found 'b', expected: ',' or ')'``).
Field selectors (fields/selector.go) only know ``=``, ``==`` and ``!=``; which field names a
resource supports is the resource's business (see ``vgpu_guard.apidouble._types``).
A selector that does not parse is a 400 for the client, raised here as ``SelectorError``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from vgpu_guard.apidouble._gotext import go_quote

__all__ = [
    "FieldSelector",
    "LabelSelector",
    "SelectorError",
    "UnsupportedFieldLabel",
    "dns1123_label_errors",
    "dns1123_subdomain_errors",
]

Op = Literal["=", "!=", "in", "notin", "exists", "!", "gt", "lt"]


class SelectorError(ValueError):
    """Raised when a label or field selector cannot be parsed (the server answers 400)."""


class UnsupportedFieldLabel(SelectorError):
    """A field selector names a field the resource cannot select on (``label``); the wording
    depends on the resource (see ``Store._selectors``)."""

    def __init__(self, label: str):
        super().__init__(f"field label not supported: {label}")
        self.label = label


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
        if self.op in ("gt", "lt"):
            # Requirement.Matches: both sides parse as int64, or the object does not match.
            if not present or not re.fullmatch(r"[+-]?[0-9]+", labels[self.key]):
                return False
            mine, theirs = int(labels[self.key]), int(next(iter(self.values)))
            return mine > theirs if self.op == "gt" else mine < theirs
        # "!=" and "notin" match when the key is absent too (labels/selector.go Requirement.Matches).
        return not present or labels[self.key] not in self.values


def _check(key: str, values: Sequence[str], text: str) -> None:
    if not _KEY.match(key) or len(key.rsplit("/", maxsplit=1)[-1]) > 63:
        raise SelectorError(f"unable to parse requirement: invalid label key {key!r} in {text!r}")
    for v in values:
        if len(v) > 63 or not _VALUE.match(v):
            raise SelectorError(f"unable to parse requirement: invalid label value {v!r} in {text!r}")


# -- the label selector language, as k8s.io/apimachinery/pkg/labels/selector.go parses it ----------
_QNAME = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QNAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
    "character"
)
_LABEL_VALUE = f"({_QNAME})?"
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_SUBDOMAIN = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    """validation.RegexError."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


_DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character"
)


def dns1123_label_errors(value: str) -> list[str]:
    """validation.IsDNS1123Label (namespace and container names)."""
    errs = ["must be no more than 63 characters"] if len(value) > 63 else []
    if not re.fullmatch(_DNS1123_LABEL, value):
        errs.append(_regex_error(_DNS1123_LABEL_MSG, _DNS1123_LABEL, "my-name", "123-abc"))
    return errs


def dns1123_subdomain_errors(value: str) -> list[str]:
    """validation.IsDNS1123Subdomain (most object names, webhook names, label key prefixes)."""
    errs = ["must be no more than 253 characters"] if len(value) > 253 else []
    if not re.fullmatch(_SUBDOMAIN, value):
        errs.append(_regex_error(_SUBDOMAIN_MSG, _SUBDOMAIN, "example.com"))
    return errs


def qualified_name_errors(value: str) -> list[str]:
    """validation.IsQualifiedName: ``[prefix/]name`` as label keys are."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += ["prefix part " + e for e in dns1123_subdomain_errors(prefix)]
    else:
        return [
            "a qualified name "
            + _regex_error(_QNAME_MSG, _QNAME, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if not re.fullmatch(_QNAME, name):
        errs.append("name part " + _regex_error(_QNAME_MSG, _QNAME, "MyName", "my.name", "123-abc"))
    return errs


def label_value_errors(value: str) -> list[str]:
    """validation.IsValidLabelValue."""
    errs: list[str] = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not re.fullmatch(_LABEL_VALUE, value):
        errs.append(_regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE, "MyValue", "my_value", "12345"))
    return errs


def _validate_key(key: str) -> None:
    errs = qualified_name_errors(key)
    if errs:
        raise SelectorError(f"invalid label key {go_quote(key)}: {'; '.join(errs)}")


def _validate_value(key: str, value: str) -> None:
    errs = label_value_errors(value)
    if errs:
        why = "; ".join(errs)
        raise SelectorError(f"invalid label value: {go_quote(value)}: at key: {go_quote(key)}: {why}")


# Tokens of labels/selector.go's lexer.
_ERROR, _END, _CLOSE, _COMMA, _NOT, _DEQ, _EQ, _GT, _ID, _IN, _LT, _NEQ, _NOTIN, _OPEN = range(14)
_LITERALS = {
    ")": _CLOSE, ",": _COMMA, "!": _NOT, "==": _DEQ, "=": _EQ, ">": _GT, "in": _IN, "<": _LT, "!=": _NEQ,
    "notin": _NOTIN, "(": _OPEN,
}  # fmt: skip
_SPECIAL = set("=!(),><")
_WHITESPACE = set(" \t\r\n")


def _lex(text: str) -> list[tuple[int, str]]:
    items: list[tuple[int, str]] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos] in _WHITESPACE:
            pos += 1
        if pos >= len(text):
            items.append((_END, ""))
            return items
        if text[pos] in _SPECIAL:
            buffer, last = "", (_ERROR, "")
            while pos < len(text) and text[pos] in _SPECIAL:
                buffer += text[pos]
                if buffer in _LITERALS:
                    last = (_LITERALS[buffer], buffer)
                    pos += 1
                elif last[0] != _ERROR:
                    break
                else:
                    pos += 1
            if last[0] == _ERROR:
                items.append((_ERROR, f"error expected: keyword found '{buffer}'"))
            else:
                items.append(last)
            continue
        start = pos
        while pos < len(text) and text[pos] not in _SPECIAL and text[pos] not in _WHITESPACE:
            pos += 1
        word = text[start:pos]
        items.append((_LITERALS.get(word, _ID), word))


class _Parser:
    """labels/selector.go's Parser: same tokens, same order of checks, same error texts."""

    def __init__(self, text: str):
        self.items = _lex(text)
        self.pos = 0

    def _token(self, index: int, values: bool) -> tuple[int, str]:
        tok, lit = self.items[index]
        if values and tok in (_IN, _NOTIN):
            tok = _ID
        return tok, lit

    def lookahead(self, values: bool = True) -> tuple[int, str]:
        return self._token(self.pos, values)

    def consume(self, values: bool = True) -> tuple[int, str]:
        self.pos += 1
        return self._token(self.pos - 1, values)

    def parse(self) -> list[_Requirement]:
        requirements: list[_Requirement] = []
        while True:
            tok, lit = self.lookahead()
            if tok in (_ID, _NOT):
                try:
                    requirements.append(self.requirement())
                except SelectorError as e:
                    raise SelectorError(f"unable to parse requirement: {e}") from e
                tok, lit = self.consume()
                if tok == _END:
                    return requirements
                if tok == _COMMA:
                    tok2, lit2 = self.lookahead()
                    if tok2 not in (_ID, _NOT):
                        raise SelectorError(f"found '{lit2}', expected: identifier after ','")
                else:
                    raise SelectorError(f"found '{lit}', expected: ',' or 'end of string'")
            elif tok == _END:
                return requirements
            else:
                raise SelectorError(f"found '{lit}', expected: !, identifier, or 'end of string'")

    def requirement(self) -> _Requirement:
        op: str = ""
        tok, lit = self.consume()
        if tok == _NOT:
            op = "!"
            tok, lit = self.consume()
        if tok != _ID:
            raise SelectorError(f"found '{lit}', expected: identifier")
        key = lit
        _validate_key(key)
        if op == "!" or self.lookahead()[0] in (_END, _COMMA):
            return _new_requirement(key, op or "exists", [])
        tok, lit = self.consume(values=False)
        ops = {_IN: "in", _EQ: "=", _DEQ: "=", _GT: "gt", _LT: "lt", _NOTIN: "notin", _NEQ: "!="}
        if tok not in ops:
            raise SelectorError(f"found '{lit}', expected: '=', '!=', '==', 'in', notin'")
        op = ops[tok]
        values = self.set_values() if op in ("in", "notin") else self.exact_value()
        return _new_requirement(key, op, sorted(values))

    def set_values(self) -> set[str]:
        tok, lit = self.consume()
        if tok != _OPEN:
            raise SelectorError(f"found '{lit}' expected: '('")
        tok, lit = self.lookahead()
        if tok in (_ID, _COMMA):
            values = self.identifiers()
            if self.consume()[0] != _CLOSE:
                raise SelectorError(f"found '{lit}', expected: ')'")
            return values
        if tok == _CLOSE:
            self.consume()
            return {""}
        raise SelectorError(f"found '{lit}', expected: ',', ')' or identifier")

    def identifiers(self) -> set[str]:
        values: set[str] = set()
        while True:
            tok, lit = self.consume()
            if tok == _ID:
                values.add(lit)
                tok2, lit2 = self.lookahead()
                if tok2 == _COMMA:
                    continue
                if tok2 == _CLOSE:
                    return values
                raise SelectorError(f"found '{lit2}', expected: ',' or ')'")
            if tok == _COMMA:
                if not values:
                    values.add("")
                tok2, _ = self.lookahead()
                if tok2 == _CLOSE:
                    values.add("")
                    return values
                if tok2 == _COMMA:
                    self.consume()
                    values.add("")
            else:
                raise SelectorError(f"found '{lit}', expected: ',', or identifier")

    def exact_value(self) -> set[str]:
        tok, _ = self.lookahead()
        if tok in (_END, _COMMA):
            return {""}
        tok, lit = self.consume()
        if tok == _ID:
            return {lit}
        raise SelectorError(f"found '{lit}', expected: identifier")


def _new_requirement(key: str, op: str, values: list[str]) -> _Requirement:
    """labels.NewRequirement's checks (the key was validated while parsing)."""
    if op in ("in", "notin") and not values:
        raise SelectorError("for 'in', 'notin' operators, values set can't be empty")
    if op in ("gt", "lt"):
        if len(values) != 1:
            raise SelectorError("for 'Gt', 'Lt' operators, exactly one value is required")
        if not re.fullmatch(r"[+-]?[0-9]+", values[0]) or not -(2**63) <= int(values[0]) < 2**63:
            raise SelectorError("for 'Gt', 'Lt' operators, the value must be an integer")
    for value in values:
        _validate_value(key, value)
    return _Requirement(key, op, frozenset(values))  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A parsed label selector; the empty selector matches everything."""

    requirements: tuple[_Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        if text is None:
            return cls()
        return cls(tuple(sorted(_Parser(text).parse(), key=lambda r: r.key)))

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
                raise UnsupportedFieldLabel(name)
            terms.append((name, token == "!=", value.strip()))
        return cls(tuple(terms))

    def matches(self, obj: dict[str, Any], getter: Callable[[dict[str, Any], str], str]) -> bool:
        return all((getter(obj, name) == value) != neg for name, neg, value in self.terms)

    def __bool__(self) -> bool:
        return bool(self.terms)
