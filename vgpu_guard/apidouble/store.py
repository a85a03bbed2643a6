"""The API double's store: kube-apiserver's object semantics, in memory, without HTTP.

Everything our product can observe of an API server's storage layer lives here, so the HTTP
server the tests run (``tests/apidouble_support/http/server.py``) and the in-process adapter
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
  ``prepare.*`` (decode, defaults, built-in admission: NamespaceLifecycle, Priority,
  ServiceAccount) -> mutating webhooks -> ``complete`` (prune/default again, name generation,
  PrepareForCreate/Update, validation) -> validating webhooks -> ``commit`` (preconditions,
  persistence, events). The synchronous ``create``/``replace``/``patch``/``delete``/``bind``
  methods run the three steps without webhooks.
- Time comes from an injected clock (deletion timestamps, conditions, event expiry); randomness
  (uids, generateName) from a seedable ``random.Random``.
- Events expire ``event_ttl`` (kube-apiserver's ``--event-ttl``, default 1 h) after their last
  write, as the etcd lease kube-apiserver attaches to every Event write does: the expired Event
  is deleted (watchers see DELETED) on the store's next access after that moment.

``Store`` is the facade; each concept is its own class over one shared ``ObjectTable``
(``_table``: objects, resourceVersions, history, watchers, types): ``Reads`` (GET, LIST, WATCH;
``_watches.Watch``), ``Preparer`` (``_prepare``: decoding in ``_decoding``, built-in admission in
``_builtin_admission``), ``Completer`` (``_complete``), ``Committer`` (``_commit``) and
``Controllers`` (``_controllers``: namespaces and CRDs, done at once).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from vgpu_guard.apidouble._builtin_admission import BuiltinAdmission
from vgpu_guard.apidouble._commit import Committer
from vgpu_guard.apidouble._complete import Completer
from vgpu_guard.apidouble._controllers import ROOT_CA_CONFIG_MAP, Controllers
from vgpu_guard.apidouble._pending import Operation, Pending, RetryWrite
from vgpu_guard.apidouble._prepare import PatchType, Preparer
from vgpu_guard.apidouble._reads import Reads
from vgpu_guard.apidouble._table import ObjectTable
from vgpu_guard.apidouble._types import BUILTIN_TYPES, TypeInfo
from vgpu_guard.apidouble._values import Obj, deep_copy, format_time, merge_patch
from vgpu_guard.apidouble._watches import Watch
from vgpu_guard.kube.client import ObjectList
from vgpu_guard.kube.resources import Resource

__all__ = [
    "DEFAULT_NAMESPACES",
    "ROOT_CA_CONFIG_MAP",
    "Operation",
    "Pending",
    "RetryWrite",
    "Store",
    "Watch",
    "deep_copy",
    "format_time",
    "merge_patch",
]

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_Strings = list[str]  # aliases: inside Store, `list` is the LIST verb
_Types = list[TypeInfo]


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
        table = self._table = ObjectTable(
            clock=self.clock, watch_window=watch_window, event_ttl=event_ttl, seed=seed
        )
        admission = BuiltinAdmission(table)
        completer = self._completer = Completer(table)
        self._controllers = Controllers(table, self.create)
        self._reads = Reads(table)
        # The write's first step, one method per verb (``store.prepare.create(...)``): ``_prepare``.
        self.prepare = Preparer(table, admission)
        self._committer = Committer(table, completer, admission, self._controllers)
        for info in BUILTIN_TYPES:
            table.register(info)
        for ns in namespaces:
            self.create(table.types[("", "namespaces")].resource(), {"metadata": {"name": ns}})

    # -- types and presentation ---------------------------------------------------------------
    @property
    def resource_version(self) -> int:
        """The newest resourceVersion handed out (the etcd revision)."""
        return self._table.rv

    def last_resource_version(self, info: TypeInfo) -> int:
        """The resourceVersion of the newest change to ``info``'s objects (its watch cache's)."""
        return self._table.last_resource_version(info)

    def types(self) -> _Types:
        """Every served resource type (discovery)."""
        return list(self._table.types.values())

    def resolve(self, group: str, version: str, plural: str) -> TypeInfo | None:
        """The type served at ``group/version/plural``, or None (the server answers 404)."""
        return self._table.resolve(group, version, plural)

    def type_of(self, resource: Resource) -> TypeInfo:
        return self._table.type_of(resource)

    def present(self, info: TypeInfo, stored: Obj, version: str, *, current: bool = False) -> Obj:
        """A stored object as the client asked for it: a copy, in the requested version/API."""
        return self._table.present(info, stored, version, current=current)

    def to_storage(self, info: TypeInfo, obj: Obj) -> Obj:
        """The inverse of ``present`` for the API shape (admission patches come back this way)."""
        return self._table.to_storage(info, obj)

    # -- reads --------------------------------------------------------------------------------
    def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Obj:
        return self._reads.get(resource, name, namespace=namespace)

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
        """LIST as kube-apiserver 1.20 serves it (``_reads``, ``_listing``)."""
        return self._reads.list(
            resource,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            limit=limit,
            continue_token=continue_token,
            resource_version=resource_version,
            resource_version_match=resource_version_match,
        )

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
        return self._reads.watch(
            resource,
            resource_version=resource_version,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
        )

    def expire_events(self) -> int:
        """Delete every Event whose TTL has run out (what etcd's lease expiry does); how many."""
        return self._table.expire_events()

    def publish_root_ca(self, ca_pem: str) -> None:
        """kube-controller-manager's root-ca-cert-publisher: ``kube-root-ca.crt`` (key ``ca.crt``) in
        every namespace, now and in each new one. Only a double served over HTTPS has a CA to publish."""
        self._controllers.publish_root_ca(ca_pem)

    # -- the write pipeline: prepare -> (mutating) -> complete -> (validating) -> commit -------
    def complete(self, pending: Pending) -> None:
        """Name generation, PrepareForCreate/Update and validation (raises ``Invalid``)."""
        self._completer.complete(pending)

    def commit(self, pending: Pending) -> Obj:
        """Persist (unless dry run) and emit events; returns what the client receives.

        For a bind the answer is a Status Success (code 201). Raises ``RetryWrite`` when an
        unconditional write lost a race against another write since ``prepare.*``."""
        return self._committer.commit(pending)

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
        return self._run(lambda: self.prepare.create(resource, obj, namespace=namespace, dry_run=dry_run))[0]

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
            lambda: self.prepare.update(
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
        patch_type: PatchType = "merge",
        subresource: str = "",
        dry_run: bool = False,
    ) -> Obj:
        return self._run(
            lambda: self.prepare.patch(
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
            lambda: self.prepare.delete(
                resource,
                name,
                namespace=namespace,
                grace_period_seconds=grace_period_seconds,
                uid=uid,
                resource_version=resource_version,
                dry_run=dry_run,
            )
        )[0]

    def bind(self, namespace: str, name: str | None, binding: Any, *, dry_run: bool = False) -> Obj:
        return self._run(lambda: self.prepare.bind(namespace, name, binding, dry_run=dry_run))[0]
