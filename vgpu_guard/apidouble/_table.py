"""The double's object table: stored objects, resourceVersions, event history, watchers, types.

Every other part of the store (reads, the write steps, the controllers it stands in for) works on
this one table, so the table is where the invariants live: a stored dict is never mutated after it
is stored (every write stores a fresh copy, so the history and watch events can share it), one
global resourceVersion counts every write (etcd's revision), and each resource keeps a bounded
event history (the watch cache, ``watch_window`` events) that watches replay and exact LISTs
reconstruct from. Events expire ``event_ttl`` after their last write, as the etcd lease
kube-apiserver attaches to every Event write does.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, Protocol

from vgpu_guard.apidouble import _status as st
from vgpu_guard.apidouble._copies import StoredCopies
from vgpu_guard.apidouble._types import TypeInfo
from vgpu_guard.apidouble._values import Obj, deep_copy, meta_of
from vgpu_guard.kube.resources import Resource


class Watcher(Protocol):
    """What the table and its controllers need of a watch (``_watches.Watch``): its type, to be
    offered each change, and to be closed when its resource goes. A protocol here, not an import,
    so the table stays below the watches (no circle)."""

    info: TypeInfo

    def offer(self, etype: EventType, stored: Obj, prev: Obj | None, *, current: bool = True) -> None: ...

    def close(self) -> None: ...


__all__ = ["EVENTS", "EventType", "ObjectTable", "Watcher", "key_of", "to_storage"]

EventType = Literal["ADDED", "MODIFIED", "DELETED"]
EVENTS = ("", "events")
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apiserver names.go: no vowels, no confusables
_Key = tuple[str, str]


@dataclass(slots=True)
class _History:
    events: deque[tuple[int, EventType, Obj, Obj | None]]
    evicted_upto: int = 0
    last_rv: int = 0  # the newest event's resourceVersion (the watch cache's own version)


class ObjectTable:
    """Objects keyed by ``(group, plural)`` then ``(namespace, name)``, with their history."""

    def __init__(
        self, *, clock: Callable[[], datetime], watch_window: int, event_ttl: timedelta, seed: int | None
    ):
        self.clock = clock
        self.watch_window = watch_window
        self.event_ttl = event_ttl
        self.rv = 0
        self.types: dict[_Key, TypeInfo] = {}  # by (group, plural) of the API
        self.objects: dict[_Key, dict[_Key, Obj]] = {}
        self.history: dict[_Key, _History] = {}
        self.watchers: dict[_Key, set[Watcher]] = {}
        self._random = random.Random(seed)
        self._copies = StoredCopies(deep_copy)
        # (expiry, resourceVersion, key) per Event write; an entry whose version is no longer the
        # stored one was superseded by a later write (which pushed its own) and is skipped.
        self._event_expiry: list[tuple[datetime, str, _Key]] = []

    # -- types ----------------------------------------------------------------------------------
    def register(self, info: TypeInfo) -> None:
        """Serve ``info``: its objects, history and watchers start empty (or stay, on re-serving)."""
        self.types[info.api_key] = info
        self.objects.setdefault(info.key, {})
        self.history.setdefault(info.key, _History(deque(maxlen=self.watch_window), last_rv=self.rv))
        self.watchers.setdefault(info.key, set())

    def unregister(self, info: TypeInfo) -> None:
        """Stop serving ``info`` (its CRD went); its objects must already be removed."""
        del self.types[info.api_key]
        del self.objects[info.key]
        del self.history[info.key]
        del self.watchers[info.key]

    def resolve(self, group: str, version: str, plural: str) -> TypeInfo | None:
        """The type served at ``group/version/plural``, or None (the server answers 404)."""
        info = self.types.get((group, plural))
        return info if info is not None and version in info.versions else None

    def type_of(self, resource: Resource) -> TypeInfo:
        """The type served for ``resource``; a 404 as for a path the API server does not serve."""
        info = self.resolve(resource.group, resource.version, resource.plural)
        if info is None:
            raise st.not_served()
        return info

    def last_resource_version(self, info: TypeInfo) -> int:
        """The resourceVersion of the newest change to ``info``'s objects (its watch cache's)."""
        return self.history[info.key].last_rv

    def random_name(self, length: int) -> str:
        """Random name characters as names.SimpleNameGenerator draws them (seeded: reproducible)."""
        return "".join(self._random.choice(_NAME_CHARS) for _ in range(length))

    def random_bits(self, bits: int) -> int:
        return self._random.getrandbits(bits)

    # -- presentation ---------------------------------------------------------------------------
    def present(self, info: TypeInfo, stored: Obj, version: str, *, current: bool = False) -> Obj:
        """A stored object as the client asked for it: a copy, in the requested version/API.

        ``current``: the object is the one the store holds at its key now (reads, and the new
        side of a watch event). The store never changes an object in place (a write stores a new
        one), so its copy may come from bytes kept for that key; an object still being written,
        or an older version, is copied afresh."""
        if current:
            obj: Obj = self._copies.copy(stored, (info.key, *key_of(info, stored)))
        else:
            obj = deep_copy(stored)
        if info.stored_as is not None:
            return _event_to_new(obj)
        if info.crd_name is not None and obj.get("apiVersion") != info.api_version(version):
            obj["apiVersion"] = info.api_version(version)
            schema = info.schemas.get(version)
            if schema is not None:  # conversion (strategy None) prunes to the version's schema
                schema.prune(obj)
        return obj

    def to_storage(self, info: TypeInfo, obj: Obj) -> Obj:
        """The inverse of ``present`` for the API shape (admission patches come back this way)."""
        return to_storage(info, obj)

    # -- reads ----------------------------------------------------------------------------------
    def namespace_for(self, info: TypeInfo, namespace: str | None) -> str:
        """The namespace part of a key: ``""`` for cluster-scoped types, required otherwise."""
        if not info.namespaced:
            return ""
        if not namespace:
            raise st.bad_request(f"a namespace is required for the namespaced resource {info.plural!r}")
        return namespace

    def stored(self, info: TypeInfo, namespace: str | None, name: str) -> Obj:
        """The stored object itself (never hand it out: ``present`` makes the client's copy)."""
        obj = self.objects[info.key].get((self.namespace_for(info, namespace), name))
        if obj is None:
            raise st.not_found(info.group, info.plural, name)
        return obj

    # -- writes ---------------------------------------------------------------------------------
    def next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def put(self, info: TypeInfo, etype: EventType, obj: Obj, prev: Obj | None) -> None:
        """Store ``obj`` under a new resourceVersion and tell the history and the watchers."""
        meta_of(obj)["resourceVersion"] = self.next_rv()
        self.objects[info.key][key_of(info, obj)] = obj
        self.emit(info, etype, obj, prev)

    def remove(self, info: TypeInfo, final: Obj, current: Obj) -> Obj:
        """Delete ``current``; watchers see ``final`` (a copy under a new resourceVersion)."""
        gone: Obj = deep_copy(final)
        meta_of(gone)["resourceVersion"] = self.next_rv()
        del self.objects[info.key][key_of(info, current)]
        self.emit(info, "DELETED", gone, current)
        return gone

    def emit(self, info: TypeInfo, etype: EventType, obj: Obj, prev: Obj | None) -> None:
        """Append the change to the history (evicting the oldest) and offer it to every watch."""
        if info.key == EVENTS and etype != "DELETED":
            expiry = (self.clock() + self.event_ttl, obj["metadata"]["resourceVersion"], key_of(info, obj))
            heapq.heappush(self._event_expiry, expiry)
        hist = self.history[info.key]
        if len(hist.events) == hist.events.maxlen:
            hist.evicted_upto = hist.events[0][0]
        hist.events.append((self.rv, etype, obj, prev))
        hist.last_rv = self.rv
        for w in list(self.watchers[info.key]):
            w.offer(etype, obj, prev)

    def unwatch(self, w: Watcher) -> None:
        self.watchers.get(w.info.key, set()).discard(w)

    def expire_events(self) -> int:
        """Delete every Event whose TTL has run out (what etcd's lease expiry does); how many.

        Called at the start of every get, list, watch and commit, so expiry is seen as soon as
        anything looks (an already open watch sees the DELETED at the store's next access).
        The double expires at exactly ``event_ttl``; kube-apiserver may keep an Event up to 60 s
        longer (its etcd leases are reused for up to a minute), so tests allow that margin."""
        heap, objects, now = self._event_expiry, self.objects[EVENTS], None
        expired = 0
        while heap:
            now = now or self.clock()
            expiry, rv, key = heap[0]
            if expiry > now:
                break
            heapq.heappop(heap)
            current = objects.get(key)
            if current is not None and current["metadata"]["resourceVersion"] == rv:
                self.remove(self.types[EVENTS], current, current)
                expired += 1
        return expired


def to_storage(info: TypeInfo, obj: Obj) -> Obj:
    """An object in its API shape turned into its storage shape (events.k8s.io Events -> core)."""
    return _event_to_core(obj) if info.stored_as is not None else obj


def key_of(info: TypeInfo, obj: Obj) -> _Key:
    """The table key of a stored object: ``(namespace or "", name)``."""
    meta = obj["metadata"]
    return (meta.get("namespace", "") if info.namespaced else "", meta["name"])


_EVENT_RENAMES = (
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("count", "deprecatedCount"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
)


def _event_to_new(core: Obj) -> Obj:
    """core/v1 Event -> events.k8s.io/v1 Event (pkg/apis/events/v1 conversion)."""
    out = dict(core)
    for old, new in _EVENT_RENAMES:
        if old in out:
            out[new] = out.pop(old)
    out["apiVersion"] = "events.k8s.io/v1"
    if not out.get("reportingController") and isinstance(out.get("deprecatedSource"), dict):
        out["reportingController"] = out["deprecatedSource"].get("component", "")
    return out


def _event_to_core(new: Obj) -> Obj:
    out = dict(new)
    for old, renamed in _EVENT_RENAMES:
        if renamed in out:
            out[old] = out.pop(renamed)
    out["apiVersion"] = "v1"
    return out
