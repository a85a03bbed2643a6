"""JSON values as the double's store handles them: copies, timestamps, merge patches, metadata.

Kept apart from the store's classes because every part of the double (the object table, the
write steps, admission) works on the same plain dicts and needs the same few operations on them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from vgpu_guard.engine.objects import Obj

__all__ = ["Obj", "deep_copy", "format_time", "merge_patch", "meta_of"]


_LEAVES = frozenset({str, int, float, bool, type(None)})


def deep_copy(value: Any) -> Any:
    """Copy JSON data (dicts, lists, scalars); several times faster than ``copy.deepcopy``.

    The double copies every object it hands out, and that copy was most of a pass in the
    allocation-safety run: plain dicts and lists are copied at C speed and only their containers
    recursed into (no call per string); subclasses take the general path.
    """
    cls = value.__class__
    if cls is dict:
        out = value.copy()
        for key, item in out.items():
            if item.__class__ not in _LEAVES:
                out[key] = deep_copy(item)  # replacing a value while iterating is safe
        return out
    if cls is list:
        copied = value.copy()
        for i, item in enumerate(copied):
            if item.__class__ not in _LEAVES:
                copied[i] = deep_copy(item)
        return copied
    if isinstance(value, dict):
        return {k: deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [deep_copy(v) for v in value]
    return value


def format_time(moment: datetime) -> str:
    """RFC 3339 with second precision and ``Z``, as metav1.Time serialises."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: ``null`` deletes, objects merge, anything else replaces."""
    if not isinstance(patch, dict):
        return deep_copy(patch)
    result = deep_copy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def meta_of(obj: Obj) -> Obj:
    """``obj``'s metadata, created empty when missing or not a map (decoding fills it in)."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = obj["metadata"] = {}
    return meta
