"""A live watch on the double's object table, fed as kube-apiserver's watch cache feeds one.

Kept apart from the table because what a watcher is sent is its own policy (cacher.go): selector
transitions become ADDED or DELETED, nothing at or before the watch's start is sent, a bookmark
only once the resource has moved past it.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable

from vgpu_guard.apidouble._selectors import FieldSelector, LabelSelector
from vgpu_guard.apidouble._table import EventType, ObjectTable
from vgpu_guard.apidouble._types import TypeInfo
from vgpu_guard.apidouble._values import Obj, meta_of

__all__ = ["Watch"]


class Watch:
    """A live watch: the store appends events; the consumer drains them with ``pop``.

    ``wakeup`` is called (on the store's thread) after events arrive, so an asyncio consumer can
    set an ``asyncio.Event``. ``closed`` turns true when the store ends the watch (its resource
    went away with its CRD) or the consumer calls ``close``.
    """

    def __init__(
        self,
        table: ObjectTable,
        info: TypeInfo,
        *,
        version: str,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
    ):
        self._table = table
        self.info = info
        self.version = version
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.events: deque[tuple[str, Obj]] = deque()
        self.wakeup: Callable[[], None] | None = None
        self.closed = False
        # The watcher's starting resourceVersion (cacher.go): nothing at or before it is sent, and
        # a bookmark only goes out once its resource has moved past it. -1 while replaying.
        self.since = -1

    def matches(self, obj: Obj) -> bool:
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        if self.labels and not self.labels.matches((obj.get("metadata") or {}).get("labels")):
            return False
        return not self.fields or self.fields.matches(obj, self.info.field_getter)

    def offer(self, etype: EventType, stored: Obj, prev: Obj | None, *, current: bool = True) -> None:
        """Queue ``stored`` as the watch cache would (filter transitions become ADDED/DELETED).

        ``current``: ``stored`` is the object the store holds now (a live change, the initial
        state), not one replayed from the history."""
        if self.since >= 0 and int(stored["metadata"].get("resourceVersion") or 0) <= self.since:
            return  # a watch from a future resourceVersion sees nothing up to it
        info, present = self.info, self._table.present
        # The new side of a live change is the object now stored (a deletion's is not: it left).
        fresh = functools.partial(present, current=current and etype != "DELETED")
        now = self.matches(stored if info.stored_as is None else fresh(info, stored, self.version))
        before = prev is not None and self.matches(
            prev if info.stored_as is None else present(info, prev, self.version)
        )
        if etype == "ADDED":
            if now:
                self.events.append(("ADDED", fresh(info, stored, self.version)))
        elif etype == "DELETED":
            if before or now:
                self.events.append(("DELETED", present(info, stored, self.version)))
        elif now and before:
            self.events.append(("MODIFIED", fresh(info, stored, self.version)))
        elif now:
            self.events.append(("ADDED", fresh(info, stored, self.version)))
        elif before and prev is not None:
            gone = present(info, prev, self.version)
            meta_of(gone)["resourceVersion"] = stored["metadata"]["resourceVersion"]
            self.events.append(("DELETED", gone))
        if self.events and self.wakeup is not None:
            self.wakeup()

    def pop(self) -> list[tuple[str, Obj]]:
        """Take every queued event (each object is the consumer's own copy)."""
        out = list(self.events)
        self.events.clear()
        return out

    def bookmark(self) -> Obj | None:
        """A BOOKMARK object (only kind, apiVersion and the resource's newest resourceVersion), or
        None while the resource has not moved past the watch's start: the watch cache sends none
        then (cacher.go dispatches a bookmark only to watchers older than it)."""
        newest = self._table.last_resource_version(self.info)
        if newest <= self.since:
            return None
        return {
            "kind": self.info.kind,
            "apiVersion": self.info.api_version(self.version),
            "metadata": {"resourceVersion": str(newest)},
        }

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._table.unwatch(self)
            if self.wakeup is not None:
                self.wakeup()
