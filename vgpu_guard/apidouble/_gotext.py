"""Go's wording where kube-apiserver passes a Go library's error text straight to the client.

The API server answers many malformed requests with the text of the Go error it hit: a continue
token that is not base64 (``encoding/base64``), a body or token that is not JSON
(``encoding/json``), a resourceVersion that is not a number (``strconv``), strings printed with
``%q`` or ``%#v`` (``fmt``). Clients do not parse these texts, but people read them and the
contract suite compares them, so the double writes them the same way.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "GoJSONError",
    "b64_raw_url_decode",
    "go_json_loads",
    "go_path_clean",
    "go_quote",
    "go_string_slice",
    "json_kind",
    "parse_uint_error",
]


def json_kind(value: Any) -> str:
    """The JSON type of a decoded value as Go's encoding/json names it in an UnmarshalTypeError."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def go_quote(text: str) -> str:
    """``strconv.Quote`` (``%q``): double quotes, Go escapes for quotes, backslashes, controls."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def go_string_slice(values: list[str]) -> str:
    """``%#v`` of a ``[]string``: ``[]string{"a", "b"}``."""
    return "[]string{" + ", ".join(go_quote(v) for v in values) + "}"


def parse_uint_error(text: str) -> str | None:
    """The ``strconv.ParseUint(text, 10, 64)`` error, or None when ``text`` is a valid uint64."""
    if text and text.isascii() and text.isdigit():
        if int(text) < 2**64:
            return None
        return f"strconv.ParseUint: parsing {go_quote(text)}: value out of range"
    return f"strconv.ParseUint: parsing {go_quote(text)}: invalid syntax"


# -- encoding/base64: RawURLEncoding.DecodeString --------------------------------------------------
_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_B64_VALUE = {c: i for i, c in enumerate(_B64)}


def b64_raw_url_decode(text: str) -> bytes:
    """Decode like Go's ``base64.RawURLEncoding``; ValueError carries Go's error text."""
    raw = text.encode("utf-8", "surrogateescape")
    out = bytearray()
    si = 0
    while True:
        quantum: list[int] = []
        while len(quantum) < 4:
            if si == len(raw):
                if not quantum:
                    return bytes(out)
                if len(quantum) == 1:
                    raise ValueError(f"illegal base64 data at input byte {si - 1}")
                break
            byte = raw[si]
            si += 1
            value = _B64_VALUE.get(chr(byte)) if byte < 0x80 else None
            if value is not None:
                quantum.append(value)
            elif byte in (0x0A, 0x0D):
                continue
            else:
                raise ValueError(f"illegal base64 data at input byte {si - 1}")
        val = 0
        for i in range(4):
            val = (val << 6) | (quantum[i] if i < len(quantum) else 0)
        chunk = val.to_bytes(3, "big")
        out += chunk[: len(quantum) - 1]
        if len(quantum) < 4:
            return bytes(out)


# -- path.Clean ---------------------------------------------------------------------------------
def go_path_clean(path: str) -> str:
    """Go's ``path.Clean`` (lexical: no repeated or trailing slashes, no ``.``, resolved ``..``)."""
    if not path:
        return "."
    rooted = path.startswith("/")
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts and parts[-1] != "..":
                parts.pop()
            elif not rooted:
                parts.append("..")
            continue
        parts.append(part)
    cleaned = "/".join(parts)
    if rooted:
        return "/" + cleaned
    return cleaned or "."


# -- encoding/json: syntax errors -----------------------------------------------------------------
class GoJSONError(ValueError):
    """``text`` did not parse; ``str()`` is what Go's ``json.Unmarshal`` would have said."""


def _quote_char(ch: str) -> str:
    if ch == "'":
        return "'\\''"
    if ch == '"':
        return "'\"'"
    quoted = go_quote(ch)
    return "'" + quoted[1:-1] + "'"


class _Scanner:
    """A port of the error paths of encoding/json's scanner (scanner.go)."""

    def __init__(self, text: str):
        self.s = text
        self.i = 0

    def fail(self, context: str) -> GoJSONError:
        if self.i >= len(self.s):
            return GoJSONError("unexpected end of JSON input")
        return GoJSONError(f"invalid character {_quote_char(self.s[self.i])} {context}")

    def ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in " \t\r\n":
            self.i += 1

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def value(self) -> None:
        self.ws()
        ch = self.peek()
        if ch == "{":
            self.i += 1
            self.ws()
            if self.peek() == "}":
                self.i += 1
                return
            while True:
                self.ws()
                if self.peek() != '"':
                    raise self.fail("looking for beginning of object key string")
                self.string()
                self.ws()
                if self.peek() != ":":
                    raise self.fail("after object key")
                self.i += 1
                self.value()
                self.ws()
                if self.peek() == ",":
                    self.i += 1
                    continue
                if self.peek() == "}":
                    self.i += 1
                    return
                raise self.fail("after object key:value pair")
        if ch == "[":
            self.i += 1
            self.ws()
            if self.peek() == "]":
                self.i += 1
                return
            while True:
                self.value()
                self.ws()
                if self.peek() == ",":
                    self.i += 1
                    continue
                if self.peek() == "]":
                    self.i += 1
                    return
                raise self.fail("after array element")
        if ch == '"':
            self.string()
            return
        if ch == "-" or ch.isdigit():
            self.number()
            return
        for word in ("true", "false", "null"):
            if ch == word[0]:
                self.i += 1
                for expected in word[1:]:
                    if self.peek() != expected:
                        raise self.fail(f"in literal {word} (expecting {_quote_char(expected)})")
                    self.i += 1
                return
        raise self.fail("looking for beginning of value")

    def string(self) -> None:
        self.i += 1
        while True:
            ch = self.peek()
            if not ch:
                raise self.fail("")
            if ch == '"':
                self.i += 1
                return
            if ch == "\\":
                self.i += 1
                esc = self.peek()
                if esc == "u":
                    self.i += 1
                    for _ in range(4):
                        if self.peek().lower() not in "0123456789abcdef" or not self.peek():
                            raise self.fail("in \\u hexadecimal character escape")
                        self.i += 1
                    continue
                if esc not in '"\\/bfnrt' or not esc:
                    raise self.fail("in string escape code")
                self.i += 1
                continue
            if ord(ch) < 0x20:
                raise self.fail("in string literal")
            self.i += 1

    def number(self) -> None:
        if self.peek() == "-":
            self.i += 1
            if not self.peek().isdigit():
                raise self.fail("in numeric literal")
        if self.peek() == "0":
            self.i += 1
        else:
            while self.peek().isdigit():
                self.i += 1
        if self.peek() == ".":
            self.i += 1
            if not self.peek().isdigit():
                raise self.fail("after decimal point in numeric literal")
            while self.peek().isdigit():
                self.i += 1
        if self.peek() in ("e", "E"):
            self.i += 1
            if self.peek() in ("+", "-"):
                self.i += 1
            if not self.peek().isdigit():
                raise self.fail("in exponent of numeric literal")
            while self.peek().isdigit():
                self.i += 1


def go_json_loads(text: str | bytes) -> Any:
    """``json.loads``, but a syntax error says what Go's ``json.Unmarshal`` says."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    scanner = _Scanner(text)
    scanner.value()
    scanner.ws()
    if scanner.i < len(text):
        raise scanner.fail("after top-level value")
    try:
        return json.loads(text)
    except ValueError as e:  # the scanner above accepts only what json accepts; kept as a guard
        raise GoJSONError(str(e)) from e
