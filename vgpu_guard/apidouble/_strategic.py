"""Strategic merge patch for the built-in kinds the double serves (k8s.io/apimachinery strategicpatch).

A strategic merge patch is a JSON merge patch with three differences, all taken from the Go
types' ``patchStrategy``/``patchMergeKey`` tags:

- a list whose field says ``merge`` is merged, not replaced: lists of objects by their merge key
  (``containers`` by ``name``, ``ports`` by ``containerPort``, ...), lists of scalars as a set
  (``finalizers``); the result puts the patch's items first in the patch's order, then the items
  only the server had, as ``normalizeElementOrder`` does;
- directives: ``$patch: replace|delete`` in an object or a list item, ``$retainKeys``,
  ``$deleteFromPrimitiveList/<field>``, ``$setElementOrder/<field>``;
- every other list is replaced, every object merged, ``null`` deletes (as in a merge patch).

Custom resources have no Go types: the API server refuses strategic merge patches for them (415).
Errors carry the API server's wording and codes (``interpretStrategicMergePatchError``).
"""

from __future__ import annotations

from typing import Any

from vgpu_guard.apidouble import _status as st
from vgpu_guard.apidouble._gotext import go_sprint, json_kind

__all__ = ["merge_keys_for", "strategic_merge"]

Path = tuple[str, ...]
# Field path -> merge key ("" for a list of scalars) of every list with patchStrategy "merge".
# "[]" stands for "each item of the list".
_META: dict[Path, str] = {("finalizers",): "", ("ownerReferences",): "uid"}
_CONTAINER: dict[Path, str] = {
    ("ports",): "containerPort",
    ("env",): "name",
    ("volumeMounts",): "mountPath",
    ("volumeDevices",): "devicePath",
}
_POD_SPEC: dict[Path, str] = {
    ("volumes",): "name",
    ("initContainers",): "name",
    ("containers",): "name",
    ("ephemeralContainers",): "name",
    ("imagePullSecrets",): "name",
    ("hostAliases",): "ip",
    ("topologySpreadConstraints",): "topologyKey",
}
for _list in ("initContainers", "containers", "ephemeralContainers"):
    for _field, _key in _CONTAINER.items():
        _POD_SPEC[(_list, "[]", *_field)] = _key


def _under(prefix: Path, table: dict[Path, str]) -> dict[Path, str]:
    return {prefix + path: key for path, key in table.items()}


def _object(**parts: dict[Path, str]) -> dict[Path, str]:
    out = _under(("metadata",), _META)
    for table in parts.values():
        out.update(table)
    return out


_WEBHOOKS: dict[Path, str] = {("webhooks",): "name"}
_TABLES: dict[tuple[str, str], dict[Path, str]] = {
    ("", "pods"): _object(
        spec=_under(("spec",), _POD_SPEC),
        status={("status", "conditions"): "type", ("status", "podIPs"): "ip"},
    ),
    ("", "podtemplates"): _object(
        template=_under(("template", "metadata"), _META) | _under(("template", "spec"), _POD_SPEC)
    ),
    ("apps", "deployments"): _object(
        template=_under(("spec", "template", "metadata"), _META)
        | _under(("spec", "template", "spec"), _POD_SPEC),
        status={("status", "conditions"): "type"},
    ),
    ("", "nodes"): _object(
        spec={("spec", "podCIDRs"): ""},
        status={("status", "conditions"): "type", ("status", "addresses"): "type"},
    ),
    ("", "namespaces"): _object(status={("status", "conditions"): "type"}),
    ("", "serviceaccounts"): _object(secrets={("secrets",): "name"}),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): _object(webhooks=_WEBHOOKS),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): _object(webhooks=_WEBHOOKS),
}


def merge_keys_for(group: str, plural: str) -> dict[Path, str]:
    """The merge lists of a built-in kind (every kind has its metadata's)."""
    return _TABLES.get((group, plural), _object())


_DIRECTIVE = "$patch"
_RETAIN = "$retainKeys"
_DELETE_FROM = "$deleteFromPrimitiveList"
_SET_ORDER = "$setElementOrder"


class _Failure(Exception):
    """A Go error: ``message`` and the status the API server turns it into."""

    def __init__(self, message: str, code: int = 500):
        super().__init__(message)
        self.code = code


def _bad_type(expected: str, value: Any) -> _Failure:
    return _Failure(f"expected a {expected}, but received a {_go_type(value)}")


def _go_type(value: Any) -> str:
    if value is None:
        return "%!s(<nil>)"
    if isinstance(value, dict):
        return "map[string]interface {}"
    if isinstance(value, list):
        return "[]interface {}"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, str):
        return "string"
    return "float64"


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "map"
    if isinstance(value, list):
        return "slice"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, str):
        return "string"
    return "float64"


def strategic_merge(original: dict[str, Any], patch: Any, group: str, plural: str) -> dict[str, Any]:
    """Apply ``patch`` to ``original`` (a fresh dict; neither argument is changed) or raise the
    API server's error (400 for a body that is not an object, 422/500 for bad directives)."""
    if not isinstance(patch, dict):
        if patch is None:
            return dict(_copy(original))
        raise st.bad_request(
            f"json: cannot unmarshal {json_kind(patch)} into Go value of type map[string]interface {{}}"
        )
    try:
        return _merge_map(_copy(original), _copy(patch), (), merge_keys_for(group, plural))
    except _Failure as e:
        if e.code == 400:
            raise st.bad_request(str(e)) from e
        if e.code == 422:
            raise st.raise_status(st.make_status(422, "Invalid", str(e))) from e
        raise st.internal(str(e)) from e


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _list_meta(table: dict[Path, str], path: Path) -> tuple[bool, str]:
    """(does the list at ``path`` merge, its merge key)."""
    if path in table:
        return True, table[path]
    return False, ""


def _merge_map(
    original: dict[str, Any], patch: dict[str, Any], path: Path, table: dict[Path, str]
) -> dict[str, Any]:
    if _DIRECTIVE in patch:
        directive = patch[_DIRECTIVE]
        if directive == "replace":
            del patch[_DIRECTIVE]
            return patch
        if directive == "delete":
            return {}
        raise _Failure(f"unknown patch type: {go_sprint(directive)} in map: {go_sprint(patch)}")
    _apply_retain_keys(original, patch)
    _apply_set_element_order(original, patch, path, table)
    for raw_key in list(patch):
        value, key = patch[raw_key], raw_key
        delete_list = False
        if raw_key.startswith(_DELETE_FROM):
            parts = raw_key.split("/", 1)
            if len(parts) < 2 or parts[0] != _DELETE_FROM:
                raise _Failure("invalid patch format of primitive list", 400)
            key, delete_list = parts[1], True
        if value is None:
            original.pop(key, None)
            continue
        if key not in original:
            original[key] = value
            continue
        current = original[key]
        if _kind(current) != _kind(value):
            original[key] = value
            continue
        if isinstance(current, dict):
            original[key] = _merge_map(current, value, (*path, key), table)
        elif isinstance(current, list):
            merges, merge_key = _list_meta(table, (*path, key))
            original[key] = (
                _merge_list(
                    current, value, (*path, key), table=table, merge_key=merge_key, delete_list=delete_list
                )
                if merges
                else value
            )
        else:
            original[key] = value
    return original


def _apply_retain_keys(original: dict[str, Any], patch: dict[str, Any]) -> None:
    if _RETAIN not in patch:
        return
    retain = patch.pop(_RETAIN)
    if not isinstance(retain, list):
        raise _Failure("invalid patch format of retainKeys", 400)
    keep = {go_sprint(v) for v in retain}
    for key, value in patch.items():
        if value is None or key.startswith((_DELETE_FROM, _SET_ORDER)):
            continue
        if key not in keep:
            raise _Failure("invalid patch format of retainKeys", 400)
    for key in list(original):
        if key not in keep:
            del original[key]


def _apply_set_element_order(
    original: dict[str, Any], patch: dict[str, Any], path: Path, table: dict[Path, str]
) -> None:
    """``$setElementOrder/<field>``: merge that list now and order it as the directive says."""
    for key in [k for k in patch if k.startswith(_SET_ORDER)]:
        order = patch.pop(key)
        if not isinstance(order, list):
            raise _bad_type("[]interface {}", order)
        parts = key.split("/", 1)
        if len(parts) < 2 or parts[0] != _SET_ORDER:
            raise _Failure("invalid patch format of setElementOrder list", 400)
        field = parts[1]
        merges, merge_key = _list_meta(table, (*path, field))
        found_original, found_patch = field in original, field in patch
        current = original.get(field) if found_original else None
        incoming = patch.get(field) if found_patch else None
        if found_original and not isinstance(current, list):
            raise _bad_type("[]interface {}", current)
        if found_patch and not isinstance(incoming, list):
            raise _bad_type("[]interface {}", incoming)
        if found_original and found_patch:
            assert isinstance(current, list) and isinstance(incoming, list)
            merged = (
                _merge_list(
                    current, incoming, (*path, field), table=table, merge_key=merge_key, delete_list=False
                )
                if merges
                else incoming
            )
        elif found_original:
            merged = current or []
        elif found_patch:
            merged = incoming or []
        else:
            continue
        patch_items, server_only = _partition(merged, order, merge_key)
        original[field] = _normalize_order(patch_items, server_only, order, current or [], merge_key)
        patch.pop(field, None)


def _item_key(item: Any, merge_key: str) -> Any:
    if merge_key:
        return _hashable(item.get(merge_key)) if isinstance(item, dict) else None
    return _hashable(item)


def _hashable(value: Any) -> Any:
    if isinstance(value, dict | list):
        return repr(value)
    if isinstance(value, bool):
        return ("bool", value)
    return value


def _merge_list(
    original: list[Any],
    patch: list[Any],
    path: Path,
    *,
    table: dict[Path, str],
    merge_key: str,
    delete_list: bool,
) -> list[Any]:
    if not original and not patch:
        return original
    kinds = {_kind(v) for v in original + patch}
    if "slice" in kinds:
        raise _Failure("lists of lists are not supported", 422)
    if len(kinds) > 1:
        raise _Failure(f"list element types are not identical: {go_sprint([original, patch])}")
    if kinds != {"map"}:
        if delete_list:
            gone = {_hashable(v) for v in patch}
            return [v for v in original if _hashable(v) not in gone]
        merged: list[Any] = []
        seen: set[Any] = set()
        for value in original + patch:
            if _hashable(value) not in seen:
                seen.add(_hashable(value))
                merged.append(value)
        patch_items, server_only = _partition(merged, patch, "")
        return _normalize_order(patch_items, server_only, patch, original, "")
    if not merge_key:
        raise _Failure(f"cannot merge lists without merge key for {'.'.join(p for p in path if p != '[]')}")
    original, patch = _special_elements(original, patch, merge_key)
    server_order = list(original)  # the live order, before new items are appended
    original = list(original)
    item_path = (*path, "[]")
    for item in patch:
        if merge_key not in item:
            raise _Failure(f"map: {go_sprint(item)} does not contain declared merge key: {merge_key}")
        index = next(
            (
                i
                for i, o in enumerate(original)
                if isinstance(o, dict) and merge_key in o and o[merge_key] == item[merge_key]
            ),
            None,
        )
        if index is None:
            original.append(item)
        else:
            original[index] = _merge_map(original[index], item, item_path, table)
    patch_items, server_only = _partition(original, patch, merge_key)
    return _normalize_order(patch_items, server_only, patch, server_order, merge_key)


def _special_elements(original: list[Any], patch: list[Any], merge_key: str) -> tuple[list[Any], list[Any]]:
    """``$patch: delete`` items remove their match; ``$patch: replace`` replaces the list."""
    plain: list[Any] = []
    replace = False
    for item in patch:
        if _DIRECTIVE not in item:
            plain.append(item)
            continue
        directive = item[_DIRECTIVE]
        if directive == "delete":
            if merge_key not in item:
                raise _Failure(f"map: {go_sprint(item)} does not contain declared merge key: {merge_key}")
            original = [
                o for o in original if not (isinstance(o, dict) and o.get(merge_key) == item[merge_key])
            ]
        elif directive == "replace":
            replace = True
        elif directive == "merge":
            raise _Failure("merging lists cannot yet be specified in the patch")
        else:
            raise _Failure(f"unknown patch type: {go_sprint(directive)} in map: {go_sprint(item)}")
    if replace:
        return plain, []
    return original, plain


def _partition(items: list[Any], by: list[Any], merge_key: str) -> tuple[list[Any], list[Any]]:
    wanted = {_item_key(v, merge_key) for v in by}
    in_patch = [v for v in items if _item_key(v, merge_key) in wanted]
    server_only = [v for v in items if _item_key(v, merge_key) not in wanted]
    return in_patch, server_only


def _index(order: list[Any], item: Any, merge_key: str) -> int:
    key = _item_key(item, merge_key)
    for i, candidate in enumerate(order):
        if _item_key(candidate, merge_key) == key:
            return i
    return -1


def _sort_by(items: list[Any], order: list[Any], merge_key: str) -> list[Any]:
    """normalizeSliceOrder: a stable sort by position in ``order``; ``$patch: delete`` items last."""
    deletes = [v for v in items if isinstance(v, dict) and v.get(_DIRECTIVE) == "delete"] if merge_key else []
    rest = [v for v in items if not (merge_key and isinstance(v, dict) and v.get(_DIRECTIVE) == "delete")]
    known = sorted(
        (v for v in rest if _index(order, v, merge_key) >= 0), key=lambda v: _index(order, v, merge_key)
    )
    # Go's sort.SliceStable with this "less" keeps unknown items' places relative to each other.
    out: list[Any] = []
    it = iter(known)
    for v in rest:
        out.append(next(it) if _index(order, v, merge_key) >= 0 else v)
    return out + deletes


def _normalize_order(
    patch_items: list[Any],
    server_only: list[Any],
    patch_order: list[Any],
    server_order: list[Any],
    merge_key: str,
) -> list[Any]:
    """normalizeElementOrder + mergeSortedSlice: patch items in the patch's order, server-only items
    slotted in where the live list had them relative to the patch items."""
    patch_items = _sort_by(patch_items, patch_order, merge_key)
    server_only = _sort_by(server_only, server_order, merge_key)
    out: list[Any] = []
    i = j = 0
    while i < len(server_only) or j < len(patch_items):
        if i >= len(server_only):
            out.append(patch_items[j])
            j += 1
        elif j >= len(patch_items):
            out.append(server_only[i])
            i += 1
        else:
            left, right = (
                _index(server_order, server_only[i], merge_key),
                _index(server_order, patch_items[j], merge_key),
            )
            if left >= 0 and right >= 0 and left < right:
                out.append(server_only[i])
                i += 1
            else:
                out.append(patch_items[j])
                j += 1
    return out
