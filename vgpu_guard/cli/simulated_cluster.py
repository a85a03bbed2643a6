"""vgpu-guard's serving parts over the in-memory API server, wired as ``serve all`` wires them.

``simulate`` runs the production objects, not copies: the ``ClusterCache`` every admission's view
comes from (kube/view_cache.py: nodes parsed once per version, views that change by the change),
the controller's ``CachedInputs`` and its pod informer, the webhook's ``Arbiter`` with its cache
of unbound pods read from that same informer (one pod watch, as ``serve all`` has), all fed by
watches of the in-memory API server. What ``simulate`` needs beyond ``serve`` is injected:

- **Caught up before each decision.** In a cluster a watch lags the API server by milliseconds
  and the code copes (overlays, GETs on a cache miss, CAS); a simulation must tell the same story
  on every run, so before an admission, a controller pass (``CachedInputs.before_read``) or a
  Volcano session (``caught_up``), it waits until every informer holds the newest change of its
  resource. Nothing is copied or listed for it: it compares resourceVersions.
- **No wall clock.** The watches never end on a timer and send no bookmarks (a simulated second
  is no real second), and the arbiter's write bound (``arbiter.writeTimeoutSeconds``) is on the
  simulated clock, which does not move while a session's Bindings are in flight: no write of a
  simulation times out because the machine was slow.

Every write that carries a GPU assignment meets the arbiter through the double's admission seam
(cli/inprocess_arbiter.py), as it meets the webhook's entry in a cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable

from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.apidouble.frontend import Frontend
from vgpu_guard.apidouble.identity import ADMIN, UserInfo
from vgpu_guard.apidouble.store import Store
from vgpu_guard.cli.inprocess_arbiter import InProcessArbiter
from vgpu_guard.controller.inputs import CachedInputs
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.kube.errors import KubeError
from vgpu_guard.kube.informer import Informer
from vgpu_guard.kube.ledger_writer import LedgerWriter
from vgpu_guard.kube.view_cache import ClusterCache
from vgpu_guard.webhook.arbiter import Arbiter
from vgpu_guard.webhook.pending_pods import PendingPods

__all__ = ["SimulatedCluster"]

# Turns of the event loop a catch-up may take before it is a bug (a watch delivers in one or two).
_MAX_TURNS = 10_000


def _unbounded(_seconds: float) -> contextlib.nullcontext[None]:
    """The arbiter's write bound on the simulated clock: no simulated time passes during a write."""
    return contextlib.nullcontext()


class SimulatedCluster:
    """The caches, the controller's inputs and the arbiter on ``store``; ``start`` before use."""

    def __init__(self, store: Store, config: GuardConfig, clock: Callable[[], float]) -> None:
        self.store, self.config = store, config
        # The watches' client: no bookmarks and (watch_timeout_seconds=0) no end on a timer.
        watching = MemoryClusterClient(store, bookmark_interval=math.inf)
        self.cache = ClusterCache(watching, watch_timeout_seconds=0)
        self.inputs = CachedInputs(
            watching, cluster=self.cache, clock=clock, watch_timeout_seconds=0, before_read=self.caught_up
        )
        admin = MemoryClusterClient(store)
        writer = LedgerWriter(admin, memory_factor=config.nvidia.gpu_memory_factor, writer="arbiter")
        self.cache.ledgers.add_handler(writer.observe)  # as serve wires it (running_webhook)
        self.arbiter = Arbiter(
            views=self.cache.snapshot,
            client=admin,
            writer=writer,
            clock=clock,
            pods=PendingPods(self.inputs.pods),
            timeout=_unbounded,
        )
        self.frontend = Frontend(store, admission=InProcessArbiter(self.arbiter, config))
        self._tasks: list[asyncio.Task[None]] = []

    def client(self, user: UserInfo = ADMIN) -> MemoryClusterClient:
        """A client of the simulated API server whose assignment writes meet the arbiter."""
        return MemoryClusterClient(self.store, frontend=self.frontend, user=user)

    async def start(self) -> None:
        """Start the informers and wait for their first LIST."""
        self._tasks = [
            asyncio.create_task(self.cache.run(), name="simulate-cluster-cache"),
            asyncio.create_task(self.inputs.run(), name="simulate-controller-informers"),
        ]
        await self.inputs.wait_synced()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def caught_up(self) -> None:
        """Return once every informer holds the newest change of its resource in the store."""
        for _ in range(_MAX_TURNS):
            if all(self._current(informer) for informer in self.inputs.informers):
                return
            await asyncio.sleep(0)
        late = [i.resource.plural for i in self.inputs.informers if not self._current(i)]
        raise RuntimeError(f"the simulated cluster's watches of {', '.join(late)} stopped delivering")

    def _current(self, informer: Informer) -> bool:
        """Holds the newest change of its resource, or follows nothing (not started, not served)."""
        if not informer.synced:
            return True  # a side cache no pass has asked for yet; a pass waits for its LIST itself
        try:
            newest = self.store.last_resource_version(self.store.type_of(informer.resource))
        except KubeError:
            return True  # the resource is not served: the informer holds it as empty
        return int(informer.resource_version or 0) >= newest

    async def view(self) -> ClusterView:
        """The webhook's view once its caches have caught up with the store."""
        await self.caught_up()
        return self.cache.snapshot(self.config)
