"""Reading JSON that may have any shape: a field is used only when it has the expected type.

Pods, workloads and ledgers arrive from users and from the API; a field of the wrong type must
read as absent (validation reports it where it matters), never raise ``AttributeError``. These
run several times per pod on every controller pass, so plain ``dict``/``list`` take a fast path
before the ABC check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["as_list", "as_mapping"]

_EMPTY: Mapping[str, Any] = {}


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
