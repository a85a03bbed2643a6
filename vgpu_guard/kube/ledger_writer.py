"""The one GPULedger writer: every ledger write of the controller and of the webhook's arbiter.

Why one module: the ledger is only consistent if every writer follows the same protocol (encode
with the derived summary, POST when the object does not exist yet, PUT carrying the
resourceVersion the decision was made on, a 409 re-decides on a fresh read). Two copies of that
protocol would drift.

Coalescing (the arbiter): Volcano binds a whole session at once, often many pods onto one node
(binpack), and every Binding reaches the webhook concurrently. One CAS write per request would
turn them into a chain of conflicts (each write invalidates the others' resourceVersion). So the
requests for one node wait in one batch: a single task per node takes every request waiting,
decides them in arrival order on one ledger version (each sees the ones before it), writes once,
and answers each. Requests that arrive during that write form the next batch. A conflict (a
write by the controller, or by another webhook replica) re-reads the ledger and decides the
still-unanswered requests again; nothing is answered "reserved" before its write succeeded.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from prometheus_client import CollectorRegistry, Counter, Histogram

from vgpu_guard.engine.arbiter import Refused, Reserved
from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.ledger import LedgerError, NodeLedger, decode_ledger, encode_ledger
from vgpu_guard.engine.ledger_summary import ledger_summary
from vgpu_guard.engine.objects import Obj, version_number
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.errors import Conflict, KubeError, NotFound
from vgpu_guard.kube.informer import InformerEvent
from vgpu_guard.kube.resources import LEDGERS

__all__ = ["OWN_WRITE_TTL_SECONDS", "Decide", "LedgerWriteMetrics", "LedgerWriter", "WriteFailed"]

log = logging.getLogger("vgpu_guard.ledger")

# A reservation's decision on a ledger version (engine.arbiter.arbitrate with its inputs bound).
Decide = Callable[[NodeLedger], Reserved | Refused]

# Conflicts one batch may meet before its requests are answered with an error: each conflict is a
# write by someone else that succeeded, so this bounds a storm, not ordinary contention.
MAX_ATTEMPTS = 8
# How long this writer's own write of a ledger may stand in for the cache's older copy (the echo of
# a write comes within seconds). Past it, the cache is trusted again, so a DELETE the informer
# never delivered as such (a relist after 410 reports the gone object at its last cached version)
# cannot pin a write for good; a cache still behind then only costs a 409 and a fresh read.
OWN_WRITE_TTL_SECONDS = 30.0
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
_ATTEMPT_BUCKETS = (1, 2, 3, 4, 6, 8)


class WriteFailed(Exception):
    """Raised to a reservation whose node's ledger could not be written (the reason is the text)."""


@dataclass(frozen=True)
class LedgerWriteMetrics:
    """How ledger writes went, by writer (``controller`` or ``arbiter``), and the arbiter's batching.

    One set per registry (``for_registry``): ``serve all`` runs the webhook and the controller in
    one process on one registry, and both write ledgers.
    """

    writes: Counter
    batch: Histogram
    attempts: Histogram
    stuck: Counter

    @classmethod
    def for_registry(cls, registry: CollectorRegistry) -> LedgerWriteMetrics:
        known = _BY_REGISTRY.get(registry)
        if known is None:
            known = _BY_REGISTRY[registry] = cls._create(registry)
        return known

    @classmethod
    def _create(cls, registry: CollectorRegistry) -> LedgerWriteMetrics:
        return cls(
            writes=Counter(
                "vgpu_guard_ledger_writes_total",
                "GPULedger writes sent, by writer and result (written, conflict: a 409 re-read and "
                "re-decided, error).",
                ["writer", "result"],
                registry=registry,
            ),
            batch=Histogram(
                "vgpu_guard_arbiter_batch_requests",
                "Admission requests answered by one ledger write (coalesced per node).",
                buckets=_BATCH_BUCKETS,
                registry=registry,
            ),
            attempts=Histogram(
                "vgpu_guard_arbiter_write_attempts",
                "Ledger decisions a reservation took before it was answered (1 + conflicts met).",
                buckets=_ATTEMPT_BUCKETS,
                registry=registry,
            ),
            stuck=Counter(
                "vgpu_guard_arbiter_stuck_refusals_total",
                "Pods whose GPU assignment the arbiter refused 5 times within 120 s, each told why with a "
                "GPUAssignmentStuck Event, by holders: counted-by-volcano (Volcano's cache is catching up) "
                "or unseen-by-volcano (a holder Volcano does not count keeps the GPUs).",
                ["holders"],
                registry=registry,
            ),
        )


_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, LedgerWriteMetrics] = weakref.WeakKeyDictionary()


@dataclass
class _Request:
    decide: Decide
    answer: asyncio.Future[Reserved | Refused]
    attempts: int = 0


@dataclass
class _Node:
    waiting: list[_Request] = field(default_factory=list)
    task: asyncio.Task[None] | None = None


def _rv_number(ledger: NodeLedger) -> int:
    """A ledger's resourceVersion as a number (-1 when it does not exist or is not numeric)."""
    return version_number(ledger.resource_version)


class LedgerWriter:
    """Writes GPULedgers with compare-and-swap; ``reserve`` coalesces admission requests per node."""

    def __init__(
        self,
        client: ClusterClient,
        *,
        memory_factor: int,
        writer: str,
        metrics: LedgerWriteMetrics | None = None,
        on_written: Callable[[Obj], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.memory_factor = memory_factor
        self.writer = writer
        self.metrics = metrics
        # Told of every ledger as written (the controller's informer cache takes our own writes at
        # once, as client-go's mutation cache does).
        self.on_written = on_written
        self._nodes: dict[str, _Node] = {}
        # The newest ledger this writer wrote per node: a watch cache may not have it yet.
        self._latest: dict[str, tuple[NodeLedger, float]] = {}  # with when it was written
        self._clock = clock

    # --- one write -----------------------------------------------------------------------------

    async def write(self, old: NodeLedger, new: NodeLedger, info: NodeInfo | None) -> Obj | None:
        """Write ``new`` over ``old`` (POST when ``old`` does not exist); raises ``Conflict`` on 409.

        The summary (kubectl columns) rides in the same write; ``info`` is the node's registration.
        """
        summary = ledger_summary(new, info, self.memory_factor)
        body = encode_ledger(new, summary)
        try:
            if old.resource_version is None:
                if not new.allocations:
                    return None
                written = await self.client.create(LEDGERS, body)
            else:
                written = await self.client.replace(LEDGERS, body)
        except Conflict:
            self._count("conflict")
            raise
        except KubeError:
            self._count("error")
            raise
        self._count("written")
        metadata = written.get("metadata") if isinstance(written, dict) else None
        if isinstance(metadata, dict):
            # What the server stored is what we sent, at its new resourceVersion: remembered without
            # decoding the answer again (every entry validated once more per write, for nothing).
            version = metadata.get("resourceVersion")
            if version:
                self._remember(replace(new, resource_version=str(version)))
            if self.on_written is not None:
                self.on_written(written)
        return written

    def _count(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.writes.labels(self.writer, result).inc()

    def _remember(self, ledger: NodeLedger) -> None:
        known = self._own(ledger.node)
        if known is None or _rv_number(ledger) >= _rv_number(known):
            self._latest[ledger.node] = (ledger, self._clock())

    def _own(self, node: str) -> NodeLedger | None:
        """This writer's last write of ``node``'s ledger while it may stand in for the cache."""
        remembered = self._latest.get(node)
        if remembered is None:
            return None
        ledger, at = remembered
        if self._clock() - at > OWN_WRITE_TTL_SECONDS:
            del self._latest[node]
            return None
        return ledger

    def observe(self, event: InformerEvent) -> None:
        """A ledger informer's event (the caller registers this as a handler of the ledger cache it
        decides on). A DELETE at or after this writer's own write of that ledger makes the write
        history: without this, ``newest`` would keep answering with it over the cache's "no
        ledger", so a node re-created under the same name (a replaced machine, an autoscaled
        fleet) would have its GPUs refused for holders long gone. A DELETE older than our write
        (an earlier ledger's, arriving late) changes nothing."""
        metadata = event.object.get("metadata")
        if event.type != "DELETED" or not isinstance(metadata, Mapping):
            return
        own = self._own(str(metadata.get("name")))
        if own is not None and version_number(metadata.get("resourceVersion")) >= _rv_number(own):
            del self._latest[own.node]

    def newest(self, cached: NodeLedger) -> NodeLedger:
        """``cached`` or this writer's own later write of the same ledger, whichever is newer."""
        own = self._own(cached.node)
        return own if own is not None and _rv_number(own) > _rv_number(cached) else cached

    async def refresh(self, node: str) -> None:
        """After a 409: read ``node``'s ledger as stored and hand it to ``on_written`` (the
        controller's cache takes it if newer), so that node is decided again on what won the race,
        not on the cached version that lost it. One GET of one node, as client-go's conflict
        retries re-get the object; a watch that lags never costs a second 409. A failed read is
        left to the watch: the next write's precondition still guards it."""
        try:
            obj = await self.client.get(LEDGERS, node)
        except KubeError:
            return
        if self.on_written is not None:
            self.on_written(obj)

    async def read(self, node: str) -> NodeLedger:
        """The ledger as stored now (an empty, not-yet-created one when there is none)."""
        try:
            obj = await self.client.get(LEDGERS, node)
        except NotFound:
            return NodeLedger(node=node)
        ledger = decode_ledger(obj)
        self._remember(ledger)
        return ledger

    # --- coalesced reservations ----------------------------------------------------------------

    async def reserve(
        self, node: str, decide: Decide, *, cached: NodeLedger, info: NodeInfo | None
    ) -> Reserved | Refused:
        """Decide and write one reservation on ``node``'s ledger, batched with every other request
        waiting for that node. Raises ``WriteFailed`` when the ledger cannot be written."""
        loop = asyncio.get_running_loop()
        request = _Request(decide, loop.create_future())
        state = self._nodes.setdefault(node, _Node())
        state.waiting.append(request)
        if state.task is None or state.task.done():
            state.task = asyncio.create_task(self._drain(node, state, cached, info))
        # Shielded: a caller that times out leaves the batch running for the others.
        return await asyncio.shield(request.answer)

    async def _drain(self, node: str, state: _Node, cached: NodeLedger, info: NodeInfo | None) -> None:
        ledger: NodeLedger | LedgerError = self.newest(cached)
        try:
            while state.waiting:
                batch, state.waiting = state.waiting, []
                if self.metrics is not None:
                    self.metrics.batch.observe(len(batch))
                ledger = await self._settle(node, batch, ledger, info)
        finally:
            if self._nodes.get(node) is state and not state.waiting:
                del self._nodes[node]

    async def _settle(
        self, node: str, batch: list[_Request], ledger: NodeLedger | LedgerError, info: NodeInfo | None
    ) -> NodeLedger | LedgerError:
        """Answer every request of ``batch``: decide on ``ledger``, write once, re-read on conflict."""
        open_ = batch
        for _ in range(MAX_ATTEMPTS):
            if isinstance(ledger, LedgerError):
                self._fail(open_, f"GPULedger {node} does not decode: {ledger}")
                return ledger
            after, accepted = self._decide(ledger, open_)
            if after is ledger:
                return ledger
            try:
                await self.write(ledger, after, info)
            except Conflict:
                ledger = await self._fresh(node)
                open_ = [request for request, _ in accepted]
                continue
            except KubeError as e:
                self._fail([request for request, _ in accepted], f"writing GPULedger {node} failed: {e}")
                return ledger
            for request, outcome in accepted:
                self._answer(request, outcome)
            return self.newest(after)
        self._fail(open_, f"GPULedger {node} changed under {MAX_ATTEMPTS} writes in a row")
        return ledger

    def _decide(
        self, ledger: NodeLedger, batch: list[_Request]
    ) -> tuple[NodeLedger, list[tuple[_Request, Reserved]]]:
        """Each request in order on the ledger the ones before it left; refusals and entries already
        held are answered now, reservations once the write succeeded."""
        after = ledger
        accepted: list[tuple[_Request, Reserved]] = []
        for request in batch:
            if request.answer.done():
                continue
            request.attempts += 1
            outcome = request.decide(after)
            if isinstance(outcome, Reserved) and outcome.ledger is not None:
                after = outcome.ledger
                accepted.append((request, outcome))
            else:
                self._answer(request, outcome)
        return after, accepted

    async def _fresh(self, node: str) -> NodeLedger | LedgerError:
        try:
            return await self.read(node)
        except LedgerError as e:
            return e
        except KubeError as e:
            return LedgerError(f"cannot be read: {e}")

    def _answer(self, request: _Request, outcome: Reserved | Refused) -> None:
        if self.metrics is not None:
            self.metrics.attempts.observe(max(1, request.attempts))
        if not request.answer.done():
            request.answer.set_result(outcome)

    def _fail(self, requests: list[_Request], why: str) -> None:
        log.warning(
            "ledger reservations failed", extra={"fields": {"reason": why, "requests": len(requests)}}
        )
        for request in requests:
            if not request.answer.done():
                request.answer.set_exception(WriteFailed(why))
