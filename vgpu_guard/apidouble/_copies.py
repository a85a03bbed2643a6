"""Copies of stored objects for every read, from bytes kept beside each object.

The double hands out a fresh copy on every GET, LIST item and watch event, as a real server hands
out freshly decoded JSON: a caller that changes what it got must never change the store. That copy
was a third of the allocation-safety run (``deep_copy`` over every pod of every LIST of 11,000
passes). A stored object is never changed once stored (every write stores a new object), so its
``marshal`` bytes are made once and every later copy is ``marshal.loads``, C speed throughout:
~9 µs a pod against ~19 µs for ``deep_copy`` (measured on this VM), and a first read of a new
object (dumps + loads) is still cheaper than one ``deep_copy``.

Format version 2: no back-references, so an object that holds one list twice comes back with two
lists, as ``deep_copy`` and a JSON decoder give. ``marshal`` keeps exact types (``True`` stays a
bool, ``1.0`` a float); anything it cannot write (a dict subclass) takes ``deep_copy``.
"""

from __future__ import annotations

import marshal
from collections.abc import Callable
from typing import Any

__all__ = ["StoredCopies"]

_MARSHAL_VERSION = 2

Obj = dict[str, Any]


class StoredCopies:
    """``copy(stored)`` -> a fresh, equal object; bytes kept for at most ``limit`` objects."""

    def __init__(self, fallback: Callable[[Any], Any], *, limit: int = 50_000) -> None:
        self._fallback = fallback
        self.limit = limit
        # id(stored) -> (stored, its resourceVersion, its bytes). The object is held so its id
        # cannot be reused by another while the entry exists; the version is checked as well, so
        # an object changed in place by a write (a bug this would otherwise hide) is seen as new.
        # Past ``limit`` the table starts over.
        self._bytes: dict[int, tuple[Obj, object, bytes]] = {}

    def copy(self, stored: Obj) -> Obj:
        """A copy of an object that is not changed in place once stored (see the module docstring)."""
        rv = _version(stored)
        entry = self._bytes.get(id(stored))
        if entry is None or entry[0] is not stored or entry[1] != rv:
            try:
                data = marshal.dumps(stored, _MARSHAL_VERSION)
            except ValueError:  # not plain data
                copied: Obj = self._fallback(stored)
                return copied
            if len(self._bytes) >= self.limit:
                self._bytes.clear()
            entry = (stored, rv, data)
            self._bytes[id(stored)] = entry
        out: Obj = marshal.loads(entry[2])
        return out


def _version(obj: Obj) -> object:
    meta = obj.get("metadata")
    return meta.get("resourceVersion") if isinstance(meta, dict) else None
