"""``run_controller``: leader election + informers that feed and trigger allocation passes.

Informers (client-go's reflector: list once, then watch; relist only on 410) keep pods, nodes,
ledgers, Queues and PodGroups in memory (``CachedInputs``); every change wakes the loop and a pass
decides from the cache, with no LIST on its path. Decoded ledgers, pod facts and the nodes'
parsed registrations are reused until their resourceVersion changes, and an unplaceable pod is
diagnosed again only when something that could make it fit changed (``scheduling_queue.py``). The
ledger stays the single source of truth: every bind follows a compare-and-swap ledger write decided
on the cached resourceVersion, and a lost race (409) re-decides from the next cache state. Only
the Lease holder runs passes; a second replica that believes it leads is harmless (the CAS).

Throughput comes from pipelining across nodes: all pods decided for a node share one ledger write,
the plugin's handshake allows one binding in flight per node, and a pass binds on every node that
is free at once (bounded concurrency, under the process's client QPS/burst, see kube/ratelimit.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from prometheus_client import REGISTRY, CollectorRegistry

from vgpu_guard.controller.allocation import WRITE_CONCURRENCY, AllocationController, Clock
from vgpu_guard.controller.gang_gc import release_stale_placements
from vgpu_guard.controller.gc_tuning import StartPause
from vgpu_guard.controller.inputs import CachedInputs
from vgpu_guard.controller.leader import LeaderElector
from vgpu_guard.controller.metrics import AllocationMetrics
from vgpu_guard.controller.reports import SNAPSHOT_SECONDS
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.kube.backoff import Backoff
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.informer import Informer
from vgpu_guard.kube.view_cache import ClusterCache

__all__ = ["run_controller"]

MAX_BACKOFF_SECONDS = 30.0

log = logging.getLogger("vgpu_guard.controller")


async def run_controller(
    client: ClusterClient,
    config: GuardConfig,
    *,
    identity: str,
    clock: Clock = time.time,
    registry: CollectorRegistry = REGISTRY,
    lease_name: str = "vgpu-guard-controller",
    lease_namespace: str = "vgpu-guard",
    resync_seconds: float = 30.0,
    retry_seconds: float = 2.0,
    max_passes: int = 50,
    elector: LeaderElector | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    cluster: ClusterCache | None = None,
    pods: Informer | None = None,
    write_concurrency: int = WRITE_CONCURRENCY,
    monotonic: Callable[[], float] = time.monotonic,
) -> None:
    """Run until cancelled: lead, watch, settle; release the Lease on the way out.

    Pass ``elector`` to share leadership with other leader-only loops of the process (queue audit,
    caBundle injection); by default a private one on ``lease_namespace/lease_name`` is used. Pass
    ``cluster`` to share the process's node/ledger/queue caches (``serve``), and ``pods`` its pod
    informer (``serve all``: the webhook reads it too, controller/inputs.py ``pod_informer``);
    otherwise the controller runs its own.
    """
    metrics = AllocationMetrics(registry)
    inputs = CachedInputs(client, cluster=cluster, pods=pods)  # informers keep their own (real) backoff
    controller = _informed_controller(
        client,
        config,
        inputs,
        metrics,
        identity=identity,
        clock=clock,
        retry_seconds=retry_seconds,
        write_concurrency=write_concurrency,
    )
    if elector is None:
        elector = LeaderElector(
            client, name=lease_name, namespace=lease_namespace, identity=identity, clock=clock
        )
    loop = _Rounds(
        controller,
        inputs,
        elector,
        metrics,
        resync_seconds=resync_seconds,
        retry_seconds=retry_seconds,
        max_passes=max_passes,
        sleep=sleep,
        monotonic=monotonic,
    )
    await loop.run()


def _informed_controller(
    client: ClusterClient,
    config: GuardConfig,
    inputs: CachedInputs,
    metrics: AllocationMetrics,
    *,
    identity: str,
    clock: Clock,
    retry_seconds: float,
    write_concurrency: int,
) -> AllocationController:
    """The controller as the run loop drives it: fed by informers, Events and bindings in the
    background, node retries and the GPU snapshot paced by ``retry_seconds``, and the Binder told of
    every pod event (a handshake's end frees its node at once), its ledger writer of every ledger
    DELETE (its own copy of a deleted ledger goes)."""
    controller = AllocationController(
        client,
        config,
        identity=identity,
        clock=clock,
        metrics=metrics,
        inputs=inputs,
        write_concurrency=write_concurrency,
        # A node whose ledger write failed waits as a failing pass would (_Rounds.backoff).
        node_retry_seconds=retry_seconds,
        node_retry_cap_seconds=min(MAX_BACKOFF_SECONDS, 8 * retry_seconds),
        background_events=True,
        # A pod's handshake ending frees its node for the next binding at once, not at the next pass.
        wake=inputs.changed.set,
    )
    controller.reports.nodes.snapshot_seconds = min(SNAPSHOT_SECONDS, retry_seconds)
    inputs.listen(
        inputs.pods, lambda event: controller.binder.observe(event.object, deleted=event.type == "DELETED")
    )
    # A deleted ledger (its node gone, controller/ledger_gc.py) leaves nothing in the writer either.
    inputs.listen(inputs.cluster.ledgers, controller.writer.observe)
    return controller


class _Rounds:
    """The replica's rounds: hold or wait for the Lease; as the leader, pass when something
    changed or the resync is due, then wait for the next change (renewing the Lease either way)."""

    def __init__(
        self,
        controller: AllocationController,
        inputs: CachedInputs,
        elector: LeaderElector,
        metrics: AllocationMetrics,
        *,
        resync_seconds: float,
        retry_seconds: float,
        max_passes: int,
        sleep: Callable[[float], Awaitable[None]],
        monotonic: Callable[[], float],
    ) -> None:
        self.controller, self.inputs, self.elector, self.metrics = controller, inputs, elector, metrics
        self.resync_seconds, self.retry_seconds, self.max_passes = resync_seconds, retry_seconds, max_passes
        self.sleep, self.monotonic = sleep, monotonic
        self.wake = inputs.changed
        self.start_pause = StartPause(monotonic=monotonic)
        self.last_pass = float("-inf")
        # Transient API errors must not cost minutes: the wait doubles from one retry period up to 8
        # (16 s at the default 2 s), never beyond MAX_BACKOFF_SECONDS; keyed by what fails (the
        # Lease, the pass), reset by its success: the process's one retry policy (kube/backoff.py).
        self.backoff = Backoff(
            initial=retry_seconds, maximum=min(MAX_BACKOFF_SECONDS, 8 * retry_seconds), jitter=0.0
        )
        # Renew once per retry period (at most half a Lease apart), as client-go does, not once per
        # pass: a busy leader wakes for every pod, and two Lease requests per pass were most of its
        # requests at 50 pods/s. Timed on a monotonic clock from the start of the round that held
        # the Lease, so a wall-clock step can never stretch a leadership the server did not record.
        self.renew_every = min(retry_seconds, elector.lease_duration / 2)
        self.renewed: float | None = None
        self.was_leading = False

    async def run(self) -> None:
        self.start_pause.begin()
        watchers = [asyncio.create_task(self.inputs.run(), name="controller-informers")]
        try:
            while True:
                self.start_pause.end_if_overdue()
                if not await self._leading():
                    await self._stand_by()
                    continue
                self.controller.reports.nodes.refresh_snapshot()
                if not self.inputs.synced:
                    await self._wait_synced()
                    continue
                if self._due() and not await self._pass():
                    continue
                await self._wait_for_change()
        finally:
            await self._shut_down(watchers)

    async def _leading(self) -> bool:
        """Whether this replica leads this round: a Lease renewed less than ``renew_every`` ago
        stands; otherwise one acquire-or-renew request."""
        started = self.monotonic()
        renewed = self.renewed
        if self.elector.leading and renewed is not None and 0 <= started - renewed < self.renew_every:
            leading = True
        else:
            leading = await self.elector.try_acquire_or_renew()
            self.renewed = started if leading else None
        self.metrics.leader.set(1 if leading else 0)
        if leading != self.was_leading:
            self._log_transition(leading)
            self.was_leading = leading
        return leading

    def _log_transition(self, leading: bool) -> None:
        """One line per change of leadership (an operator asks "who leads, since when")."""
        lease = f"{self.elector.namespace}/{self.elector.name}"
        if leading:
            log.info("leading: holds Lease %s", lease)
        elif self.elector.error is None:
            holder = self.elector.holder or "another replica"
            log.info("standing by: Lease %s is held by %s", lease, holder)

    async def _stand_by(self) -> None:
        """A standby acts on nothing the watches report: one Lease attempt per retry period, and
        while the Lease itself fails, exponentially fewer (see ``backoff``)."""
        if self.inputs.synced:
            self.start_pause.end()  # its start is over: no pass comes before it leads
        # The leader exports the GPUs and what is pending, not us: a former leader's last numbers
        # would win a dashboard's max() over replicas.
        self.controller.reports.nodes.clear_snapshot()
        self.metrics.clear_leader_gauges()
        self.wake.clear()
        self.last_pass = float("-inf")  # whoever led may have left work: pass at once on winning
        if self.elector.error is None:
            self.backoff.reset("lease")  # another replica leads: nothing failed
            await self.sleep(self.retry_seconds)
        else:
            await self.sleep(self.backoff.next("lease"))

    async def _wait_synced(self) -> None:
        """Decide nothing from a half-filled cache (the queue-guarantees crash came from one)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.retry_seconds):
                await self.inputs.wait_synced()

    def _due(self) -> bool:
        return (
            self.wake.is_set()
            or self.monotonic() - self.last_pass >= self.resync_seconds
            or self.controller.retry_due()  # a node held for a failed ledger write may take pods again
        )

    async def _pass(self) -> bool:
        """Settle the cluster; False when the next round must start at once (not settled within
        ``max_passes``, or failing, after a backoff)."""
        self.wake.clear()
        self.last_pass = self.monotonic()
        try:
            results = await self.controller.settle(max_passes=self.max_passes)
        finally:
            self.start_pause.end()  # the first pass built what the caches hold into the World
        if results and results[-1].errors:
            # Failing (API errors, our CRD not installed): retry with backoff, not in a tight
            # loop that floods the log and the API server (the pass logs it once).
            self.wake.set()
            await self.sleep(self.backoff.next("pass"))
            return False
        self.backoff.reset("pass")
        if results and results[-1].changed:
            self.wake.set()  # not settled within max_passes: go on after renewing the Lease
            return False
        controller, inputs = self.controller, self.inputs
        await release_stale_placements(
            controller.client, inputs.cluster.snapshot(controller.config), inputs.pods.items.values()
        )
        return True

    async def _wait_for_change(self) -> None:
        """Wake on a change or when a held node's retry is due; renew the Lease every retry
        period either way."""
        due = self.controller.next_retry_in()
        wait = self.retry_seconds if due is None else min(self.retry_seconds, due)
        with contextlib.suppress(TimeoutError):
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
            # arrives as a watch wakes the loop, and shutdown then hangs.
            async with asyncio.timeout(wait):
                await self.wake.wait()

    async def _shut_down(self, watchers: list[asyncio.Task[None]]) -> None:
        self.start_pause.end()
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        controller = self.controller
        await controller.binder.drain()
        await controller.flush_events()
        await self.elector.release()
        self.metrics.leader.set(0)
        controller.reports.nodes.clear_snapshot()
