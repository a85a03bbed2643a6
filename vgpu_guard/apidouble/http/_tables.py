"""``meta.k8s.io Table`` answers for ``kubectl get``, where the double can print like the server.

Served for custom resources, as apiextensions-apiserver 1.20 converts them
(registry/customresource/tableconvertor): a Name column, then the version's
``additionalPrinterColumns`` (or Age when it declares none) evaluated by simple JSONPath; rows
carry the object as PartialObjectMetadata (``includeObject=Metadata``, the default), the whole
object (``Object``) or nothing (``None``). Pods, nodes and namespaces are printed as 1.20 prints
them (``_printers``); other built-in kinds are not converted: the double answers JSON where the
client's Accept allows it and kubectl prints them itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from vgpu_guard.apidouble.http._openapi import builtin_document
from vgpu_guard.apidouble.http._printers import PRINTERS, column_definitions, human_duration
from vgpu_guard.engine.objects import Obj

__all__ = ["builtin_table", "crd_columns", "crd_table", "human_duration"]

_STEP = re.compile(r"\.([^.\[\]]+)|\[(\d+|\*)\]")


def _meta_doc(field: str) -> str:
    props = builtin_document()["definitions"]["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"]
    return str(props[field]["description"])


def crd_columns(crd: Obj, version: str) -> list[Obj]:
    """The version's printer columns, Age when it has none (serveDefaultColumnsIfEmpty)."""
    for v in (crd.get("spec") or {}).get("versions") or ():
        if v.get("name") == version and v.get("additionalPrinterColumns"):
            return list(v["additionalPrinterColumns"])
    return [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp",
             "description": _meta_doc("creationTimestamp")}]  # fmt: skip


def _find(obj: Any, path: str) -> list[Any]:
    """client-go jsonpath for the simple paths CRD columns allow (``.a.b``, ``[0]``, ``[*]``)."""
    found = [obj]
    pos = 0
    path = path.strip()
    while pos < len(path):
        m = _STEP.match(path, pos)
        if m is None:
            return []
        pos = m.end()
        key, index = m.group(1), m.group(2)
        nxt: list[Any] = []
        for cur in found:
            if key is not None and isinstance(cur, dict) and key in cur:
                nxt.append(cur[key])
            elif index == "*" and isinstance(cur, list):
                nxt.extend(cur)
            elif index is not None and index != "*" and isinstance(cur, list) and int(index) < len(cur):
                nxt.append(cur[int(index)])
        found = nxt
    return found


def _go_print(value: Any) -> str:
    """fmt.Fprint of a JSON value, as jsonpath.PrintResults writes a string column."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int)):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e21 else repr(value)
    return json.dumps(value, separators=(",", ":"))


def _cell(kind: str, value: Any, now: datetime) -> Any:
    """cellForJSONValue: the value when it has the column's type, else null."""
    if value is None:
        return None
    if kind == "string":
        return _go_print(value)
    if kind == "integer" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    if kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind == "date" and isinstance(value, str):
        try:
            when = datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        except ValueError:
            return "<invalid>"
        return human_duration((now - when).total_seconds())
    return None


def _row_object(obj: Obj, include: str, version: str) -> Obj | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": obj.get("metadata") or {},
    }


def crd_table(
    body: Obj, columns: list[Obj], *, version: str, include: str, now: datetime | None = None
) -> Obj:
    """A list or one custom resource as a Table with ``columns`` (CRD printer columns)."""
    now = now or datetime.now(UTC)
    headers: list[Obj] = [
        {"name": "Name", "type": "string", "format": "name", "description": _meta_doc("name"), "priority": 0}
    ]
    for col in columns:
        doc = f"Custom resource definition column (in JSONPath format): {col.get('jsonPath', '')}"
        headers.append({
            "name": col.get("name", ""), "type": col.get("type", ""), "format": col.get("format", ""),
            "description": col.get("description") or doc, "priority": int(col.get("priority") or 0),
        })  # fmt: skip

    def row(item: Obj) -> tuple[list[Any], list[Obj]]:
        cells: list[Any] = [(item.get("metadata") or {}).get("name", "")]
        for col in columns:
            found = _find(item, col.get("jsonPath", ""))
            cells.append(_cell(col.get("type", ""), found[0] if found else None, now))
        return cells, []

    return _table(body, headers, row, version=version, include=include)


def builtin_table(
    body: Obj, key: tuple[str, str], *, version: str, include: str, now: datetime | None = None
) -> Obj:
    """A list or one pod, node or namespace as kube-apiserver 1.20 prints it (``_printers``)."""
    moment = now or datetime.now(UTC)
    printer = PRINTERS[key]
    return _table(
        body, column_definitions(key[1]), lambda item: printer(item, moment), version=version, include=include
    )


def _table(
    body: Obj,
    headers: list[Obj],
    row_for: Callable[[Obj], tuple[list[Any], list[Obj]]],
    *,
    version: str,
    include: str,
) -> Obj:
    is_list = isinstance(body.get("items"), list)
    items: list[Obj] = body["items"] if is_list else [body]
    meta_in = body.get("metadata") or {}
    meta: Obj = {"resourceVersion": meta_in.get("resourceVersion", "")}
    if is_list and meta_in.get("continue"):
        meta["continue"] = meta_in["continue"]
    if is_list and meta_in.get("remainingItemCount") is not None:
        meta["remainingItemCount"] = meta_in["remainingItemCount"]
    rows: list[Obj] = []
    for item in items:
        cells, conditions = row_for(item)
        row: Obj = {"cells": cells}
        if conditions:
            row["conditions"] = conditions
        obj = _row_object(item, include, version)
        if obj is not None:
            row["object"] = obj
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": meta,
        "columnDefinitions": headers,
        "rows": rows,
    }
