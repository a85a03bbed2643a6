"""A core/v1 Event as vgpu-guard writes it, for both shells: the controller's reports and the
webhook's stuck-refusal notice (webhook/stuck_refusals.py).

Built here, below both, so the two never differ in what ``kubectl describe`` shows: the same
source component, reporting instance and message bound.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

__all__ = ["COMPONENT", "EVENT_MESSAGE_LIMIT", "event_object", "meta"]

COMPONENT = "vgpu-guard"
# core/v1 Event messages are cut by the API server's validation at 1 KiB (ValidateEvent).
EVENT_MESSAGE_LIMIT = 1024


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``obj``'s metadata, or an empty mapping: a report never fails on a malformed object."""
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


def event_object(
    obj: Mapping[str, Any], *, reason: str, message: str, type_: str, identity: str, now: float
) -> dict[str, Any]:
    """The Event on ``obj`` (its namespace, "default" for a cluster object, as kubectl looks for
    them), the message truncated to what the API takes."""
    m = meta(obj)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    if len(message) > EVENT_MESSAGE_LIMIT:
        message = message[: EVENT_MESSAGE_LIMIT - 15] + "... (truncated)"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{m.get('name')}.", "namespace": str(m.get("namespace") or "default")},
        "involvedObject": {
            "apiVersion": str(obj.get("apiVersion") or "v1"),
            "kind": str(obj.get("kind") or "Pod"),
            "name": m.get("name"),
            "namespace": m.get("namespace") or "",
            "uid": m.get("uid"),
        },
        "reason": reason,
        "message": message,
        "type": type_,
        "count": 1,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": identity,
    }
