"""JSON patch (RFC 6902) as kube-apiserver 1.20 applies it: github.com/evanphx/json-patch v4.9.0.

That library differs from the RFC where a client can notice, and the double follows it:

- ``replace`` of a missing object member adds it (only arrays check the index);
- negative array indices count from the end;
- a path that does not start with ``/`` is looked up from the document root all the same;
- a failing operation is a 422 "the server rejected our request due to an error in our request"
  that says nothing more (the library's error text is dropped); a body that is not a list of
  operations is a 400 with ``encoding/json``'s text.
"""

from __future__ import annotations

import json
import re
from typing import Any

from vgpu_guard.apidouble import _status as st

__all__ = ["apply_json_patch"]

_MISSING = "missing value"
_REJECTED = "the server rejected our request due to an error in our request"
_INVALID_INDEX = "invalid index referenced"


class _PatchError(Exception):
    pass


def apply_json_patch(document: Any, patch: Any) -> Any:
    """The patched copy of ``document``, or the API server's error for ``patch``."""
    if not isinstance(patch, list):
        kind = {dict: "object", str: "string", bool: "bool"}.get(type(patch), "number")
        if patch is None:
            return json.loads(json.dumps(document))
        raise st.bad_request(f"json: cannot unmarshal {kind} into Go value of type jsonpatch.Patch")
    for op in patch:
        if not isinstance(op, dict) and op is not None:
            kind = {list: "array", str: "string", bool: "bool"}.get(type(op), "number")
            raise st.bad_request(f"json: cannot unmarshal {kind} into Go value of type jsonpatch.Operation")
    doc = json.loads(json.dumps(document))
    try:
        for op in patch:
            doc = _apply(doc, op or {})
    except _PatchError as e:
        # NewGenericServerResponse(422, ...) keeps none of the library's text (it stays in the
        # exception chain here, for whoever debugs a test).
        raise st.raise_status(st.make_status(422, "Invalid", _REJECTED, name="")) from e
    return doc


def _string(op: dict[str, Any], key: str) -> str | None:
    value = op.get(key)
    return value if isinstance(value, str) else None


def _apply(doc: Any, op: dict[str, Any]) -> Any:
    kind = _string(op, "op") or "unknown"
    if kind == "add":
        _add(doc, op)
    elif kind == "remove":
        _remove(doc, op)
    elif kind == "replace":
        _replace(doc, op)
    elif kind == "move":
        _move(doc, op)
    elif kind == "test":
        _test(doc, op)
    elif kind == "copy":
        _copy_op(doc, op)
    else:
        raise _PatchError(f"Unexpected kind: {kind}")
    return doc


def _decode_key(key: str) -> str:
    return key.replace("~1", "/").replace("~0", "~")


def _find(doc: Any, path: str) -> tuple[Any, str] | None:
    """findObject: the container holding the last segment, and that segment (None: missing)."""
    split = path.split("/")
    if len(split) < 2:
        return None
    container = doc
    for part in split[1:-1]:
        found, ok = _get(container, _decode_key(part))
        if not ok or found is None or not isinstance(found, dict | list):
            return None
        container = found
    return container, _decode_key(split[-1])


def _atoi(key: str) -> int:
    if not re.fullmatch(r"[+-]?[0-9]+", key):
        raise _PatchError(f'strconv.Atoi: parsing "{key}": invalid syntax')
    return int(key)


def _get(container: Any, key: str) -> tuple[Any, bool]:
    """(value, found) as partialDoc.get / partialArray.get see it (an object's missing member is
    (None, True): no error)."""
    if isinstance(container, dict):
        return container.get(key), True
    try:
        index = _atoi(key)
    except _PatchError:
        return None, False
    if index >= len(container):
        return None, False
    return container[index], True


def _value(op: dict[str, Any]) -> Any:
    return json.loads(json.dumps(op.get("value")))


def _path(op: dict[str, Any], verb: str, *, wrap_missing: bool) -> str:
    path = _string(op, "path")
    if path is None:
        if wrap_missing:
            raise _PatchError(f"{verb} operation failed to decode path: {_MISSING}")
        raise _PatchError(f"{verb} operation failed to decode path: operation missing path field: {_MISSING}")
    return path


def _insert(container: Any, key: str, value: Any, path: str, what: str) -> None:
    if isinstance(container, dict):
        container[key] = value
        return
    if key == "-":
        container.append(value)
        return
    try:
        index = _atoi(key)
    except _PatchError as e:
        raise _PatchError(f"{what}: value was not a proper array index: '{key}': {e}") from e
    size = len(container) + 1
    if index >= size or index < -size:
        raise _PatchError(f"{what}: Unable to access invalid index: {index}: {_INVALID_INDEX}")
    if index < 0:
        index += size
    container.insert(index, value)


def _add(doc: Any, op: dict[str, Any]) -> None:
    path = _path(op, "add", wrap_missing=True)
    found = _find(doc, path)
    if found is None:
        raise _PatchError(f'add operation does not apply: doc is missing path: "{path}": {_MISSING}')
    container, key = found
    _insert(container, key, _value(op), path, f"error in add for path: '{path}'")


def _delete(container: Any, key: str, what: str) -> Any:
    if isinstance(container, dict):
        if key not in container:
            raise _PatchError(f"{what}: Unable to remove nonexistent key: {key}: {_MISSING}")
        return container.pop(key)
    try:
        index = _atoi(key)
    except _PatchError as e:
        raise _PatchError(f"{what}: {e}") from e
    if index >= len(container) or index < -len(container):
        raise _PatchError(f"{what}: Unable to access invalid index: {index}: {_INVALID_INDEX}")
    return container.pop(index)


def _remove(doc: Any, op: dict[str, Any]) -> None:
    path = _path(op, "remove", wrap_missing=True)
    found = _find(doc, path)
    if found is None:
        raise _PatchError(f'remove operation does not apply: doc is missing path: "{path}": {_MISSING}')
    container, key = found
    _delete(container, key, f"error in remove for path: '{path}'")


def _replace(doc: Any, op: dict[str, Any]) -> None:
    path = _path(op, "replace", wrap_missing=False)
    found = _find(doc, path)
    if found is None:
        raise _PatchError(f"replace operation does not apply: doc is missing path: {path}: {_MISSING}")
    container, key = found
    _, ok = _get(container, key)
    if not ok:
        raise _PatchError(f"replace operation does not apply: doc is missing key: {path}: {_MISSING}")
    if isinstance(container, dict):
        container[key] = _value(op)
    else:
        container[_atoi(key)] = _value(op)


def _from(op: dict[str, Any], verb: str) -> str:
    source = _string(op, "from")
    if source is None:
        raise _PatchError(
            f"{verb} operation failed to decode from: operation, missing from field: " + _MISSING
        )
    return source


def _move(doc: Any, op: dict[str, Any]) -> None:
    source = _from(op, "move")
    found = _find(doc, source)
    if found is None:
        raise _PatchError(f"move operation does not apply: doc is missing from path: {source}: {_MISSING}")
    container, key = found
    value = _delete(container, key, f"error in move for path: '{key}'")
    path = _path(op, "move", wrap_missing=False)
    target = _find(doc, path)
    if target is None:
        raise _PatchError(
            f"move operation does not apply: doc is missing destination path: {path}: " + _MISSING
        )
    _insert(target[0], target[1], value, path, f"error in move for path: '{path}'")


def _same(a: Any, b: Any) -> bool:
    """lazyNode.equal: objects and arrays structurally, scalars by their JSON text."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return json.dumps(a) == json.dumps(b)


def _test(doc: Any, op: dict[str, Any]) -> None:
    path = _path(op, "test", wrap_missing=False)
    found = _find(doc, path)
    if found is None:
        raise _PatchError(f"test operation does not apply: is missing path: {path}: {_MISSING}")
    container, key = found
    value, ok = _get(container, key)
    if not ok:
        why = f"Unable to access invalid index: {key}: {_INVALID_INDEX}"
        raise _PatchError(f"error in test for path: '{path}': {why}")
    wanted = op.get("value")
    if value is None:
        if wanted is None:
            return
        raise _PatchError(f"testing value {path} failed: test failed")
    if wanted is None or not _same(value, wanted):
        raise _PatchError(f"testing value {path} failed: test failed")


def _copy_op(doc: Any, op: dict[str, Any]) -> None:
    source = _from(op, "copy")
    found = _find(doc, source)
    if found is None:
        raise _PatchError(f"copy operation does not apply: doc is missing from path: {source}: {_MISSING}")
    value, ok = _get(*found)
    if not ok:
        raise _PatchError(f"error in copy for from: '{source}': {_INVALID_INDEX}")
    path = _string(op, "path")
    if path is None:
        raise _PatchError(f"copy operation failed to decode path: {_MISSING}")
    target = _find(doc, path)
    if target is None:
        raise _PatchError(
            f"copy operation does not apply: doc is missing destination path: {path}: " + _MISSING
        )
    _insert(target[0], target[1], json.loads(json.dumps(value)), path, "error while adding value during copy")
