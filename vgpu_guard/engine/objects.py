"""The one name for a Kubernetes object as decoded JSON, so ~80 modules stop defining their own.

Two forms, because the difference matters to a reader: ``Obj`` is a decoded object its holder may
build or change (a client's request body, a store's copy); ``ObjMap`` is one that is only read (the
engine's rules and snapshots take any mapping, and cached objects shared between pods are never
mutated: kube/sharing.py). Both are aliases: no runtime check, no cost.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["SUBDOMAIN_RULE", "Obj", "ObjMap", "is_subdomain_name", "version_number", "version_of"]

Obj = dict[str, Any]
ObjMap = Mapping[str, Any]

# apimachinery's validation.IsDNS1123Subdomain: what most objects' names must be (PodGroups,
# GangPlacements, ...), in the words kube-apiserver uses when it refuses one.
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
SUBDOMAIN_RULE = (
    "a lowercase RFC 1123 subdomain: lower case alphanumeric characters, '-' or '.', starting and "
    "ending with an alphanumeric character, at most 253 characters"
)


def version_number(text: object) -> int:
    """A resourceVersion as a number, -1 when absent or not numeric. kube-apiserver's are etcd
    revisions: comparable between writes of one object, which is all we compare (whose write is
    newer: our own or the cache's)."""
    try:
        return int(str(text)) if text else -1
    except ValueError:
        return -1


def version_of(obj: ObjMap) -> int:
    """``obj``'s ``metadata.resourceVersion`` as ``version_number`` reads it."""
    meta = obj.get("metadata")
    return version_number(meta.get("resourceVersion") if isinstance(meta, Mapping) else None)


def is_subdomain_name(name: str) -> bool:
    """Whether ``name`` can name an object whose names are DNS-1123 subdomains."""
    return len(name) <= 253 and _SUBDOMAIN.fullmatch(name) is not None
