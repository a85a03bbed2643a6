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

__all__ = ["MAX_GPU_MEMORY_MIB", "MAX_SPLIT_COUNT", "MAX_UNIX_SECONDS", "as_list", "as_mapping", "plain_int"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})  # shared by every caller, so read-only
_MAX_DIGITS = 18

# Bounds on numbers from outside (registrations, assignments, ledgers) before they reach a sum we
# write: the GPULedger's integers are int64, and eleven devices of 999999999999999999 MiB each
# passed the digit check and overflowed the ledger's summary, so kube-apiserver refused every write
# of that node's ledger (issue 36). A value past these is unreadable, named where it was found.
# 2^24 MiB (16 TiB) per GPU: two orders of magnitude above the largest card (192 GB).
MAX_GPU_MEMORY_MIB = 1 << 24
# vGPUs one card is split into (the device plugin's deviceSplitCount; HAMi's default is 10).
MAX_SPLIT_COUNT = 1 << 10
# Unix seconds (year 2286): a time stamp past it is not a time.
MAX_UNIX_SECONDS = 9_999_999_999


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
