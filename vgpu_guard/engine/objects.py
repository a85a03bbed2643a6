"""The one name for a Kubernetes object as decoded JSON, so ~80 modules stop defining their own.

Two forms, because the difference matters to a reader: ``Obj`` is a decoded object its holder may
build or change (a client's request body, a store's copy); ``ObjMap`` is one that is only read (the
engine's rules and snapshots take any mapping, and cached objects shared between pods are never
mutated: kube/sharing.py). Both are aliases: no runtime check, no cost.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["Obj", "ObjMap"]

Obj = dict[str, Any]
ObjMap = Mapping[str, Any]
