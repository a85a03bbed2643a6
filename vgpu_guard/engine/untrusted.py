"""Reading JSON that may have any shape: a field is used only when it has the expected type.

Pods, workloads and ledgers arrive from users and from the API; a field of the wrong type must
read as absent (validation reports it where it matters), never raise ``AttributeError``. These
run several times per pod on every controller pass, so plain ``dict``/``list`` take a fast path
before the ABC check.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["as_list", "as_mapping", "plain_int"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})  # shared by every caller, so read-only
_MAX_DIGITS = 18


def as_mapping(value: object) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else an empty one."""
    if type(value) is dict:
        return value
    if value is None:  # an absent field: the common case, and the ABC check below is slow
        return _EMPTY
    return value if isinstance(value, Mapping) else _EMPTY


def as_list(value: object) -> list[Any]:
    """``value`` when it is a list, else an empty one (a fresh one: callers may append)."""
    return value if isinstance(value, list) else []


def plain_int(text: str) -> int | None:
    """``text`` as a non-negative integer when it is 1 to 18 ASCII digits, else None.

    Not ``str.isdigit()`` alone: it accepts "²" and other digits ``int()`` refuses or that no plugin
    writes, and an annotation of 5,000 digits would pass it and then raise in ``int()``. One of
    those on one pod or node must not stop a controller pass.
    """
    return int(text) if len(text) <= _MAX_DIGITS and text.isascii() and text.isdigit() else None
