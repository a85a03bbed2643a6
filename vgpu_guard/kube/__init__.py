"""Cluster access: one protocol, two adapters, our own errors."""

from vgpu_guard.kube.client import ClusterClient, ObjectList, WatchEvent
from vgpu_guard.kube.errors import (
    AlreadyExists,
    Conflict,
    Expired,
    Forbidden,
    Invalid,
    KubeError,
    NotFound,
    Unavailable,
    Unsupported,
)

__all__ = [
    "AlreadyExists",
    "ClusterClient",
    "Conflict",
    "Expired",
    "Forbidden",
    "Invalid",
    "KubeError",
    "NotFound",
    "ObjectList",
    "Unavailable",
    "Unsupported",
    "WatchEvent",
]
