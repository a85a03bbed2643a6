"""Where the webhook gets its ClusterView: the seam between watches and decisions.

A pod is judged without calling the API server (a slow API server must not make every pod CREATE
slow, and a webhook that calls the API server it serves can deadlock it). It asks a ``ViewSource``
for the current snapshot instead: in a cluster, caches fed by list+watch
(``vgpu_guard.kube.view_cache``); in tests and offline, a fixed view. The exceptions are rare writes
whose answer a lagging cache would get wrong: a gang's first member (``recording.py``), a Queue
CREATE/UPDATE, judged on the Queues as stored (``fresh_queues.py``), and a GPU assignment written
by Volcano or the device plugin, reserved in the node's GPULedger before it lands (``arbiter.py``).
"""

from __future__ import annotations

from typing import Protocol

from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig

__all__ = ["StaticViewSource", "ViewSource"]


class ViewSource(Protocol):
    """Anything that can hand out the current snapshot cheaply (called on every request)."""

    def snapshot(self, config: GuardConfig) -> ClusterView: ...


class StaticViewSource:
    """A fixed view (tests, ``review``-like serving of a file); ``replace`` swaps it atomically."""

    def __init__(self, view: ClusterView) -> None:
        self._view = view

    def snapshot(self, config: GuardConfig) -> ClusterView:
        return self._view

    def replace(self, view: ClusterView) -> None:
        self._view = view
