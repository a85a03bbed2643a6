"""A list+watch cache of one resource over ``ClusterClient``: client-go's reflector, in asyncio.

Why our own: the webhook must answer from memory (no API call on the admission path, convention
18) and must know whether its memory is complete (seed 001: a scheduler that computed capacity from
a half-filled node cache). So the cache says ``synced`` only after a full LIST, and keeps itself
right afterwards:

- LIST (paginated) gives the items and the collection's resourceVersion; the store is replaced
  at once and the difference is delivered to handlers as ADDED / MODIFIED / DELETED;
- WATCH from that resourceVersion (bookmarks only move the resourceVersion forward);
- ``Expired`` (410: the version left the server's window) -> relist;
- a stream the server ends (timeout, restart, broken connection) -> re-watch from the last
  resourceVersion seen, after a bounded, jittered backoff when the stream brought nothing;
- any other error -> log, back off, retry. ``run()`` never raises anything but cancellation.

Handlers run synchronously in the informer's task, in event order; a handler that raises is logged
and skipped, never allowed to stop the cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any, Literal, NamedTuple

from vgpu_guard.engine.objects import Obj
from vgpu_guard.kube.backoff import Backoff
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.errors import Expired, NotFound, Unsupported
from vgpu_guard.kube.resources import Resource

__all__ = ["EVENT_SLICE_SECONDS", "Informer", "InformerEvent", "Key", "key_of"]

log = logging.getLogger("vgpu_guard.kube.informer")

# An admission review waits at most about this long (and one event) behind a burst of watch
# events: a review's whole decision takes 1-3 ms, so a slice of 1 ms keeps bursts off its tail,
# and a yield costs one turn of the loop (~20 us, 1 % of a core at 500 events a second).
EVENT_SLICE_SECONDS = 0.001

# (namespace, name); namespace is "" for cluster-scoped objects.
Key = tuple[str, str]


def key_of(obj: Mapping[str, Any]) -> Key:
    metadata = obj.get("metadata")
    if metadata.__class__ is not dict and not isinstance(metadata, Mapping):
        return ("", "")
    namespace = metadata.get("namespace") or ""
    name = metadata.get("name") or ""
    # Exact type tests first: a decoded object's strings are str, and an ABC check or a str() per
    # object is a measurable part of listing 100,000 pods.
    return (
        namespace if namespace.__class__ is str else str(namespace),
        name if name.__class__ is str else str(name),
    )


def _rv(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata")
    return str(metadata.get("resourceVersion") or "") if isinstance(metadata, Mapping) else ""


class InformerEvent(NamedTuple):
    """A change the cache applied; ``old`` is the previous object on MODIFIED and DELETED.

    A named tuple, not a frozen dataclass: a LIST of 100,000 pods makes 100,000 of them, and a
    frozen dataclass's init costs twice as much."""

    type: Literal["ADDED", "MODIFIED", "DELETED"]
    object: Obj
    old: Obj | None = None


Handler = Callable[[InformerEvent], None]


class Informer:
    """The cache of one resource; run ``run()`` as a task and read ``items`` at any time."""

    def __init__(
        self,
        client: ClusterClient,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        watch_timeout_seconds: int = 300,
        backoff: Backoff | None = None,
        # How often to look again for a resource the server does not serve (a CRD not installed).
        absent_recheck_seconds: float = 30.0,
        # Injected so tests can run the retry loop without real waiting.
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        # Applied to every object before it is stored (client-go's SetTransform): keeps only what
        # the reader needs, so 100,000 cached pods do not hold their managedFields and statuses.
        transform: Callable[[Obj], Obj] | None = None,
        # Longest run of watch events handled before other tasks get the loop (see _watch).
        event_slice_seconds: float = EVENT_SLICE_SECONDS,
    ) -> None:
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.page_size = page_size
        self.watch_timeout_seconds = watch_timeout_seconds
        self.backoff = backoff or Backoff()
        self.absent_recheck_seconds = absent_recheck_seconds
        self._sleep = sleep
        self._transform = transform
        self.event_slice_seconds = event_slice_seconds
        self._items: dict[Key, Obj] = {}
        self._handlers: list[Handler] = []
        self._synced = asyncio.Event()
        self.resource_version = ""
        # Bumped on every applied change: readers compare it to know whether to rebuild.
        self.version = 0
        # Counters for tests, metrics and logs.
        self.lists = 0
        self.watches = 0
        self.errors = 0
        self.last_error: str | None = None  # the last failure since the last good LIST, for callers

    # -- reading ----------------------------------------------------------------------------------

    @property
    def items(self) -> Mapping[Key, Obj]:
        """The current objects (read-only view; objects must not be mutated)."""
        return MappingProxyType(self._items)

    @property
    def synced(self) -> bool:
        """True once a complete LIST has been applied; stays True through relists."""
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        await self._synced.wait()

    def add_handler(self, handler: Handler) -> None:
        """Call ``handler`` for every change from now on (not for objects already cached)."""
        self._handlers.append(handler)

    def remove_handler(self, handler: Handler) -> None:
        """Stop calling ``handler`` (a reader of a shared informer that stops: a restarted loop
        must not leave its predecessor's handlers behind, one more per restart)."""
        with contextlib.suppress(ValueError):
            self._handlers.remove(handler)

    # -- the loop ---------------------------------------------------------------------------------

    async def run(self) -> None:
        """List, then watch forever; returns only by cancellation."""
        need_list = True
        expired_in_row = 0
        while True:
            try:
                if need_list:
                    await self._list()
                    need_list = False
                    self.last_error = None
                    self.backoff.reset()
                if await self._watch():
                    expired_in_row = 0
                    self.backoff.reset()
                    continue
                # The stream ended without bringing anything: do not spin against the server.
                await self._sleep(self.backoff.next())
            except Expired as e:
                # 410: our resourceVersion left the server's window. Relist at once; back off only
                # if a fresh list's version expires again before its watch brought anything.
                log.info("%s: %s; relisting", self.resource.plural, e)
                need_list = True
                expired_in_row += 1
                if expired_in_row > 1:
                    await self._sleep(self.backoff.next())
            except asyncio.CancelledError:
                raise
            except (NotFound, Unsupported) as e:
                # The resource is not served (Volcano's or our CRD not installed yet): that is an
                # empty collection, not an unsynced cache, or a cluster without Volcano's optional
                # CRDs would never become ready. Look again later for the CRD to appear.
                if not self.synced or self._items:
                    log.warning(
                        "%s: %s; treating as empty, checking again in %.0fs",
                        self.resource.plural,
                        e,
                        self.absent_recheck_seconds,
                    )
                self._replace({}, "")
                need_list = True
                await self._sleep(self.absent_recheck_seconds)
            except Exception as e:  # every other failure: log, back off, retry; never crash
                self.errors += 1
                self.last_error = f"{type(e).__name__}: {e}"
                delay = self.backoff.next()
                log.warning("%s: %s: %s; retrying in %.1fs", self.resource.plural, type(e).__name__, e, delay)
                await self._sleep(delay)

    async def _list(self) -> None:
        items: dict[Key, Obj] = {}
        token: str | None = None
        while True:
            page = await self.client.list(
                self.resource,
                namespace=self.namespace,
                label_selector=self.label_selector,
                field_selector=self.field_selector,
                limit=self.page_size,
                continue_token=token,
            )
            for obj in page.items:
                items[key_of(obj)] = self._transform(obj) if self._transform is not None else obj
            if not page.continue_token:
                break
            token = page.continue_token
        self.lists += 1
        self._replace(items, page.resource_version)

    def _replace(self, items: dict[Key, Obj], resource_version: str) -> None:
        old = self._items
        self._items = items
        self.resource_version = resource_version
        events: list[InformerEvent]
        if not old:  # the first LIST (or the first after an empty store): every object is new
            events = [InformerEvent("ADDED", obj) for obj in items.values()]
        else:
            events = []
            for key, obj in items.items():
                previous = old.get(key)
                if previous is None:
                    events.append(InformerEvent("ADDED", obj))
                elif _rv(previous) != _rv(obj) or previous != obj:
                    events.append(InformerEvent("MODIFIED", obj, previous))
            events.extend(InformerEvent("DELETED", obj, obj) for key, obj in old.items() if key not in items)
        if events or not self.synced:
            self.version += 1
        self._synced.set()
        for event in events:
            self._deliver(event)

    async def _watch(self) -> bool:
        """One watch stream; True if it brought any event (bookmarks included)."""
        self.watches += 1
        got_any = False
        stream = self.client.watch(
            self.resource,
            resource_version=self.resource_version,
            namespace=self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            timeout_seconds=self.watch_timeout_seconds,
        )
        slice_started = time.monotonic()
        async for event in stream:
            got_any = True
            obj = event.object
            rv = _rv(obj)
            if event.type == "BOOKMARK":
                self.resource_version = rv or self.resource_version
                continue
            if self._transform is not None:
                obj = self._transform(obj)
            key = key_of(obj)
            previous = self._items.get(key)
            if event.type == "DELETED":
                self._items.pop(key, None)
                change = InformerEvent("DELETED", obj, previous)
            else:
                self._items[key] = obj
                change = InformerEvent("ADDED" if previous is None else "MODIFIED", obj, previous)
            self.resource_version = rv or self.resource_version
            self.version += 1
            self._deliver(change)
            # Events the client has buffered come without a suspension (a full line is read at
            # once), so a burst, 500 node heartbeats a second at 5,000 nodes, would be handled in
            # one go while every admission review that arrived meanwhile waits behind it on the
            # same event loop. Past a slice, give the loop back before the next event (the slice
            # may include a wait for the stream: then this yield is one turn of the loop early).
            if time.monotonic() - slice_started >= self.event_slice_seconds:
                await asyncio.sleep(0)
                slice_started = time.monotonic()
        return got_any

    def _deliver(self, event: InformerEvent) -> None:
        for handler in self._handlers:
            try:
                handler(event)
            except Exception:
                log.exception("%s: a handler failed on %s", self.resource.plural, event.type)
