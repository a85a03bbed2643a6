"""The controller's Events: built, rate-limited by the client, sent in the background.

Apart from the reports that decide *what* to say (controller/reports.py, node_reports.py), so the
one place that owns the background tasks, their bound and their flushing is small enough to trust.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from vgpu_guard.controller.metrics import AllocationMetrics
from vgpu_guard.engine.objects import Obj
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.errors import KubeError
from vgpu_guard.kube.events import event_object, meta
from vgpu_guard.kube.resources import EVENTS
from vgpu_guard.logs import audit

__all__ = ["MAX_PENDING_EVENTS", "Events", "meta"]

log = logging.getLogger("vgpu_guard.controller.allocation")

# Events waiting to be sent (for their rate limit) beyond which new ones are dropped and counted.
MAX_PENDING_EVENTS = 1000


def _retrieved(task: asyncio.Task[None]) -> None:
    """``event`` logs its own API errors; anything else ends here, logged, never unretrieved."""
    if not task.cancelled() and task.exception() is not None:
        log.warning("sending an Event failed: %s", task.exception())


class Events:
    """Creates the controller's Events; ``emit`` sends one without making the caller wait."""

    def __init__(
        self,
        client: ClusterClient,
        *,
        identity: str,
        clock: Callable[[], float],
        metrics: AllocationMetrics,
    ) -> None:
        self.client = client
        self.identity = identity
        self.clock = clock
        self.metrics = metrics
        self._events: set[asyncio.Task[None]] = set()
        self._reported_pods: set[tuple[str, str]] = set()

    def emit(self, event: Coroutine[Any, Any, None]) -> None:
        """Send an Event without holding up the caller; ``flush_events`` waits for all of them.

        Events wait for their own rate limit; when MAX_PENDING_EVENTS already wait, a new one is
        dropped and counted (kube-scheduler's event broadcaster drops too, when its queue is full),
        so a burst of bindings faster than the Events budget cannot grow memory without bound.
        """
        if len(self._events) >= MAX_PENDING_EVENTS:
            event.close()
            self.metrics.events_dropped.inc()
            return
        task = asyncio.ensure_future(event)
        self._events.add(task)
        task.add_done_callback(_retrieved)
        task.add_done_callback(self._events.discard)

    async def flush_events(self) -> None:
        """Wait for the Events sent in the background so far (they log their own failures)."""
        while self._events:
            await asyncio.gather(*list(self._events), return_exceptions=True)

    async def event(
        self, obj: Mapping[str, Any], *, reason: str, message: str, type_: str = "Normal"
    ) -> None:
        """Create one Event on ``obj``; an API error is logged, never raised (a report must not stop
        the pass that made it)."""
        m = meta(obj)
        namespace = str(m.get("namespace") or "default")
        event = event_object(
            obj, reason=reason, message=message, type_=type_, identity=self.identity, now=self.clock()
        )
        try:
            await self.client.create(EVENTS, event, namespace=namespace)
        except KubeError as e:
            log.warning("cannot record event %s on %s/%s: %s", reason, namespace, m.get("name"), e)

    async def once(self, pod: Obj, reason: str, message: str) -> None:
        """A Warning Event and an audit line on ``pod`` once per reason, until the pod is forgotten."""
        key = (str(meta(pod).get("uid")), reason)
        if key in self._reported_pods:
            return
        self._reported_pods.add(key)
        await self.event(pod, reason=reason, message=message, type_="Warning")
        audit(reason, pod=f"{meta(pod).get('namespace')}/{meta(pod).get('name')}", by=self.identity)

    def forget_pods(self, gone: set[str]) -> None:
        """Drop the ``once`` marks of pods that are gone (by UID)."""
        if gone and self._reported_pods:
            self._reported_pods = {k for k in self._reported_pods if k[0] not in gone}
