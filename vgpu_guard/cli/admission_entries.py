"""One admission result as ``review`` and ``simulate`` report it (their JSON shares this shape).

Kept in one place so a script that reads ``review -o json`` reads the ``admission`` list of
``simulate -o json`` with the same code: source, kind, namespace, name, allowed, code, message,
warnings, patch (RFC 6902) and the mutated object.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vgpu_guard.engine.admission import ReviewResult

__all__ = ["CLUSTER_SCOPED", "admission_entry"]

# Kinds the CLI meets that have no namespace (shown as "Node gpu-0", never "default/gpu-0").
CLUSTER_SCOPED = frozenset(
    {"Queue", "Node", "Namespace", "PriorityClass", "HyperNode", "PersistentVolume", "StorageClass"}
)


def admission_entry(source: str, result: ReviewResult) -> dict[str, Any]:
    """The JSON entry of one reviewed object; ``source`` says where it came from (``file#n``)."""
    obj = result.object
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(metadata, Mapping)
    return {
        "source": source,
        "kind": obj.get("kind"),
        "namespace": "" if obj.get("kind") in CLUSTER_SCOPED else (metadata.get("namespace") or "default"),
        "name": metadata.get("name") or metadata.get("generateName") or "",
        "allowed": result.decision.allowed,
        "code": result.decision.code,
        "message": result.decision.message,
        "warnings": list(result.warnings),
        "patch": list(result.patch),
        "object": obj,
    }
