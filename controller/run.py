"""``run_controller``: leader election + watches that trigger allocation passes.

Watches (pods, nodes, ledgers, podgroups, queues) only wake the loop; every pass re-reads what it
decides on (``AllocationController``), so a missed or reordered event costs latency, never
correctness, and the periodic resync covers anything a watch dropped. Only the Lease holder runs
passes; a second replica that believes it leads is harmless (the ledger's CAS).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from prometheus_client import REGISTRY, CollectorRegistry

from vgpu_guard.controller.allocation import AllocationController, Clock
from vgpu_guard.controller.gang_gc import release_finished_gangs
from vgpu_guard.controller.leader import LeaderElector
from vgpu_guard.controller.metrics import AllocationMetrics, LedgerSnapshot
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.errors import Expired, KubeError, NotFound, Unsupported
from vgpu_guard.kube.resources import GANG_PLACEMENTS, LEDGERS, NODES, PODGROUPS, PODS, QUEUES, Resource

__all__ = ["run_controller"]

MAX_BACKOFF_SECONDS = 30.0

log = logging.getLogger("vgpu_guard.controller")


async def _watch(client: ClusterClient, resource: Resource, wake: asyncio.Event) -> None:
    """Set ``wake`` on every change of ``resource``; relist on 410, back off on errors."""
    delay = 0.5
    while True:
        try:
            listed = await client.list(resource, limit=1)
            wake.set()
            async for _ in client.watch(
                resource, resource_version=listed.resource_version, timeout_seconds=300
            ):
                wake.set()
            delay = 0.5
        except (NotFound, Unsupported):
            return  # Volcano's CRDs are absent: nothing to watch
        except Expired:
            continue
        except KubeError as e:
            log.warning("watch of %s failed, retrying in %.1fs: %s", resource.plural, delay, e)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)


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
) -> None:
    """Run until cancelled: lead, watch, settle; release the Lease on the way out.

    Pass ``elector`` to share leadership with other leader-only loops of the process (queue audit,
    caBundle injection); by default a private one on ``lease_namespace/lease_name`` is used.
    """
    metrics = AllocationMetrics(registry)
    controller = AllocationController(client, config, identity=identity, clock=clock, metrics=metrics)
    if elector is None:
        elector = LeaderElector(
            client, name=lease_name, namespace=lease_namespace, identity=identity, clock=clock
        )
    wake = asyncio.Event()
    watchers = [
        asyncio.create_task(_watch(client, r, wake))
        for r in (PODS, NODES, LEDGERS, PODGROUPS, QUEUES, GANG_PLACEMENTS)
    ]
    last_pass = float("-inf")
    backoff = retry_seconds
    # Transient API errors must not cost minutes: the wait doubles up to 8 retry periods (16 s at
    # the default 2 s), and never beyond MAX_BACKOFF_SECONDS.
    backoff_cap = min(MAX_BACKOFF_SECONDS, 8 * retry_seconds)
    try:
        while True:
            leading = await elector.try_acquire_or_renew()
            metrics.leader.set(1 if leading else 0)
            if not leading:
                # A standby acts on nothing the watches report: one Lease attempt per retry
                # period, and while the Lease itself fails, exponentially fewer (see backoff_cap).
                metrics.ledgers.snapshot = LedgerSnapshot()  # the leader exports the GPUs, not us
                wake.clear()
                last_pass = float("-inf")  # whoever led may have left work: pass at once on winning
                backoff = min(backoff * 2, backoff_cap) if elector.error else retry_seconds
                await sleep(backoff)
                continue
            due = wake.is_set() or time.monotonic() - last_pass >= resync_seconds
            if due:
                wake.clear()
                last_pass = time.monotonic()
                results = await controller.settle(max_passes=max_passes)
                if results and results[-1].errors:
                    # Failing (API errors, our CRD not installed): retry with backoff, not in a
                    # tight loop that floods the log and the API server (the pass logs it once).
                    wake.set()
                    backoff = min(backoff * 2, backoff_cap)
                    await sleep(backoff)
                    continue
                backoff = retry_seconds
                if results and results[-1].changed:
                    wake.set()  # not settled within max_passes: go on after renewing the Lease
                    continue
                await release_finished_gangs(client, config)
            # Wake on a change; renew the Lease every retry period either way.
            with contextlib.suppress(TimeoutError):
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
                # arrives as a watch wakes the loop, and shutdown then hangs.
                async with asyncio.timeout(retry_seconds):
                    await wake.wait()
    finally:
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        await elector.release()
        metrics.leader.set(0)
        metrics.ledgers.snapshot = LedgerSnapshot()
