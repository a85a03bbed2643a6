"""RFC 6902 patches for mutated objects, cheaply.

Why not ``jsonpatch.make_patch``: it walks and compares both whole trees, which was ~65 % of a pod
mutation's time (docs/benchmarks.md). Our mutations work on a copy that shares every untouched
subtree with the original by identity (``working_copy``), so the diff can skip those in O(1) and
only descends where something may have changed. Ops are add/replace/remove only; a list that
changed length is replaced whole (positions shift, and our lists are short).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

__all__ = ["MISSING", "apply_ops", "diff", "value_at", "working_copy"]

# What ``value_at`` returns for a path that leads nowhere (None is a JSON value).
MISSING = object()


def _pointer(token: str) -> str:
    if "~" in token or "/" in token:
        return token.replace("~", "~0").replace("/", "~1")
    return token


def diff(old: Any, new: Any, path: str = "") -> list[dict[str, Any]]:
    """The ops turning ``old`` into ``new``; shared subtrees (same object) cost nothing."""
    if old is new:
        return []
    # JSON objects arrive as dicts: test the concrete type first (ABC checks dominate otherwise).
    if (type(old) is dict or isinstance(old, Mapping)) and (type(new) is dict or isinstance(new, Mapping)):
        ops: list[dict[str, Any]] = []
        for key in old:
            if key not in new:
                ops.append({"op": "remove", "path": f"{path}/{_pointer(str(key))}"})
        for key, value in new.items():
            if key not in old:
                ops.append(
                    {"op": "add", "path": f"{path}/{_pointer(str(key))}", "value": copy.deepcopy(value)}
                )
            elif old[key] is not value:  # shared subtrees are skipped before any path is built
                ops.extend(diff(old[key], value, f"{path}/{_pointer(str(key))}"))
        return ops
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [
            op
            for i, (a, b) in enumerate(zip(old, new, strict=True))
            if a is not b
            for op in diff(a, b, f"{path}/{i}")
        ]
    if type(old) is type(new) and old == new:
        return []
    return [{"op": "replace", "path": path, "value": copy.deepcopy(new)}]


def _container_copy(container: Any) -> Any:
    if not isinstance(container, Mapping):
        return container
    out = dict(container)
    resources = out.get("resources")
    if isinstance(resources, Mapping):
        # limits/requests are maps of scalars: two levels of copying make them private.
        out["resources"] = {
            k: dict(v) if isinstance(v, Mapping) else copy.deepcopy(v) for k, v in resources.items()
        }
    elif resources is not None:
        out["resources"] = copy.deepcopy(resources)
    return out


def working_copy(pod: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a pod in which every part a mutation may change is private and the rest is shared.

    Private: the top level, metadata with its annotations and labels, spec, each container's
    mapping with its resources, and the affinity. Everything else (images, volumes, env, ...) is
    the caller's object and must not be modified.
    """
    work = dict(pod)
    metadata = work.get("metadata")
    if isinstance(metadata, Mapping):
        metadata = dict(metadata)
        for key in ("annotations", "labels"):
            if isinstance(metadata.get(key), Mapping):
                metadata[key] = dict(metadata[key])
        work["metadata"] = metadata
    spec = work.get("spec")
    if isinstance(spec, Mapping):
        spec = dict(spec)
        for list_name in ("initContainers", "containers"):
            if isinstance(spec.get(list_name), list):
                spec[list_name] = [_container_copy(c) for c in spec[list_name]]
        if "affinity" in spec:
            spec["affinity"] = copy.deepcopy(spec["affinity"])
        work["spec"] = spec
    return work


def _tokens(pointer: str) -> list[str]:
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]


def value_at(obj: Any, pointer: str) -> Any:
    """The value an RFC 6901 pointer names in ``obj``, or ``MISSING``."""
    for token in _tokens(pointer):
        if isinstance(obj, Mapping) and token in obj:
            obj = obj[token]
        elif isinstance(obj, list) and token.isdigit() and int(token) < len(obj):
            obj = obj[int(token)]
        else:
            return MISSING
    return obj


def apply_ops(obj: Any, ops: list[dict[str, Any]]) -> Any:
    """A deep copy of ``obj`` with ``diff``'s ops (add, replace, remove) applied."""
    out = copy.deepcopy(obj)
    for op in ops:
        *parents, last = _tokens(op["path"])
        target = out
        for token in parents:
            target = target[int(token)] if isinstance(target, list) else target[token]
        key: Any = int(last) if isinstance(target, list) else last
        if op["op"] == "remove":
            del target[key]
        else:
            target[key] = copy.deepcopy(op["value"])
    return out
