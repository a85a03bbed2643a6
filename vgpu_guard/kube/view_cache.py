"""``ClusterCache``: the watch-fed caches behind every ``ClusterView`` the webhook and controller use.

One informer each for Nodes, Queues, PodGroups, HyperNodes, GPULedgers and GangPlacements.
``snapshot(config)`` is called on every admission request, so it must cost the same at 5,000 nodes
as at 100 (issue 44): each part of the view is a table kept up to date by the informer's events,
one object at a time, and a view holds the tables as they are (no loop over the fleet, no copy).
A Node is parsed once per resourceVersion, in its event, never on the request path; a new
version that parses to the same ``NodeInfo`` (a kubelet's heartbeat) changes nothing; the fleet
facts reviews ask for (``FleetTally``) are counted as nodes come and go. The view is ``synced``
only when all informers have completed a LIST; before that the core refuses to decide (seed 001).

Consumers that react to change (the queue audit) wait on ``wait_for_change(version)``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Mapping
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from vgpu_guard.engine.cluster import ClusterView, FleetFacts, FleetTally, NodeInfo, node_info
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.ledger import cached_ledger
from vgpu_guard.engine.objects import Obj
from vgpu_guard.kube.backoff import Backoff
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.informer import Informer, InformerEvent, Key, key_of
from vgpu_guard.kube.resources import GANG_PLACEMENTS, HYPERNODES, LEDGERS, NODES, PODGROUPS, QUEUES

__all__ = ["ClusterCache", "SharedTable"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SharedTable(Generic[K, V]):
    """A dict changed one entry at a time, handed to views without copying: copy on write.

    ``frozen()`` gives the current contents as a read-only mapping and marks them shared; the next
    change copies the dict first (one C-level copy, in the informer's event, not per request), so
    every mapping handed out stays as it was. A table nobody read since its last change is changed
    in place. ``frozen()`` returns the same object until a change: parts that did not change are
    the same mapping in consecutive views (World skips comparing nodes on that identity).
    """

    def __init__(self) -> None:
        self._data: dict[K, V] = {}
        self._frozen: Mapping[K, V] | None = None

    def frozen(self) -> Mapping[K, V]:
        if self._frozen is None:
            self._frozen = MappingProxyType(self._data)
        return self._frozen

    def get(self, key: K) -> V | None:
        return self._data.get(key)

    def __len__(self) -> int:
        return len(self._data)

    def _writable(self) -> dict[K, V]:
        if self._frozen is not None:
            self._data, self._frozen = dict(self._data), None
        return self._data

    def put(self, key: K, value: V) -> None:
        self._writable()[key] = value

    def pop(self, key: K) -> V | None:
        if key not in self._data:
            return None
        return self._writable().pop(key)

    def clear(self) -> None:
        self._data, self._frozen = {}, None


def _name(key: Key) -> str:
    return key[1]


def _table(informer: Informer, key: Callable[[Key], Any]) -> SharedTable[Any, Obj]:
    """A table of ``informer``'s objects under ``key(informer key)``, kept by its events."""
    table: SharedTable[Any, Obj] = SharedTable()

    def changed(event: InformerEvent) -> None:
        k = key(key_of(event.object))
        if event.type == "DELETED":
            table.pop(k)
        else:
            table.put(k, event.object)

    informer.add_handler(changed)
    return table


class _Nodes:
    """Parsed nodes by name, with the fleet facts, kept by the Node informer's events.

    Parsing needs the config (it says how registrations read), which the cache learns from the
    first ``snapshot``: events before it are not parsed, and a new config parses every node again
    (``reparse``). After that, each event parses its node once.
    """

    def __init__(self, informer: Informer) -> None:
        self._informer = informer
        self.table: SharedTable[str, NodeInfo] = SharedTable()
        self._tally = FleetTally()
        self._facts: FleetFacts | None = None
        self.config: GuardConfig | None = None
        informer.add_handler(self._changed)

    def reparse(self, config: GuardConfig) -> None:
        self.config = config
        self.table.clear()
        self._tally = FleetTally()
        self._facts = None
        for (_, name), obj in self._informer.items.items():
            self._set(name, node_info(obj, config))

    def facts(self) -> FleetFacts:
        nodes = self.table.frozen()
        if self._facts is None or self._facts.nodes is not nodes:
            self._facts = self._tally.facts(nodes)
        return self._facts

    def _changed(self, event: InformerEvent) -> None:
        if self.config is None:
            return
        name = key_of(event.object)[1]
        if event.type == "DELETED":
            old = self.table.pop(name)
            if old is not None:
                self._tally.remove(old)
            return
        info = node_info(event.object, self.config)
        old = self.table.get(name)
        if old is not None and old == info:
            return  # a heartbeat: the same facts (and the same object) for every decision
        if old is not None:
            self._tally.remove(old)
        self._set(name, info)

    def _set(self, name: str, info: NodeInfo) -> None:
        self.table.put(name, info)
        self._tally.add(info)


class ClusterCache:
    """Nodes, Queues, PodGroups from real watches; ``snapshot()`` gives the immutable view."""

    def __init__(
        self,
        client: ClusterClient,
        *,
        backoff: Callable[[], Backoff] = Backoff,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        watch_timeout_seconds: int = 300,
    ) -> None:
        def informer(resource: Any, transform: Callable[[Obj], Obj] | None = None) -> Informer:
            return Informer(
                client,
                resource,
                backoff=backoff(),
                sleep=sleep,
                watch_timeout_seconds=watch_timeout_seconds,
                transform=transform,
            )

        self.nodes = informer(NODES)
        self.queues = informer(QUEUES)
        self.podgroups = informer(PODGROUPS)
        self.hypernodes = informer(HYPERNODES)
        # Decoded once per resourceVersion as they arrive; the raw entries are not kept.
        self.ledgers = informer(LEDGERS, cached_ledger)
        self.gang_placements = informer(GANG_PLACEMENTS)
        self._informers = (
            self.nodes,
            self.queues,
            self.podgroups,
            self.hypernodes,
            self.ledgers,
            self.gang_placements,
        )
        self._tick = asyncio.Event()
        for inf in self._informers:
            inf.add_handler(self._changed)
        # The view's parts, kept by the informers' events (registered after ``_changed``, so a
        # waiter woken by a change finds them already changed: the loop runs it later).
        self._nodes = _Nodes(self.nodes)
        self._queues = _table(self.queues, _name)
        self._podgroups = _table(self.podgroups, lambda key: key)
        self._hypernodes = _table(self.hypernodes, _name)
        self._ledgers = _table(self.ledgers, _name)
        self._gang_placements = _table(self.gang_placements, lambda key: key)
        # Events applied to the tables: an informer's version moves before a relist's events are
        # delivered, so a view built between two of them must not be kept under that version.
        self._applied = 0
        for inf in self._informers:
            inf.add_handler(self._count_applied)
        self._view: ClusterView | None = None
        self._view_key: tuple[object, ...] = ()
        self.builds = 0  # how many views were built (tests check the cache is reused)

    # -- state ------------------------------------------------------------------------------------

    @property
    def informers(self) -> tuple[Informer, ...]:
        """The six informers, for callers that follow them (``simulate`` waits until they have
        delivered every change of the in-memory API server before a decision reads the view)."""
        return self._informers

    @property
    def synced(self) -> bool:
        """All caches listed once: gate readiness and decisions on this."""
        return all(inf.synced for inf in self._informers)

    @property
    def version(self) -> tuple[int, ...]:
        """Changes whenever any cache changed or finished its first LIST."""
        return tuple(inf.version for inf in self._informers)

    async def wait_synced(self) -> None:
        for inf in self._informers:
            await inf.wait_synced()

    async def wait_for_change(self, version: tuple[int, ...]) -> tuple[int, ...]:
        """Return the new version once it differs from ``version``."""
        while self.version == version:
            await self._tick.wait()
        return self.version

    def _count_applied(self, _event: InformerEvent) -> None:
        self._applied += 1

    def _changed(self, _event: InformerEvent) -> None:
        tick, self._tick = self._tick, asyncio.Event()
        tick.set()

    # -- running ----------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run the informers until cancelled (each retries on its own; none ends the others)."""
        tasks = [
            asyncio.create_task(inf.run(), name=f"informer-{inf.resource.plural}") for inf in self._informers
        ]
        # First sync is also a change for waiters (an empty cluster delivers no events).
        waiter = asyncio.create_task(self._announce_sync())
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in [*tasks, waiter]:
                task.cancel()
            await asyncio.gather(*tasks, waiter, return_exceptions=True)

    async def _announce_sync(self) -> None:
        for inf in self._informers:
            await inf.wait_synced()
            tick, self._tick = self._tick, asyncio.Event()
            tick.set()

    # -- the view ---------------------------------------------------------------------------------

    def snapshot(self, config: GuardConfig) -> ClusterView:
        """The current view; the same object until something changes (cheap per request).

        Building it costs the same at any fleet size: each part is its table as it stands (an
        unchanged part is the same mapping object as in the previous view), and the fleet facts
        were counted as the nodes changed. Only a new config object parses every node again.
        """
        key = (self.version, self.synced, self._applied)
        if self._view is not None and key == self._view_key and config is self._nodes.config:
            return self._view
        if config is not self._nodes.config:
            self._nodes.reparse(config)  # a new config can parse registrations differently
        self._view = ClusterView(
            nodes=self._nodes.table.frozen(),
            queues=self._queues.frozen(),
            podgroups=self._podgroups.frozen(),
            hypernodes=self._hypernodes.frozen(),
            ledgers=self._ledgers.frozen(),
            gang_placements=self._gang_placements.frozen(),
            synced=self.synced,
            source="cluster",
            fleet=self._nodes.facts(),
        )
        self._view_key = key
        self.builds += 1
        return self._view

    def ledger(self, node: str) -> Obj | None:
        """The cached GPULedger of ``node`` (decoded once per resourceVersion), or None: the newest
        the watch brought, without building a view."""
        return self._ledgers.get(node)
