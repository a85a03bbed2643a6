"""Bindings, one in flight per node, started the moment the node's plugin handshake ends.

The device plugin matches a kubelet Allocate to the pod with the oldest ``vgpu-time`` among pods
in ``bind-phase=allocating`` (docs/design/ledger.md), so a node takes one new binding at a time.
Waiting for the next allocation pass to bind the node's next pod would make every node's cycle as
long as a pass; instead the pass commits all pods it decides for a node in one ledger write and
hands them here, and the next one is bound as soon as the pod informer shows the previous one
confirmed (or failed, ended, gone). Throughput then comes from all nodes cycling at once, each at
the speed of the plugin, not of the pass: the pipelining kube-scheduler gets from its binding
cycles.

Safety does not live here: only entries already committed by a successful ledger write are
offered, and the Binding itself is atomic on the server (409 when the pod is bound already).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from vgpu_guard.engine.annotations import BIND_PHASE
from vgpu_guard.engine.ledger import Allocation
from vgpu_guard.engine.objects import Obj
from vgpu_guard.kube.backoff import Backoff

__all__ = ["Binder", "Waiting"]

log = logging.getLogger("vgpu_guard.controller.binder")

DONE_TTL_SECONDS = 60.0
# Sends one Binding; True when the pod was bound (its node now waits for the plugin).
BindCall = Callable[[str, Allocation, Obj], Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class Waiting:
    """A committed entry waiting for its node, with the pod object the binding is made from."""

    entry: Allocation
    pod: Obj


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


class Binder:
    """Per-node queues of committed entries; ``offer`` from passes, ``observe`` from the pod informer."""

    def __init__(
        self,
        bind: BindCall,
        *,
        concurrency: int = 16,
        clock: Callable[[], float] = time.monotonic,
        backoff: Backoff | None = None,
    ) -> None:
        self._bind = bind
        self._clock = clock
        # Called (after a growing delay, as client-go's rate-limited requeue) when a binding failed,
        # so the next pass offers the entry again; the run loop points it at its wake event. The
        # delay is keyed by node: one node's failing bindings never slow another node's retries.
        self.retry: Callable[[], None] | None = None
        self._backoff = backoff or Backoff(initial=0.2, maximum=10.0)
        self._gate = asyncio.Semaphore(concurrency)
        self._queues: dict[str, deque[Waiting]] = {}
        self._queued: set[str] = set()
        # node -> UID of the pod whose handshake the node waits for (bound by us or seen allocating).
        self._inflight: dict[str, str] = {}
        # Nodes with a Binding request on the wire: no pass's read can know about it yet.
        self._sending: set[str] = set()
        # UIDs bound lately: a pass that read before their binding finished must not offer them
        # again (it would only earn a 409). Kept for DONE_TTL_SECONDS, oldest first, so expiry
        # pops from the front instead of rebuilding the map on every binding.
        self._done: OrderedDict[str, float] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()
        self.bound = 0  # bindings sent successfully, for tests and logs
        self.failures: list[str] = []  # requests that failed (passes report those they started)

    # -- inputs ---------------------------------------------------------------------------------------

    def offer(self, waiting: Mapping[str, Iterable[Waiting]], busy: Mapping[str, str]) -> None:
        """Queue committed entries per node (oldest reservation first) and start what may start.

        ``busy``: node -> UID of a pod the pass saw in ``bind-phase=allocating`` (younger than the
        timeout). The pass's read includes our own bindings, so it is the truth for every node:
        nodes it shows free are freed here (a confirmation the informer has not told us about yet,
        or a timeout).
        """
        keep = {n: u for n, u in self._inflight.items() if n in busy or n in self._sending}
        self._inflight = {**keep, **busy}
        for node, entries in waiting.items():
            queue = self._queues.setdefault(node, deque())
            fresh = [
                w
                for w in entries
                if w.entry.pod_uid not in self._queued and w.entry.pod_uid not in self._done
            ]
            for item in sorted(fresh, key=lambda w: (w.entry.reserved_at, w.entry.pod_uid)):
                queue.append(item)
                self._queued.add(item.entry.pod_uid)
        for node in list(self._queues):
            self._kick(node)

    def observe(self, pod: Mapping[str, Any], *, deleted: bool = False) -> None:
        """A pod changed: if its node waited for it and the handshake is over, bind the next."""
        if not self._inflight:
            return  # no handshake to end (a start's LIST delivers every pod here)
        spec = pod.get("spec")
        node = str(spec.get("nodeName") or "") if isinstance(spec, Mapping) else ""
        uid = str(_meta(pod).get("uid") or "")
        if not node or self._inflight.get(node) != uid:
            return
        status = pod.get("status")
        phase = status.get("phase") if isinstance(status, Mapping) else None
        notes = _meta(pod).get("annotations")
        allocating = isinstance(notes, Mapping) and notes.get(BIND_PHASE) == "allocating"
        if deleted or phase in ("Succeeded", "Failed") or not allocating:
            del self._inflight[node]
            log.debug(
                "node %s: handshake of %s over, %d waiting", node, uid, len(self._queues.get(node) or ())
            )
            self._kick(node)

    def forget_node(self, node: str) -> None:
        """The node is gone: its retry state goes with it (the table stays as large as what fails)."""
        self._backoff.reset(node)

    # -- binding --------------------------------------------------------------------------------------

    def _kick(self, node: str) -> None:
        queue = self._queues.get(node)
        if node in self._inflight or not queue:
            if queue is not None and not queue:
                del self._queues[node]
            return
        item = queue.popleft()
        self._inflight[node] = item.entry.pod_uid  # taken before the request: one at a time
        task = asyncio.ensure_future(self._send(node, item))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, node: str, item: Waiting) -> None:
        ok = False
        self._sending.add(node)
        try:
            async with self._gate:
                ok = await self._bind(node, item.entry, item.pod)
        except Exception as e:  # a failed request leaves the entry to the next pass
            log.warning("binding %s to %s failed, the next pass retries: %s", item.entry.key, node, e)
            self.failures.append(f"binding {item.entry.key} to {node}: {e}")
            del self.failures[:-100]
            if self.retry is not None:
                asyncio.get_running_loop().call_later(self._backoff.next(node), self.retry)
        finally:
            self._sending.discard(node)
            self._queued.discard(item.entry.pod_uid)
        if ok:
            self._backoff.reset(node)
            self.bound += 1
            now = self._clock()
            self._done[item.entry.pod_uid] = now
            while self._done and now - next(iter(self._done.values())) >= DONE_TTL_SECONDS:
                self._done.popitem(last=False)
            return
        if self._inflight.get(node) == item.entry.pod_uid:
            del self._inflight[node]  # nothing was bound: the node is free for the next entry
        self._kick(node)

    async def drain(self) -> None:
        """Wait until every binding started so far (and those they started) has ended."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
