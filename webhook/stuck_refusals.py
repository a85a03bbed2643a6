"""A pod the arbiter keeps refusing is told why: one Event naming what holds its GPUs (issue 43).

Volcano decides every session, so a refused pod is asked about again and again; a choice that stays
refused means Volcano's cache is catching up or the GPU is held by something Volcano does not
count (engine/stuck_refusal.py says which). The webhook is the only one that sees the refusals,
so it counts them per pod (``RefusalStreaks``: ``STUCK_REFUSALS`` within ``STUCK_WINDOW_SECONDS``,
in this replica) and, once per streak, writes a Warning ``GPUAssignmentStuck`` on the pod and
counts ``vgpu_guard_arbiter_stuck_refusals_total`` by whether Volcano counts every holder.

The Event is sent in the background (the refusal's answer never waits for it), at most
``MAX_PENDING`` at a time; an Event that cannot be written is logged and dropped. Memory is
bounded: the oldest streaks are forgotten past ``CAPACITY`` pods.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import OrderedDict
from collections.abc import Callable, Iterable

from prometheus_client import Counter

from vgpu_guard.engine.ledger import Allocation, NodeLedger
from vgpu_guard.engine.stuck_refusal import STUCK_REFUSALS, STUCK_WINDOW_SECONDS, holders_of, stuck_message
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.errors import KubeError
from vgpu_guard.kube.events import event_object
from vgpu_guard.kube.resources import EVENTS

__all__ = ["CAPACITY", "MAX_PENDING", "RefusalStreaks", "StuckNotices"]

log = logging.getLogger("vgpu_guard.webhook.arbiter")

CAPACITY = 10_000
MAX_PENDING = 100


class RefusalStreaks:
    """Refusals per pod UID: a streak starts at a refusal and lasts ``window`` seconds; ``refused``
    answers the count once per streak, when it reaches ``threshold``."""

    def __init__(
        self, threshold: int = STUCK_REFUSALS, window: float = STUCK_WINDOW_SECONDS, capacity: int = CAPACITY
    ) -> None:
        self.threshold, self.window, self.capacity = threshold, window, capacity
        # uid -> (streak start, refusals, noticed)
        self._streaks: OrderedDict[str, tuple[float, int, bool]] = OrderedDict()

    def refused(self, uid: str, now: float) -> int | None:
        start, count, noticed = self._streaks.pop(uid, (now, 0, False))
        if now - start > self.window:
            start, count, noticed = now, 0, False
        count += 1
        due = count >= self.threshold and not noticed
        self._streaks[uid] = (start, count, noticed or due)
        while len(self._streaks) > self.capacity:
            self._streaks.popitem(last=False)
        return count if due else None

    def reserved(self, uid: str) -> None:
        """The pod's assignment was reserved: its streak ends."""
        self._streaks.pop(uid, None)


class StuckNotices:
    """Counts the arbiter's refusals and writes the notice when a pod's streak is due."""

    def __init__(
        self,
        client: ClusterClient,
        counter: Counter,
        *,
        clock: Callable[[], float],
        identity: str = "",
        streaks: RefusalStreaks | None = None,
    ) -> None:
        self.client, self.counter, self.clock = client, counter, clock
        self.identity = identity or socket.gethostname()
        self.streaks = streaks or RefusalStreaks()
        self._pending: set[asyncio.Task[None]] = set()

    def refused(
        self,
        pod: tuple[str, str, str],
        node: str,
        ledger: NodeLedger,
        gpus: Iterable[str],
        *,
        unbound: Callable[[Allocation], bool],
        hold_seconds: int,
    ) -> None:
        """One refusal of pod ``(namespace, name, uid)``'s assignment on ``node``."""
        namespace, name, uid = pod
        count = self.streaks.refused(uid, self.clock())
        if count is None:
            return
        holders = holders_of(ledger, gpus, unbound=unbound, hold_seconds=hold_seconds, exclude_uid=uid)
        seen = all(h.volcano_sees for h in holders)
        self.counter.labels("counted-by-volcano" if seen else "unseen-by-volcano").inc()
        message = stuck_message(f"{namespace}/{name}", node, count, holders, window=int(self.streaks.window))
        target = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
        }
        event = event_object(
            target,
            reason="GPUAssignmentStuck",
            message=message,
            type_="Warning",
            identity=self.identity,
            now=self.clock(),
        )
        if len(self._pending) >= MAX_PENDING:
            log.warning("stuck-refusal Event dropped: %d pending", len(self._pending))
            return
        task = asyncio.get_running_loop().create_task(self._send(event, namespace))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _send(self, event: dict[str, object], namespace: str) -> None:
        try:
            await self.client.create(EVENTS, event, namespace=namespace)
        except KubeError as e:
            log.warning("cannot record the stuck-refusal Event in %s: %s", namespace, e)

    async def drain(self) -> None:
        """Wait for the Events in flight (tests, shutdown)."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)
