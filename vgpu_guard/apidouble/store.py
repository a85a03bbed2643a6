"""The API double's store: kube-apiserver's object semantics, in memory, without HTTP.

Everything our product can observe of an API server's storage layer lives here, so the HTTP
server (``vgpu_guard.apidouble.http.server``) and the in-process adapter
(``vgpu_guard.apidouble.client.MemoryClusterClient``) behave identically. The behaviours and their
sources are listed in docs/apidouble.md and pinned by tests/apidouble/.

Design choices:

- Objects are plain JSON dicts keyed by ``(group, plural)`` then ``(namespace, name)``. A stored
  dict is never mutated after it is stored (every write stores a fresh copy), so watch history and
  events can share snapshots; callers always receive copies.
- One global, monotonically increasing resourceVersion (like etcd's revision), rendered as an
  opaque string. Each resource keeps a bounded event history (``watch_window``), like the watch
  cache: a watch from a version older than the window gets ``Expired`` (410).
- A write is three steps so the admission chain can sit where kube-apiserver runs it:
  ``prepare_*`` (decode, defaults, built-in admission: NamespaceLifecycle, Priority,
  ServiceAccount) -> mutating webhooks -> ``complete`` (prune/default again, name generation,
  PrepareForCreate/Update, validation) -> validating webhooks -> ``commit`` (preconditions,
  persistence, events). The synchronous ``create``/``replace``/``patch``/``delete``/``bind``
  methods run the three steps without webhooks.
- Time comes from an injected clock (deletion timestamps, conditions, event expiry); randomness
  (uids, generateName) from a seedable ``random.Random``.
- Events expire ``event_ttl`` (kube-apiserver's ``--event-ttl``, default 1 h) after their last
  write, as the etcd lease kube-apiserver attaches to every Event write does: the expired Event
  is deleted (watchers see DELETED) on the store's next access after that moment.
"""

from __future__ import annotations

import functools
import heapq
import json
import random
import re
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from vgpu_guard.apidouble import _status as st
from vgpu_guard.apidouble._copies import StoredCopies
from vgpu_guard.apidouble._gotext import go_string_slice, parse_uint_error
from vgpu_guard.apidouble._jsonpatch import apply_json_patch
from vgpu_guard.apidouble._listing import (
    EXPIRED_LIST,
    encode_continue,
    expired_continue,
    future_revision,
    list_key,
    plan_list,
    state_at,
    too_large,
)
from vgpu_guard.apidouble._pods import (
    QuantityError,
    Undecodable,
    admit_pod_update,
    decode_defaults,
    default_toleration_seconds,
    graceful_seconds,
    initial_status,
    mount_service_account,
    validate_pod,
    validate_pod_update,
)
from vgpu_guard.apidouble._selectors import FieldSelector, LabelSelector, SelectorError, UnsupportedFieldLabel
from vgpu_guard.apidouble._status import Cause
from vgpu_guard.apidouble._strategic import strategic_merge
from vgpu_guard.apidouble._types import (
    BUILTIN_TYPES,
    META_FIELDS,
    TypeInfo,
    crd_problems,
    default_crd,
    type_from_crd,
)
from vgpu_guard.apidouble._webhooks import default_and_validate
from vgpu_guard.kube.client import ObjectList
from vgpu_guard.kube.errors import KubeError
from vgpu_guard.kube.resources import Resource

__all__ = [
    "DEFAULT_NAMESPACES",
    "Operation",
    "Pending",
    "RetryWrite",
    "Store",
    "Watch",
    "deep_copy",
    "format_time",
    "merge_patch",
]

Obj = dict[str, Any]
_Causes = list[Cause]  # aliases: inside Store, `list` is the LIST verb
_Strings = list[str]
_Types = list[TypeInfo]
_Objs = list[Obj]
Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
EventType = Literal["ADDED", "MODIFIED", "DELETED"]
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apiserver names.go: no vowels, no confusables
_DNS1123_SUBDOMAIN = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_TYPE_KEYS = ("apiVersion", "kind")
ROOT_CA_CONFIG_MAP = "kube-root-ca.crt"
_SYSTEM_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation")
_EVENTS = ("", "events")
_CRDS = ("apiextensions.k8s.io", "customresourcedefinitions")


_LEAVES = frozenset({str, int, float, bool, type(None)})


def deep_copy(value: Any) -> Any:
    """Copy JSON data (dicts, lists, scalars); several times faster than ``copy.deepcopy``.

    The double copies every object it hands out, and that copy was most of a pass in the
    allocation-safety run: plain dicts and lists are copied at C speed and only their containers
    recursed into (no call per string); subclasses take the general path.
    """
    cls = value.__class__
    if cls is dict:
        out = value.copy()
        for key, item in out.items():
            if item.__class__ not in _LEAVES:
                out[key] = deep_copy(item)  # replacing a value while iterating is safe
        return out
    if cls is list:
        copied = value.copy()
        for i, item in enumerate(copied):
            if item.__class__ not in _LEAVES:
                copied[i] = deep_copy(item)
        return copied
    if isinstance(value, dict):
        return {k: deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [deep_copy(v) for v in value]
    return value


def format_time(moment: datetime) -> str:
    """RFC 3339 with second precision and ``Z``, as metav1.Time serialises."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: ``null`` deletes, objects merge, anything else replaces."""
    if not isinstance(patch, dict):
        return deep_copy(patch)
    result = deep_copy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = obj["metadata"] = {}
    return meta


class RetryWrite(Exception):
    """Raised by ``commit`` when an unconditional write raced another: prepare it again."""


@dataclass(slots=True)
class Pending:
    """One write between ``prepare_*`` and ``commit``: what admission sees and may change."""

    operation: Operation
    info: TypeInfo
    version: str
    namespace: str
    name: str
    subresource: str
    object: Obj | None  # the new object (for pods/binding: the Binding); None for DELETE
    old: Obj | None  # the stored object; None for CREATE
    options: Obj
    dry_run: bool
    retryable: bool  # no client precondition: a lost race is retried, not a 409
    precondition_rv: str | None = None
    precondition_uid: str | None = None
    grace_period_seconds: int | None = None
    warnings: list[str] = field(default_factory=list)
    completed: bool = False

    @property
    def kind(self) -> tuple[str, str, str]:
        """(group, version, kind) of ``object`` as sent in AdmissionReview ``request.kind``."""
        if self.subresource == "binding":
            return ("", "v1", "Binding")
        return (self.info.group, self.version, self.info.kind)

    @property
    def resource(self) -> Resource:
        return self.info.resource(self.version)


class Watch:
    """A live watch: the store appends events; the consumer drains them with ``pop``.

    ``wakeup`` is called (on the store's thread) after events arrive, so an asyncio consumer can
    set an ``asyncio.Event``. ``closed`` turns true when the store ends the watch (its resource
    went away with its CRD) or the consumer calls ``close``.
    """

    def __init__(
        self,
        store: Store,
        info: TypeInfo,
        *,
        version: str,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
    ):
        self._store = store
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
        info, present = self.info, self._store.present
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
            _meta(gone)["resourceVersion"] = stored["metadata"]["resourceVersion"]
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
        newest = self._store.last_resource_version(self.info)
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
            self._store._unwatch(self)
            if self.wakeup is not None:
                self.wakeup()


@dataclass(slots=True)
class _History:
    events: deque[tuple[int, EventType, Obj, Obj | None]]
    evicted_upto: int = 0
    last_rv: int = 0  # the newest event's resourceVersion (the watch cache's own version)


class Store:
    """In-memory kube-apiserver storage and REST semantics (see the module docstring)."""

    def __init__(
        self,
        *,
        clock: Callable[[], datetime] | None = None,
        watch_window: int = 1000,
        seed: int | None = None,
        namespaces: Iterable[str] = DEFAULT_NAMESPACES,
        event_ttl: timedelta = timedelta(hours=1),
    ):
        if watch_window < 1:
            raise ValueError(f"watch_window must be at least 1, got {watch_window}")
        if event_ttl <= timedelta(0):
            raise ValueError(f"event_ttl must be positive, got {event_ttl}")
        self.clock: Callable[[], datetime] = clock or (lambda: datetime.now(UTC))
        self.watch_window = watch_window
        self.event_ttl = event_ttl
        # (expiry, resourceVersion, key) per Event write; an entry whose version is no longer the
        # stored one was superseded by a later write (which pushed its own) and is skipped.
        self._event_expiry: list[tuple[datetime, str, tuple[str, str]]] = []
        self._random = random.Random(seed)
        self._root_ca_pem: str | None = None
        self._rv = 0
        self._types: dict[tuple[str, str], TypeInfo] = {}  # by (group, plural) of the API
        self._objects: dict[tuple[str, str], dict[tuple[str, str], Obj]] = {}
        self._history: dict[tuple[str, str], _History] = {}
        self._watchers: dict[tuple[str, str], set[Watch]] = {}
        self._copies = StoredCopies(deep_copy)
        for info in BUILTIN_TYPES:
            self._register(info)
        for ns in namespaces:
            self.create(self._types[("", "namespaces")].resource(), {"metadata": {"name": ns}})

    # -- types --------------------------------------------------------------------------------
    @property
    def resource_version(self) -> int:
        """The newest resourceVersion handed out (the etcd revision)."""
        return self._rv

    def last_resource_version(self, info: TypeInfo) -> int:
        """The resourceVersion of the newest change to ``info``'s objects (its watch cache's)."""
        return self._history[info.key].last_rv

    def types(self) -> _Types:
        """Every served resource type (discovery)."""
        return list(self._types.values())

    def resolve(self, group: str, version: str, plural: str) -> TypeInfo | None:
        """The type served at ``group/version/plural``, or None (the server answers 404)."""
        info = self._types.get((group, plural))
        return info if info is not None and version in info.versions else None

    def type_of(self, resource: Resource) -> TypeInfo:
        info = self.resolve(resource.group, resource.version, resource.plural)
        if info is None:
            # NewGenericServerResponse(404) with empty details, as the API server answers a path
            # it does not serve (a client adds the path when it prints the error).
            raise st.raise_status(
                st.make_status(404, "NotFound", "the server could not find the requested resource", name="")
            )
        return info

    def _register(self, info: TypeInfo) -> None:
        self._types[info.api_key] = info
        self._objects.setdefault(info.key, {})
        self._history.setdefault(info.key, _History(deque(maxlen=self.watch_window), last_rv=self._rv))
        self._watchers.setdefault(info.key, set())

    # -- presentation -------------------------------------------------------------------------
    def present(self, info: TypeInfo, stored: Obj, version: str, *, current: bool = False) -> Obj:
        """A stored object as the client asked for it: a copy, in the requested version/API.

        ``current``: the object is the one the store holds at its key now (reads, and the new
        side of a watch event). The store never changes an object in place (a write stores a new
        one), so its copy may come from bytes kept for that key; an object still being written,
        or an older version, is copied afresh."""
        if current:
            obj: Obj = self._copies.copy(stored, (info.key, *_key_of(info, stored)))
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
        return _event_to_core(obj) if info.stored_as is not None else obj

    # -- reads --------------------------------------------------------------------------------
    def _ns(self, info: TypeInfo, namespace: str | None) -> str:
        if not info.namespaced:
            return ""
        if not namespace:
            raise st.bad_request(f"a namespace is required for the namespaced resource {info.plural!r}")
        return namespace

    def _stored(self, info: TypeInfo, namespace: str | None, name: str) -> Obj:
        ns = self._ns(info, namespace)
        obj = self._objects[info.key].get((ns, name))
        if obj is None:
            raise st.not_found(info.group, info.plural, name)
        return obj

    def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Obj:
        self.expire_events()
        info = self.type_of(resource)
        return self.present(info, self._stored(info, namespace, name), resource.version, current=True)

    def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
    ) -> ObjectList:
        """LIST as kube-apiserver 1.20 serves it (``_listing``): in etcd key order, a snapshot for
        continue tokens and exact reads, pages filled the way etcd3's store fills them."""
        self.expire_events()
        info = self.type_of(resource)
        labels, fields = self._selectors(info, label_selector, field_selector)
        plan = plan_list(
            resource_version=resource_version,
            resource_version_match=resource_version_match,
            limit=limit,
            continue_token=continue_token,
        )
        if plan.minimum is not None and plan.minimum > self._rv:
            raise too_large(plan.minimum, self._rv)
        across = info.namespaced and not namespace
        objects = self._objects[info.key]
        list_rv = self._rv
        if plan.at is not None:
            objects = self._snapshot(info, plan.at, plan.from_continue, plan.start, across)
            list_rv = plan.at
        ns_filter = namespace if info.namespaced and namespace else None
        keys = sorted(
            (list_key(k[0], k[1], across_namespaces=across), k)
            for k in objects
            if ns_filter is None or k[0] == ns_filter
        )
        if plan.start is not None:
            keys = [(text, k) for text, k in keys if text >= plan.start]
        items: _Objs = []
        token, remaining = "", None
        for i, (_, key) in enumerate(keys):
            if plan.limit and len(items) >= plan.limit:
                # etcd3's store: a full page hands out a token while any key follows, matching
                # or not; it counts what is left only when no selector filters.
                last = items[-1]["metadata"]
                token = encode_continue(
                    list_rv,
                    list_key(last.get("namespace", ""), last["name"], across_namespaces=across),
                )
                if not labels and not fields:
                    remaining = len(keys) - i
                break
            stored = objects[key]
            if labels and not labels.matches(stored["metadata"].get("labels")):
                continue
            # A LIST at an older resourceVersion hands out that time's objects, not the current ones.
            copy = functools.partial(self.present, info, stored, resource.version, current=plan.at is None)
            view = stored if info.stored_as is None else copy()
            if fields and not fields.matches(view, info.field_getter):
                continue
            item = copy() if view is stored else view  # an Event's view is its own fresh copy
            if info.crd_name is None:
                # kube-apiserver's built-in LISTs name the type once, on the list, not on each item.
                for type_key in _TYPE_KEYS:
                    item.pop(type_key, None)
            items.append(item)
        return ObjectList(
            items=items, resource_version=str(list_rv), continue_token=token, remaining_item_count=remaining
        )

    def _snapshot(
        self, info: TypeInfo, at: int, from_continue: bool, start: str | None, across: bool
    ) -> dict[tuple[str, str], Obj]:
        """The objects of ``info`` at resourceVersion ``at`` (the watch window stands in for etcd's
        history: older than the window is compacted, newer than the store is the future)."""
        if at > self._rv:
            raise future_revision()
        hist = self._history[info.key]
        if at < hist.evicted_upto:
            if from_continue:
                raise expired_continue(encode_continue(-1, (start or "\x00")[:-1]))
            raise st.expired(EXPIRED_LIST)
        return state_at(self._objects[info.key], list(hist.events), at, lambda obj: _key_of(info, obj))

    def _selectors(
        self, info: TypeInfo, label_selector: str | None, field_selector: str | None
    ) -> tuple[LabelSelector, FieldSelector]:
        try:
            return (
                LabelSelector.parse(label_selector),
                FieldSelector.parse(field_selector, supported=info.field_labels),
            )
        except UnsupportedFieldLabel as e:
            if info.field_labels == META_FIELDS and info.crd_name is None:
                # runtime.DefaultMetaV1FieldSelectorConversion: kinds without their own field labels.
                why = f'"{e.label}" is not a known field selector: only "metadata.name", "metadata.namespace"'
                raise st.bad_request(why) from e
            raise st.bad_request(str(e)) from e
        except SelectorError as e:
            raise st.bad_request(str(e)) from e

    def watch(
        self,
        resource: Resource,
        *,
        resource_version: str | None,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Watch:
        """Start a watch. ``""``/``"0"``/None: synthetic ADDED of the current state, then changes;
        ``N``: every change after N, or ``Expired`` when N has left the window."""
        self.expire_events()
        info = self.type_of(resource)
        labels, fields = self._selectors(info, label_selector, field_selector)
        w = Watch(
            self,
            info,
            version=resource.version,
            namespace=namespace if info.namespaced and namespace else None,
            labels=labels,
            fields=fields,
        )
        hist = self._history[info.key]
        if not resource_version or resource_version == "0":
            for key in sorted(self._objects[info.key]):
                w.offer("ADDED", self._objects[info.key][key], None)
            w.since = hist.last_rv
        else:
            since = w.since = _parse_rv(resource_version)
            if since < hist.evicted_upto:
                oldest = hist.events[0][0] if hist.events else self._rv + 1
                raise st.expired(f"too old resource version: {since} ({oldest - 1})")
            for rv, etype, obj, prev in hist.events:
                if rv > since:
                    w.offer(etype, obj, prev, current=False)
        self._watchers[info.key].add(w)
        return w

    def _unwatch(self, w: Watch) -> None:
        self._watchers.get(w.info.key, set()).discard(w)

    # -- the write pipeline -------------------------------------------------------------------
    def _emit(self, info: TypeInfo, etype: EventType, obj: Obj, prev: Obj | None) -> None:
        if info.key == _EVENTS and etype != "DELETED":
            expiry = (self.clock() + self.event_ttl, obj["metadata"]["resourceVersion"], _key_of(info, obj))
            heapq.heappush(self._event_expiry, expiry)
        hist = self._history[info.key]
        if len(hist.events) == hist.events.maxlen:
            hist.evicted_upto = hist.events[0][0]
        hist.events.append((self._rv, etype, obj, prev))
        hist.last_rv = self._rv
        for w in list(self._watchers[info.key]):
            w.offer(etype, obj, prev)

    def expire_events(self) -> int:
        """Delete every Event whose TTL has run out (what etcd's lease expiry does); how many.

        Called at the start of every get, list, watch and commit, so expiry is seen as soon as
        anything looks (an already open watch sees the DELETED at the store's next access).
        The double expires at exactly ``event_ttl``; kube-apiserver may keep an Event up to 60 s
        longer (its etcd leases are reused for up to a minute), so tests allow that margin."""
        heap, objects, now = self._event_expiry, self._objects[_EVENTS], None
        expired = 0
        while heap:
            now = now or self.clock()
            expiry, rv, key = heap[0]
            if expiry > now:
                break
            heapq.heappop(heap)
            current = objects.get(key)
            if current is not None and current["metadata"]["resourceVersion"] == rv:
                self._remove(self._types[_EVENTS], current, current)
                expired += 1
        return expired

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _decode(self, info: TypeInfo, version: str, body: Any) -> Obj:
        """What the API server's decoder does: type check, apiVersion/kind, then the schema."""
        if not isinstance(body, Mapping):
            raise st.bad_request(f"the body of the request must be a JSON object, not {type(body).__name__}")
        obj: Obj = deep_copy(dict(body))
        want_av = info.api_version(version)
        if info.crd_name is None and (
            obj.get("apiVersion") not in (None, "", want_av) or obj.get("kind") not in (None, "", info.kind)
        ):
            # The built-in scheme's decoder (transformDecodeError): the body names a kind the
            # scheme does not have in that version.
            sent_kind = str(obj.get("kind") or info.kind)
            sent_av = str(obj.get("apiVersion") or want_av)
            raise st.bad_request(
                f'{sent_kind} in version "{sent_av.rsplit("/", 1)[-1]}" cannot be handled as a {info.kind}: '
                f'no kind "{sent_kind}" is registered for version "{sent_av}" in scheme '
                '"k8s.io/kubernetes/pkg/api/legacyscheme/scheme.go:30"'
            )
        if obj.get("apiVersion") not in (None, "", want_av):
            raise st.bad_request(
                f"the API version in the data ({obj['apiVersion']}) does not match "
                f"the expected API version ({want_av})"
            )
        if obj.get("kind") not in (None, "", info.kind):
            raise st.bad_request(
                f"the kind in the data ({obj['kind']}) does not match the expected kind ({info.kind})"
            )
        obj = {
            "apiVersion": want_av,
            "kind": info.kind,
            **{k: v for k, v in obj.items() if k not in _TYPE_KEYS},
        }
        meta = _meta(obj)
        for key in ("labels", "annotations"):
            value = meta.get(key)
            if value is None:
                meta.pop(key, None)
            elif not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise st.bad_request(f"metadata.{key} must be a map of string keys to string values")
        if meta.get("finalizers") is not None and not isinstance(meta["finalizers"], list):
            raise st.bad_request("metadata.finalizers must be a list of strings")
        # Go's omitempty: an empty map or list in these fields is not stored (nor shown).
        for key in ("labels", "annotations", "finalizers", "ownerReferences"):
            if meta.get(key) in ({}, []):
                del meta[key]
        if info.key == ("", "configmaps"):
            for key in ("data", "binaryData"):
                if obj.get(key) in ({}, None):
                    obj.pop(key, None)
        obj = self.to_storage(info, obj)
        schema = info.schemas.get(version)
        if schema is not None:
            schema.prune(obj)
            schema.apply_defaults(obj)
        if info.key == _CRDS:
            default_crd(obj)
        try:
            decode_defaults(info.key, obj)  # pods and nodes: canonical quantities, SetDefaults
        except Undecodable as e:
            raise st.bad_request(str(e)) from e
        return obj

    def prepare_create(
        self,
        resource: Resource,
        body: Any,
        *,
        namespace: str | None = None,
        dry_run: bool = False,
    ) -> Pending:
        info = self.type_of(resource)
        obj = self._decode(info, resource.version, body)
        meta = _meta(obj)
        ns = ""
        if info.namespaced:
            ns = namespace or meta.get("namespace") or ""
            if not ns:
                raise st.bad_request(f"a namespace is required to create {info.plural}")
            if meta.get("namespace") not in (None, "", ns):
                raise st.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = ns
            self._namespace_lifecycle(ns, info, meta.get("name") or meta.get("generateName") or "")
        else:
            meta.pop("namespace", None)
        if meta.get("resourceVersion"):
            # etcd3 store.Create returns this plain error, which the server renders as a 500.
            raise st.internal("resourceVersion should not be set on objects to be created")
        for key in _SYSTEM_META:
            meta.pop(key, None)
        if info.key == ("", "pods"):  # the built-in admission plugins, in the API server's order
            self._service_account_admission(ns, obj)
            self._priority_admission(obj)
            default_toleration_seconds(obj)
        return Pending(
            operation="CREATE",
            info=info,
            version=resource.version,
            namespace=ns,
            name=str(meta.get("name") or ""),
            subresource="",
            object=obj,
            old=None,
            options={"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
            dry_run=dry_run,
            retryable=False,
        )

    def publish_root_ca(self, ca_pem: str) -> None:
        """kube-controller-manager's root-ca-cert-publisher: ``kube-root-ca.crt`` (key ``ca.crt``) in
        every namespace, now and in each new one. Only a double served over HTTPS has a CA to publish."""
        self._root_ca_pem = ca_pem
        for _, name in list(self._objects[("", "namespaces")]):
            self._publish_root_ca_in(name)

    def _publish_root_ca_in(self, ns: str) -> None:
        if self._root_ca_pem is None or (ns, ROOT_CA_CONFIG_MAP) in self._objects[("", "configmaps")]:
            return
        config_maps = self._types[("", "configmaps")].resource()
        body = {"metadata": {"name": ROOT_CA_CONFIG_MAP}, "data": {"ca.crt": self._root_ca_pem}}
        self.create(config_maps, body, namespace=ns)

    def _default_service_account(self, ns: str) -> None:
        """kube-controller-manager's serviceaccounts controller: every namespace gets ``default``.

        Done at once here, where the real controller takes a moment: tests that wait for it (as
        users' tooling retries) pass on both."""
        accounts = self._types[("", "serviceaccounts")].resource()
        self.create(accounts, {"metadata": {"name": "default"}}, namespace=ns)

    def _service_account_admission(self, ns: str, pod: Obj) -> None:
        """The ServiceAccount admission plugin: a pod names an account (``default`` unless set)
        that must exist in its namespace."""
        spec = pod.setdefault("spec", {})
        if not isinstance(spec, dict):
            return
        if not spec.get("serviceAccountName"):
            spec["serviceAccountName"] = spec["serviceAccount"] = "default"
        account = spec["serviceAccountName"]
        found = self._objects[("", "serviceaccounts")].get((ns, account))
        if found is None:
            name = str(_meta(pod).get("name") or _meta(pod).get("generateName") or "")
            raise st.forbidden(
                f'pods "{name}" is forbidden: error looking up service account {ns}/{account}: '
                f'serviceaccount "{account}" not found',
                group="",
                plural="pods",
                name=name,
            )
        mount_service_account(pod, found, lambda: "".join(self._random.choice(_NAME_CHARS) for _ in range(5)))

    def _namespace_lifecycle(self, ns: str, info: TypeInfo, name: str) -> None:
        """NamespaceLifecycle admission: no objects in missing or terminating namespaces."""
        space = self._objects[("", "namespaces")].get(("", ns))
        if space is None:
            raise st.not_found("", "namespaces", ns)
        if (space.get("metadata") or {}).get("deletionTimestamp"):
            raise st.forbidden(
                f'{st.qualified(info.group, info.plural)} "{name}" is forbidden: unable to create new '
                f"content in namespace {ns} because it is being terminated",
                group=info.group,
                plural=info.plural,
                name=name,
            )

    def _priority_admission(self, pod: Obj) -> None:
        """The Priority admission plugin: priorityClassName -> spec.priority (or global default)."""
        spec = pod.get("spec")
        if not isinstance(spec, dict):
            return
        classes = self._objects[("scheduling.k8s.io", "priorityclasses")]
        wanted = spec.get("priorityClassName")
        if wanted:
            pc = classes.get(("", wanted))
            if pc is None:
                name = _meta(pod).get("name") or _meta(pod).get("generateName") or ""
                raise st.forbidden(
                    f'pods "{name}" is forbidden: no PriorityClass with name {wanted} was found',
                    plural="pods",
                    name=name,
                )
        else:
            pc = next((c for c in classes.values() if c.get("globalDefault")), None)
            if pc is not None:
                spec["priorityClassName"] = pc["metadata"]["name"]
        value = int(pc.get("value", 0)) if pc is not None else 0
        policy = (pc or {}).get("preemptionPolicy") or "PreemptLowerPriority"
        # Any priority or preemptionPolicy the client sent must equal the computed one, with or
        # without a class name (admitPod: "must not be provided in pod spec").
        name = _meta(pod).get("name") or _meta(pod).get("generateName") or ""
        for key, what, computed in (
            ("priority", "integer value of priority", value),
            ("preemptionPolicy", "string value of PreemptionPolicy", policy),
        ):
            if spec.get(key) is not None and spec[key] != computed:
                raise st.forbidden(
                    f'pods "{name}" is forbidden: the {what} ({spec[key]}) must not be provided in pod '
                    f"spec; priority admission controller computed {computed} from the given "
                    "PriorityClass name",
                    plural="pods",
                    name=name,
                )
        spec["priority"] = value
        spec["preemptionPolicy"] = policy

    def prepare_update(
        self,
        resource: Resource,
        body: Any,
        *,
        name: str | None = None,
        namespace: str | None = None,
        subresource: str = "",
        dry_run: bool = False,
    ) -> Pending:
        """PUT: ``body``'s resourceVersion, when set, is a precondition."""
        info = self.type_of(resource)
        self._check_subresource(info, subresource, "update", name or "")
        obj = self._decode(info, resource.version, body)
        meta = _meta(obj)
        name = name or str(meta.get("name") or "")
        if meta.get("name") not in (None, "", name):
            raise st.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
            )
        if info.namespaced and meta.get("namespace") not in (None, "", namespace or ""):
            raise st.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        old = self._stored(info, namespace, name)
        want = meta.get("resourceVersion") or None
        if want is not None and parse_uint_error(str(want)) is not None:
            raise st.internal(str(parse_uint_error(str(want))))  # the etcd3 versioner's plain error
        if want is not None and want != old["metadata"]["resourceVersion"]:
            raise st.conflict(info.group, info.plural, name, st.STALE)
        if meta.get("uid") not in (None, "", old["metadata"].get("uid")):
            raise st.conflict(info.group, info.plural, name, _uid_mismatch(meta["uid"], old))
        return self._pending_update(
            info, resource.version, old, obj, subresource=subresource, dry_run=dry_run, precondition=want
        )

    def _pending_update(
        self,
        info: TypeInfo,
        version: str,
        old: Obj,
        obj: Obj,
        *,
        subresource: str,
        dry_run: bool,
        precondition: str | None,
    ) -> Pending:
        meta = _meta(obj)
        old_meta = old["metadata"]
        meta["name"] = old_meta["name"]
        if info.namespaced:
            meta["namespace"] = old_meta["namespace"]
        for key in _SYSTEM_META:
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if info.key == ("", "pods") and not subresource:
            admit_pod_update(old, obj)  # built-in admission on update (Priority, DefaultTolerationSeconds)
        return Pending(
            operation="UPDATE",
            info=info,
            version=version,
            namespace=old_meta.get("namespace", ""),
            name=old_meta["name"],
            subresource=subresource,
            object=obj,
            old=self.present(info, old, version),
            options={"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"},
            dry_run=dry_run,
            retryable=precondition is None,
            precondition_rv=precondition,
        )

    def prepare_patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        patch_type: Literal["merge", "json", "strategic"] = "merge",
        subresource: str = "",
        dry_run: bool = False,
    ) -> Pending:
        """PATCH: applied to the stored object; a resourceVersion the patch sets is a precondition."""
        info = self.type_of(resource)
        self._check_subresource(info, subresource, "patch", name)
        old = self._stored(info, namespace, name)
        current = self.present(info, old, resource.version)
        if patch_type == "merge":
            if not isinstance(patch, Mapping):
                raise st.bad_request("a merge patch must be a JSON object")
            patched = merge_patch(current, patch)
            explicit_rv = (
                isinstance(patch.get("metadata"), Mapping) and "resourceVersion" in patch["metadata"]
            )
        elif patch_type == "json":
            patched = apply_json_patch(current, patch)  # evanphx/json-patch's semantics and errors
            explicit_rv = _meta(patched).get("resourceVersion") != old["metadata"]["resourceVersion"]
        elif patch_type == "strategic" and info.crd_name is None:
            patched = strategic_merge(current, patch, info.group, info.plural)
            explicit_rv = isinstance(patch, Mapping) and (
                isinstance(patch.get("metadata"), Mapping) and "resourceVersion" in patch["metadata"]
            )
        elif patch_type == "strategic":
            # Custom resources have no Go types to take merge keys from (patch.go refuses them).
            raise st.unsupported_media_type(
                "the body of the request was in an unknown format - accepted media types include: "
                "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
            )
        else:
            raise st.unsupported_media_type(
                f"the patch type {patch_type!r} is not supported by the API double"
            )
        if not isinstance(patched, dict):
            raise st.bad_request("the patched object is not a JSON object")
        want = _meta(patched).get("resourceVersion") if explicit_rv else None
        if want and parse_uint_error(str(want)) is not None:
            raise st.internal(str(parse_uint_error(str(want))))  # the etcd3 versioner's plain error
        if want is not None and want != old["metadata"]["resourceVersion"]:
            raise st.conflict(info.group, info.plural, name, st.STALE)
        try:
            obj = self._decode(info, resource.version, patched)
        except KubeError as e:
            if not isinstance(e.__cause__, Undecodable):
                raise
            # patch.go: the patched object does not decode -> 422 on the field "patch".
            text = json.dumps(patched, separators=(",", ":"))
            why = f"patch: Invalid value: {json.dumps(text)}: {e.__cause__.why}"
            cause = Cause("FieldValueInvalid", "patch", why)
            raise st.invalid("", "", "", [cause]) from e
        pending = self._pending_update(
            info, resource.version, old, obj, subresource=subresource, dry_run=dry_run, precondition=want
        )
        pending.options = {"kind": "PatchOptions", "apiVersion": "meta.k8s.io/v1"}
        return pending

    def prepare_delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
        dry_run: bool = False,
    ) -> Pending:
        info = self.type_of(resource)
        old = self._stored(info, namespace, name)
        self._check_delete_preconditions(info, old, uid, resource_version)
        options: Obj = {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if uid or resource_version:
            options["preconditions"] = {
                k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v
            }
        return Pending(
            operation="DELETE",
            info=info,
            version=resource.version,
            namespace=old["metadata"].get("namespace", ""),
            name=name,
            subresource="",
            object=None,
            old=self.present(info, old, resource.version),
            options=options,
            dry_run=dry_run,
            retryable=not (uid or resource_version),
            precondition_rv=resource_version,
            precondition_uid=uid,
            grace_period_seconds=grace_period_seconds,
        )

    def _check_delete_preconditions(self, info: TypeInfo, old: Obj, uid: str | None, rv: str | None) -> None:
        # rest.BeforeDelete names the kind where other conflicts name the resource.
        meta = old["metadata"]
        if uid and uid != meta.get("uid"):
            why = (
                f"the UID in the precondition ({uid}) does not match the UID in record ({meta.get('uid')}). "
                "The object might have been deleted and then recreated"
            )
            raise st.conflict(info.group, info.kind, meta["name"], why)
        if rv and rv != meta.get("resourceVersion"):
            why = (
                f"the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in "
                f"record ({meta.get('resourceVersion')}). The object might have been modified"
            )
            raise st.conflict(info.group, info.kind, meta["name"], why)

    def prepare_bind(self, namespace: str, name: str, binding: Any, *, dry_run: bool = False) -> Pending:
        """POST pods/NAME/binding (pkg/registry/core/pod/storage/storage.go BindingREST.Create)."""
        info = self._types[("", "pods")]
        if not isinstance(binding, Mapping):
            raise st.bad_request("the body of the request must be a Binding object")
        obj: Obj = deep_copy(dict(binding))
        if obj.get("kind") not in (None, "", "Binding"):
            raise st.bad_request(
                f"the kind in the data ({obj.get('kind')}) does not match the expected kind (Binding)"
            )
        obj["apiVersion"], obj["kind"] = "v1", "Binding"
        meta = _meta(obj)
        if meta.get("name") not in (None, "", name):
            raise st.bad_request("name in URL does not match name in Binding object")
        meta["name"] = name
        meta["namespace"] = namespace
        if meta.get("annotations") is not None and not isinstance(meta["annotations"], dict):
            raise st.bad_request("metadata.annotations must be a map of string keys to string values")
        self._namespace_lifecycle(namespace, info, name)
        return Pending(
            operation="CREATE",
            info=info,
            version="v1",
            namespace=namespace,
            name=name,
            subresource="binding",
            object=obj,
            old=None,
            options={"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
            dry_run=dry_run,
            retryable=False,
            precondition_uid=meta.get("uid") or None,
        )

    def _check_subresource(self, info: TypeInfo, subresource: str, verb: str, name: str = "") -> None:
        if subresource and subresource not in info.subresources:
            if info.crd_name is not None:  # the CRD handler: an undeclared subresource is NotFound(name)
                raise st.not_found(info.group, info.plural, name)
            raise st.raise_status(
                st.make_status(404, "NotFound", "the server could not find the requested resource", name="")
            )
        if subresource not in ("", "status"):
            raise st.method_not_supported(info.group, f"{info.plural}/{subresource}", verb)

    # -- complete: after mutating admission --------------------------------------------------
    def complete(self, pending: Pending) -> None:
        """Name generation, PrepareForCreate/Update and validation (raises ``Invalid``)."""
        if pending.completed:
            return
        info, obj = pending.info, pending.object
        if pending.operation == "DELETE" or obj is None:
            pending.completed = True
            return
        if pending.subresource == "binding":
            target: Obj = obj["target"] if isinstance(obj.get("target"), dict) else {}
            causes: _Causes = []
            if target.get("kind") not in (None, "", "Node"):
                kind = target.get("kind")
                msg = f'target.kind: Unsupported value: "{kind}": supported values: "Node", "<empty>"'
                causes.append(Cause("FieldValueNotSupported", "target.kind", msg))
            if not target.get("name"):
                causes.append(Cause("FieldValueRequired", "target.name", "target.name: Required value"))
            if causes:
                # BindingREST.Create returns errs.ToAggregate(), a plain error: 500 without a reason.
                texts = [c.message for c in causes]
                raise st.internal(texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]")
            pending.completed = True
            return
        # Mutating webhooks may have changed anything: decode again (prune + default).
        obj = pending.object = self._redecode(info, pending.version, obj)
        meta = _meta(obj)
        if pending.operation == "CREATE":
            self._prepare_for_create(pending, obj)
        else:
            assert pending.old is not None
            old_stored = self._stored(info, pending.namespace, pending.name)
            self._prepare_for_update(pending, obj, old_stored)
        causes = self._validate_meta(info, obj)
        if info.key == ("", "pods"):
            try:
                causes += validate_pod(obj)
                if pending.operation == "UPDATE" and pending.old is not None:
                    causes += validate_pod_update(pending.old, obj)
            except QuantityError as e:
                raise st.bad_request(str(e)) from e
        if info.group == "admissionregistration.k8s.io":
            causes += default_and_validate(obj, mutating=info.plural.startswith("mutating"))
        if info.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            causes += crd_problems(obj)
            spec = obj.get("spec") or {}
            group, plural = spec.get("group"), (spec.get("names") or {}).get("plural")
            existing = self._types.get((str(group), str(plural)))
            if existing is not None and existing.crd_name is None:
                why = f'Invalid value: "{group}": conflicts with a built-in resource'
                causes.append(Cause("FieldValueInvalid", "spec.group", f"spec.group: {why}"))
        schema = info.schemas.get(pending.version)
        if schema is not None:
            causes += schema.validate(self.present(info, obj, pending.version))
        if causes:
            raise st.invalid(
                info.group, info.kind, str(meta.get("name") or meta.get("generateName") or ""), causes
            )
        pending.name = meta["name"]
        pending.completed = True

    def _redecode(self, info: TypeInfo, version: str, obj: Obj) -> Obj:
        out: Obj = deep_copy(obj)
        schema = info.schemas.get(version)
        if schema is not None:
            schema.prune(out)
            schema.apply_defaults(out)
        try:
            decode_defaults(info.key, out)
        except Undecodable as e:
            raise st.bad_request(str(e)) from e
        return out

    def _prepare_for_create(self, pending: Pending, obj: Obj) -> None:
        info, meta = pending.info, _meta(obj)
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                cause = Cause(
                    "FieldValueRequired",
                    "metadata.name",
                    "metadata.name: Required value: name or generateName is required",
                )
                raise st.invalid(info.group, info.kind, "", [cause])
            # names.SimpleNameGenerator: at most 58 characters of the prefix, then 5 random ones.
            meta["name"] = str(prefix)[:58] + "".join(self._random.choice(_NAME_CHARS) for _ in range(5))
        # rest.BeforeCreate (FillObjectMetaSystemFields): validating webhooks already see these.
        meta["uid"] = str(uuid.UUID(int=self._random.getrandbits(128), version=4))
        meta["creationTimestamp"] = format_time(self.clock())
        if info.key == ("", "pods"):
            obj["status"] = initial_status(obj)
        elif info.status_on_create == "drop":
            obj.pop("status", None)
        if info.key == ("", "namespaces"):
            obj.setdefault("spec", {})["finalizers"] = ["kubernetes"]
            obj["status"] = {"phase": "Active"}
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]

    def _prepare_for_update(self, pending: Pending, obj: Obj, old: Obj) -> None:
        info, meta = pending.info, _meta(obj)
        if pending.subresource == "status":
            # The status strategies: everything but status comes from the stored object.
            new = deep_copy(old)
            if "status" in obj:
                new["status"] = obj["status"]
            else:
                new.pop("status", None)
            if info.key in (("", "pods"), ("", "nodes")):
                # Pod and node status strategies keep only the spec (and a pod's ownerReferences):
                # labels and annotations may change through the status subresource.
                new["metadata"] = meta
                owners = old["metadata"].get("ownerReferences")
                if info.key == ("", "pods"):
                    meta.pop("ownerReferences", None)
                    if owners is not None:
                        meta["ownerReferences"] = owners
            obj.clear()
            obj.update(new)
            meta = _meta(obj)
        elif info.has_status:
            if "status" in old:
                obj["status"] = deep_copy(old["status"])
            else:
                obj.pop("status", None)
        if info.key == ("", "namespaces"):
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
            obj["spec"] = deep_copy(old.get("spec") or {})
        old_fin = set(old["metadata"].get("finalizers") or [])
        new_fin = set(meta.get("finalizers") or [])
        if old["metadata"].get("deletionTimestamp") and new_fin - old_fin:
            cause = Cause(
                "FieldValueForbidden",
                "metadata.finalizers",
                "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being "
                f"deleted, found new finalizers {go_string_slice(sorted(new_fin - old_fin))}",
            )
            # Reported twice, as the API server does: the common metadata checks of BeforeUpdate
            # and the kind's own ValidateUpdate both run ValidateObjectMetaUpdate.
            raise st.invalid(info.group, info.kind, meta["name"], [cause, cause])

    def _validate_meta(self, info: TypeInfo, obj: Obj) -> _Causes:
        meta = _meta(obj)
        name = str(meta.get("name") or "")
        causes: _Causes = []
        if info.key in (("", "namespaces"), ("", "serviceaccounts")):
            pattern, what, limit = _DNS1123_LABEL, "RFC 1123 label", 63
            hint = "'my-name',  or '123-abc'"
        else:
            pattern, what, limit = _DNS1123_SUBDOMAIN, "RFC 1123 subdomain", 253
            hint = "'example.com'"
        if info.group == "rbac.authorization.k8s.io":
            pattern = "[^/%]+"  # RBAC names are path segments (ValidateRBACName)
        prefix = meta.get("generateName")
        legacy = info.api_key == ("", "events")  # core/v1 Events skip ObjectMeta validation
        if isinstance(prefix, str) and prefix and info.group != "rbac.authorization.k8s.io" and not legacy:
            # ValidateObjectMeta checks the prefix first, a trailing dash masked (maskTrailingDash
            # drops two characters for it, as the Go code does).
            masked = prefix[:-2] + "a" if prefix.endswith("-") else prefix
            if len(masked) > limit or not re.fullmatch(pattern, masked):
                msg = (
                    f'metadata.generateName: Invalid value: "{prefix}": a lowercase {what} must consist of '
                    "lower case alphanumeric characters, '-' or '.', and must start and end with an "
                    f"alphanumeric character (e.g. {hint}, regex used for validation is '{pattern}')"
                )
                causes.append(Cause("FieldValueInvalid", "metadata.generateName", msg))
        if len(name) > limit or not re.fullmatch(pattern, name):
            msg = (
                f'metadata.name: Invalid value: "{name}": a lowercase {what} must consist of lower case '
                "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character "
                f"(e.g. {hint}, regex used for validation is '{pattern}')"
            )
            causes.append(Cause("FieldValueInvalid", "metadata.name", msg))
        for key, value in (meta.get("labels") or {}).items():
            try:
                LabelSelector.parse(f"{key}={value}") if value else LabelSelector.parse(key)
            except SelectorError:
                msg = f'metadata.labels: Invalid value: "{key}={value}": not a valid label key/value'
                causes.append(Cause("FieldValueInvalid", "metadata.labels", msg))
        return causes

    # -- commit ---------------------------------------------------------------------------------
    def commit(self, pending: Pending) -> Obj:
        """Persist (unless dry run) and emit events; returns what the client receives.

        For pods/binding the answer is a Status Success (code 201). Raises ``RetryWrite`` when an
        unconditional write lost a race against another write since ``prepare_*``."""
        self.expire_events()
        self.complete(pending)
        info = pending.info
        if pending.subresource == "binding":
            return self._commit_bind(pending)
        storage = info.schemas.get(info.versions[0])
        if pending.object is not None and storage is not None and pending.version != info.versions[0]:
            storage.prune(pending.object)  # stored in the storage version: its schema prunes
        objects = self._objects[info.key]
        key = (pending.namespace if info.namespaced else "", pending.name)
        current = objects.get(key)
        if pending.operation == "CREATE":
            obj = pending.object
            assert obj is not None
            if current is not None:
                raise st.already_exists(info.group, info.plural, pending.name)
            if info.namespaced:
                self._namespace_lifecycle(pending.namespace, info, pending.name)
            meta = _meta(obj)  # uid and creationTimestamp: set by complete() (_prepare_for_create)
            if info.crd_name is not None or info.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
                meta["generation"] = 1  # custom resources and CRDs count spec changes
            if pending.dry_run:
                meta.pop("resourceVersion", None)  # nothing was stored: no version to show
                return self.present(info, obj, pending.version)
            meta["resourceVersion"] = self._next_rv()
            objects[key] = obj
            self._emit(info, "ADDED", obj, None)
            if info.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
                self._crd_changed(obj, pending.warnings)
            elif info.key == ("", "namespaces"):
                self._default_service_account(pending.name)
                self._publish_root_ca_in(pending.name)
            return self.present(info, obj, pending.version)
        if current is None:
            raise st.not_found(info.group, info.plural, pending.name)
        assert pending.old is not None
        if current["metadata"]["resourceVersion"] != pending.old["metadata"]["resourceVersion"]:
            if pending.retryable:
                raise RetryWrite(pending.name)
            raise st.conflict(info.group, info.plural, pending.name, st.STALE)
        if pending.operation == "DELETE":
            return self._commit_delete(pending, current)
        return self._commit_update(pending, current)

    def _commit_update(self, pending: Pending, current: Obj) -> Obj:
        info, obj = pending.info, pending.object
        assert obj is not None
        meta = _meta(obj)
        meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        if _without_rv(obj) == _without_rv(current):
            return self.present(info, current, pending.version)  # a no-op write changes nothing
        if "generation" in current["metadata"] and _spec_of(obj) != _spec_of(current):
            meta["generation"] = int(current["metadata"]["generation"]) + 1
        if meta.get("deletionTimestamp") and not meta.get("finalizers") and _deletable(info, obj):
            if pending.dry_run:
                return self.present(info, obj, pending.version)
            return self._remove(info, obj, current)
        if pending.dry_run:
            return self.present(info, obj, pending.version)
        meta["resourceVersion"] = self._next_rv()
        self._objects[info.key][_key_of(info, obj)] = obj
        self._emit(info, "MODIFIED", obj, current)
        if info.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._crd_changed(obj, pending.warnings)
        return self.present(info, obj, pending.version)

    def _commit_delete(self, pending: Pending, current: Obj) -> Obj:
        info = pending.info
        self._check_delete_preconditions(info, current, pending.precondition_uid, pending.precondition_rv)
        meta = current["metadata"]
        grace = graceful_seconds(current, pending.grace_period_seconds) if info.key == ("", "pods") else 0
        if grace == 0 and not meta.get("finalizers"):
            final = current
            if info.key == ("", "pods"):
                # BeforeDelete still records the (zero) grace period on the object it deletes.
                final = deep_copy(current)
                _meta(final).setdefault("deletionTimestamp", format_time(self.clock()))
                _meta(final)["deletionGracePeriodSeconds"] = 0
            if pending.dry_run:
                return self.present(info, final, pending.version)
            return self._remove(info, final, current)
        # The object stays, Terminating: a bound pod's grace period, or finalizers to be removed.
        old_grace = meta.get("deletionGracePeriodSeconds")
        if meta.get("deletionTimestamp") and old_grace is not None and grace >= old_grace:
            return self.present(info, current, pending.version)  # only shortening changes anything
        obj = deep_copy(current)
        _meta(obj)["deletionTimestamp"] = format_time(self.clock() + timedelta(seconds=grace))
        _meta(obj)["deletionGracePeriodSeconds"] = grace
        if "generation" in meta:
            _meta(obj)["generation"] = int(meta["generation"]) + 1
        if pending.dry_run:
            return self.present(info, obj, pending.version)
        _meta(obj)["resourceVersion"] = self._next_rv()
        self._objects[info.key][_key_of(info, obj)] = obj
        self._emit(info, "MODIFIED", obj, current)
        return self.present(info, obj, pending.version)

    def _remove(self, info: TypeInfo, final: Obj, current: Obj) -> Obj:
        gone = deep_copy(final)
        _meta(gone)["resourceVersion"] = self._next_rv()
        del self._objects[info.key][_key_of(info, current)]
        self._emit(info, "DELETED", gone, current)
        if info.key == ("", "namespaces"):
            self._empty_namespace(gone["metadata"]["name"])
        elif info.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._drop_crd_type(gone)
        return self.present(info, gone, info.versions[0])

    def _commit_bind(self, pending: Pending) -> Obj:
        pods = self._objects[("", "pods")]
        info = pending.info
        current = pods.get((pending.namespace, pending.name))
        if current is None:
            raise st.not_found("", "pods", pending.name)
        binding = pending.object or {}
        uid = pending.precondition_uid
        if uid and uid != current["metadata"].get("uid"):
            raise st.conflict("", "pods", pending.name, _uid_mismatch(uid, current))
        if current["metadata"].get("deletionTimestamp"):
            # assignPod turns any plain error of the update into a Conflict on pods/binding.
            why = f"pod {pending.name} is being deleted, cannot be assigned to a host"
            raise st.conflict("", "pods/binding", pending.name, why)
        node = (current.get("spec") or {}).get("nodeName")
        if node:
            raise st.conflict(
                "", "pods/binding", pending.name, f'pod {pending.name} is already assigned to node "{node}"'
            )
        if pending.dry_run:
            return st.success(201)
        pod = deep_copy(current)
        pod.setdefault("spec", {})["nodeName"] = binding["target"]["name"]
        annotations = (binding.get("metadata") or {}).get("annotations") or {}
        if annotations:
            _meta(pod).setdefault("annotations", {}).update({str(k): str(v) for k, v in annotations.items()})
        status = pod.setdefault("status", {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": format_time(self.clock()),
            }
        )
        status["conditions"] = conditions
        _meta(pod)["resourceVersion"] = self._next_rv()
        pods[(pending.namespace, pending.name)] = pod
        self._emit(info, "MODIFIED", pod, current)
        return st.success(201)

    # -- CRDs and namespaces ------------------------------------------------------------------
    def _crd_changed(self, crd: Obj, warnings: _Strings) -> None:
        """Serve (or re-serve) the CRD's resource and mark it Established, as its controller does."""
        info = type_from_crd(crd)
        old = self._types.get(info.api_key)
        self._register(info)
        cel = sum(s.cel_rules for s in info.schemas.values())
        if cel:
            warnings.append(
                f"the API double does not evaluate x-kubernetes-validations: {cel} CEL rule(s) of "
                f"{crd['metadata']['name']} are ignored"
            )
        if old is not None:
            self._redefault(info)
        status = crd.get("status") or {}
        if any(c.get("type") == "Established" for c in status.get("conditions") or []):
            return
        now = format_time(self.clock())
        cond = [
            {"type": t, "status": "True", "reason": r, "message": m, "lastTransitionTime": now}
            for t, r, m in (
                ("NamesAccepted", "NoConflicts", "no conflicts found"),
                ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
            )
        ]
        updated = deep_copy(crd)
        updated["status"] = {
            "conditions": cond,
            "acceptedNames": deep_copy(crd["spec"]["names"]),
            "storedVersions": [v["name"] for v in crd["spec"]["versions"] if v.get("storage")],
        }
        crds = self._types[("apiextensions.k8s.io", "customresourcedefinitions")]
        _meta(updated)["resourceVersion"] = self._next_rv()
        self._objects[crds.key][("", crd["metadata"]["name"])] = updated
        self._emit(crds, "MODIFIED", updated, crd)

    def _redefault(self, info: TypeInfo) -> None:
        """A changed schema's defaults show on read, as the API server defaults at decode time."""
        schema = info.schemas.get(info.versions[0])
        if schema is None:
            return
        objects = self._objects[info.key]
        for key, obj in list(objects.items()):
            fresh = deep_copy(obj)
            schema.apply_defaults(fresh)
            if fresh != obj:
                objects[key] = fresh

    def _drop_crd_type(self, crd: Obj) -> None:
        spec = crd.get("spec") or {}
        key = (spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))
        info = self._types.get(key)
        if info is None or info.crd_name is None:
            return
        for okey, obj in sorted(self._objects[info.key].items()):
            gone = deep_copy(obj)
            _meta(gone)["resourceVersion"] = self._next_rv()
            del self._objects[info.key][okey]
            self._emit(info, "DELETED", gone, obj)
        for w in list(self._watchers[info.key]):
            w.close()
        del self._types[key]
        del self._objects[info.key]
        del self._history[info.key]
        del self._watchers[info.key]

    def _empty_namespace(self, ns: str) -> None:
        """The namespace controller's work, done at once: everything in it goes."""
        seen: set[tuple[str, str]] = set()
        for info in list(self._types.values()):
            if not info.namespaced or info.key in seen:
                continue
            seen.add(info.key)
            for okey, obj in sorted(self._objects[info.key].items()):
                if okey[0] == ns:
                    gone = deep_copy(obj)
                    _meta(gone)["resourceVersion"] = self._next_rv()
                    del self._objects[info.key][okey]
                    self._emit(info, "DELETED", gone, obj)

    # -- synchronous convenience (no webhooks) -------------------------------------------------
    def _run(self, prepare: Callable[[], Pending]) -> tuple[Obj, _Strings]:
        while True:
            pending = prepare()
            try:
                return self.commit(pending), pending.warnings
            except RetryWrite:  # cannot happen without awaits in between; kept for symmetry
                continue

    def create(
        self, resource: Resource, obj: Any, *, namespace: str | None = None, dry_run: bool = False
    ) -> Obj:
        return self._run(lambda: self.prepare_create(resource, obj, namespace=namespace, dry_run=dry_run))[0]

    def replace(
        self,
        resource: Resource,
        obj: Any,
        *,
        name: str | None = None,
        namespace: str | None = None,
        subresource: str = "",
        dry_run: bool = False,
    ) -> Obj:
        if namespace is None and isinstance(obj, Mapping):
            namespace = (obj.get("metadata") or {}).get("namespace")
        return self._run(
            lambda: self.prepare_update(
                resource, obj, name=name, namespace=namespace, subresource=subresource, dry_run=dry_run
            )
        )[0]

    def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        patch_type: Literal["merge", "json", "strategic"] = "merge",
        subresource: str = "",
        dry_run: bool = False,
    ) -> Obj:
        return self._run(
            lambda: self.prepare_patch(
                resource,
                name,
                patch,
                namespace=namespace,
                patch_type=patch_type,
                subresource=subresource,
                dry_run=dry_run,
            )
        )[0]

    def delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        """DELETE; returns the object as it stands afterwards (Terminating, or the final state)."""
        return self._run(
            lambda: self.prepare_delete(
                resource,
                name,
                namespace=namespace,
                grace_period_seconds=grace_period_seconds,
                uid=uid,
                resource_version=resource_version,
                dry_run=dry_run,
            )
        )[0]

    def bind(self, namespace: str, name: str, binding: Any, *, dry_run: bool = False) -> Obj:
        return self._run(lambda: self.prepare_bind(namespace, name, binding, dry_run=dry_run))[0]


# -- helpers ----------------------------------------------------------------------------------
def _key_of(info: TypeInfo, obj: Obj) -> tuple[str, str]:
    meta = obj["metadata"]
    return (meta.get("namespace", "") if info.namespaced else "", meta["name"])


def _without_rv(obj: Obj) -> Obj:
    out = dict(obj)
    out["metadata"] = {
        k: v for k, v in obj["metadata"].items() if k not in ("resourceVersion", "managedFields")
    }
    return out


def _spec_of(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _deletable(info: TypeInfo, obj: Obj) -> bool:
    """A Terminating object whose last finalizer went: gone now, unless a pod still has grace."""
    if info.key != ("", "pods"):
        return True
    return not _meta(obj).get("deletionGracePeriodSeconds")


def _uid_mismatch(uid: str, obj: Obj) -> str:
    return (
        f"Precondition failed: UID in precondition: {uid}, UID in object meta: {obj['metadata'].get('uid')}"
    )


def _parse_rv(text: str) -> int:
    """The watch cache's ParseResourceVersion: an error it returns as is (500, no reason)."""
    problem = parse_uint_error(text)
    if problem is not None:
        raise st.internal(f'resourceVersion: Invalid value: "{text}": {problem}')
    return int(text)


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
