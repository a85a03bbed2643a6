"""``ClusterCache``: the watch-fed caches behind every ``ClusterView`` the webhook and controller use.

One informer each for Nodes, Queues, PodGroups, HyperNodes, GPULedgers and GangPlacements.
``snapshot(config)`` is called on every admission request, so it must be cheap: the built view is
kept until an informer changes (or the config object does), and on a change only the nodes that
changed are parsed again. The view is ``synced`` only when all informers have completed a LIST;
before that the core refuses to decide (seed 001).

Consumers that react to change (the queue audit) wait on ``wait_for_change(version)``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

from vgpu_guard.engine.cluster import ClusterView, NodeInfo, node_info
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.ledger import cached_ledger
from vgpu_guard.engine.objects import Obj
from vgpu_guard.kube.backoff import Backoff
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.informer import Informer, InformerEvent
from vgpu_guard.kube.resources import GANG_PLACEMENTS, HYPERNODES, LEDGERS, NODES, PODGROUPS, QUEUES

__all__ = ["ClusterCache", "CopiedWhenRead"]


class CopiedWhenRead(Mapping[str, Any]):
    """A mapping built by ``build`` the first time it is read, then kept (a view's part that most
    readers never look at). It holds the state of its first read, not of its creation."""

    def __init__(self, build: Callable[[], Mapping[str, Any]]) -> None:
        self._build: Callable[[], Mapping[str, Any]] | None = build
        self._data: Mapping[str, Any] = {}

    def _get(self) -> Mapping[str, Any]:
        if self._build is not None:
            self._data, self._build = self._build(), None
        return self._data

    def __getitem__(self, key: str) -> Any:
        return self._get()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


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
        # Parsed nodes by name, with the object they were parsed from (identity: objects from the
        # informer are never mutated, so the same object means the same parse).
        self._node_infos: dict[str, tuple[Mapping[str, Any], NodeInfo]] = {}
        self._view: ClusterView | None = None
        # Each part of the view with the version of the cache it was built from.
        self._parts: dict[str, tuple[int, Mapping[Any, Any]]] = {}
        self._view_key: tuple[object, ...] = ()
        # Held (not just its id) so a reloaded config can never be mistaken for the old one.
        self._config: GuardConfig | None = None
        self.builds = 0  # how many views were built (tests check the cache is reused)

    # -- state ------------------------------------------------------------------------------------

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

        Each part is rebuilt only when its own cache changed, and an unchanged part is the same
        mapping object as in the previous view (the controller skips comparing its nodes then):
        our own ledger writes, one per pass, must not cost a pass a copy of every node. The
        ledgers part, which changes with every write and which the controller's passes never
        read (they use the cache and their own writes), is copied when first read.
        """
        key = (self.version, self.synced)
        if self._view is not None and key == self._view_key and config is self._config:
            return self._view
        if config is not self._config:
            self._parts.clear()
        by_name = self._by_name
        self._view = ClusterView(
            nodes=self._part(self.nodes, lambda: MappingProxyType(self._nodes(config))),
            queues=self._part(self.queues, lambda: by_name(self.queues)),
            podgroups=self._part(self.podgroups, lambda: MappingProxyType(dict(self.podgroups.items))),
            hypernodes=self._part(self.hypernodes, lambda: by_name(self.hypernodes)),
            ledgers=self._part(self.ledgers, lambda: CopiedWhenRead(lambda: by_name(self.ledgers))),
            gang_placements=self._part(
                self.gang_placements, lambda: MappingProxyType(dict(self.gang_placements.items))
            ),
            synced=self.synced,
            source="cluster",
        )
        self._view_key = key
        self._config = config
        self.builds += 1
        return self._view

    def _part(self, informer: Informer, build: Callable[[], Mapping[Any, Any]]) -> Mapping[Any, Any]:
        known = self._parts.get(informer.resource.plural)
        if known is not None and known[0] == informer.version:
            return known[1]
        part = build()
        self._parts[informer.resource.plural] = (informer.version, part)
        return part

    @staticmethod
    def _by_name(informer: Informer) -> Mapping[str, Any]:
        return MappingProxyType({name: obj for (_, name), obj in informer.items.items()})

    def _nodes(self, config: GuardConfig) -> dict[str, NodeInfo]:
        if config is not self._config:
            self._node_infos.clear()  # a new config can parse registrations differently
        infos: dict[str, tuple[Mapping[str, Any], NodeInfo]] = {}
        for (_, name), obj in self.nodes.items.items():
            cached = self._node_infos.get(name)
            infos[name] = cached if cached is not None and cached[0] is obj else (obj, node_info(obj, config))
        self._node_infos = infos
        return {name: info for name, (_, info) in infos.items()}
