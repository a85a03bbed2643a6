"""Kubernetes resource quantities with exact arithmetic.

Why not floats: capacity checks compare sums of many quantities against a limit, and the seed-001
crash came from exactly that comparison. ``32000m`` must equal ``32`` and ``64Gi`` must equal
``68719476736`` with no rounding, so every quantity is a ``fractions.Fraction``.

The grammar is the API server's (k8s.io/apimachinery/pkg/api/resource/quantity.go)::

    <quantity>        ::= <signedNumber><suffix>
    <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
    <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI>       ::= m | "" | k | M | G | T | P | E      (and n, u: nano, micro)
    <decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from functools import lru_cache

__all__ = [
    "ParsedQuantity",
    "QuantityError",
    "format_quantity",
    "parse_quantity",
]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_PATTERN = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?[0-9]+)|(?P<decimal>[numkMGTPE]?))$"
)
# The API server refuses quantities beyond this many characters; so do we, before any arithmetic.
_MAX_LENGTH = 64
_MAX_EXPONENT = 30


class QuantityError(ValueError):
    """Raised when a value is not a Kubernetes quantity; the message quotes it and shows the form."""


@dataclass(frozen=True, slots=True)
class ParsedQuantity:
    """A quantity's exact value and the suffix it was written with (for messages and hints)."""

    value: Fraction
    suffix: str

    @property
    def is_integer(self) -> bool:
        return self.value.denominator == 1


def parse_quantity(raw: object) -> ParsedQuantity:
    """Parse a quantity as YAML/JSON delivers it: a string, an int, or a float.

    Booleans, NaN, infinities and anything else raise ``QuantityError`` with the offending value.
    """
    if isinstance(raw, bool) or raw is None:
        raise QuantityError(f"{_as_written(raw)} is not a quantity (expected a number such as 12 or 500m)")
    if isinstance(raw, int):
        return ParsedQuantity(Fraction(raw), "")
    if isinstance(raw, float):
        try:
            return ParsedQuantity(Fraction(Decimal(repr(raw))), "")
        except (InvalidOperation, ValueError, OverflowError) as e:
            raise QuantityError(f"{raw!r} is not a finite quantity") from e
    if not isinstance(raw, str):
        raise QuantityError(f"{_as_written(raw)} is not a quantity (expected a number such as 12)")
    # A cluster writes the same few strings ("1", "24576", "500m") on every pod and a pass parses
    # every pod, so short strings go through a cache (a ParsedQuantity is immutable; errors are
    # raised anew, never cached). Long ones do not: padding must not pin megabytes as cache keys.
    return _parse_cached(raw) if len(raw) <= _MAX_LENGTH else _parse_text(raw)


def _as_written(raw: object) -> str:
    """A value that is not a number or a string, in the YAML/JSON words its author used (not
    Python's ``True``, ``None`` or ``list``)."""
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if raw is None:
        return "null"
    if isinstance(raw, list | tuple):
        return "a list"
    if isinstance(raw, Mapping):
        return "a map"
    return f"a {type(raw).__name__} value"


def _parse_text(raw: str) -> ParsedQuantity:
    text = raw.strip()
    if len(text) > _MAX_LENGTH:
        raise QuantityError(f"{text[:20]!r}... is too long to be a quantity")
    if text.isdigit() and text.isascii():
        # Most quantities on the hot paths (vGPU counts, MiB, percents) are plain integers: an
        # int converts exactly and about 5x faster than the Decimal route below.
        return ParsedQuantity(Fraction(int(text)), "")
    match = _PATTERN.match(text)
    if match is None:
        raise QuantityError(f"{raw!r} is not a quantity (expected e.g. 12, 500m, 64Gi, 1e3)")
    number = Fraction(Decimal(match["number"]))
    if match["binary"]:
        return ParsedQuantity(number * _BINARY[match["binary"]], match["binary"])
    if match["exp"]:
        exponent = int(match["exp"][1:])
        if abs(exponent) > _MAX_EXPONENT:
            raise QuantityError(f"{raw!r} has an exponent out of range")
        return ParsedQuantity(number * Fraction(10) ** exponent, match["exp"])
    return ParsedQuantity(number * _DECIMAL[match["decimal"] or ""], match["decimal"] or "")


_parse_cached = lru_cache(maxsize=4096)(_parse_text)


def format_quantity(value: Fraction, *, binary: bool = False) -> str:
    """Render a quantity the way ``kubectl`` users read it.

    Integers print plainly (``64``), or with the largest exact binary suffix when ``binary``
    (``64Gi``); fractions print in millis (``500m``) or, below that, as a decimal.
    """
    if value.denominator == 1:
        n = value.numerator
        if binary and n != 0:
            for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
                if n % _BINARY[suffix] == 0:
                    return f"{n // _BINARY[suffix]}{suffix}"
        return str(n)
    millis = value * 1000
    if millis.denominator == 1:
        return f"{millis.numerator}m"
    return str(Decimal(value.numerator) / Decimal(value.denominator))
