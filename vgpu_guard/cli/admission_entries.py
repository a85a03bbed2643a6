"""One admission result as ``review`` and ``simulate`` report it (their JSON shares this shape).

Kept in one place so a script that reads ``review -o json`` reads the ``admission`` list of
``simulate -o json`` with the same code: source, kind, namespace, name, allowed, code, message,
warnings, patch (RFC 6902) and the mutated object.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vgpu_guard.engine.admission import ReviewResult

__all__ = ["admission_entry"]


def admission_entry(source: str, result: ReviewResult) -> dict[str, Any]:
    """The JSON entry of one reviewed object; ``source`` says where it came from (``file#n``)."""
    obj = result.object
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(metadata, Mapping)
    return {
        "source": source,
        "kind": obj.get("kind"),
        "namespace": metadata.get("namespace") or ("" if obj.get("kind") == "Queue" else "default"),
        "name": metadata.get("name") or metadata.get("generateName") or "",
        "allowed": result.decision.allowed,
        "code": result.decision.code,
        "message": result.decision.message,
        "warnings": list(result.warnings),
        "patch": list(result.patch),
        "object": obj,
    }
