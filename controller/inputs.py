"""What an allocation pass decides on, and where it comes from: ``CachedInputs``.

Informers (list once, watch, relist only on 410) for pods, and the shared ``ClusterCache`` for
nodes, ledgers, queues and PodGroups: no request on a pass's read path. ``serve`` and ``simulate``
read the same way (``simulate`` over the in-memory API server's watches, waiting before each read
until they have delivered every change: ``before_read``). The pod informer may be shared with the
webhook when both run in one process (``serve all``: one watch of pods, issue 45).

Claims, volumes and namespaces (``side_objects``) are read only for pods that need them (a claim,
affinity terms that count other namespaces' pods): their informers start the first time a pass
needs them and the cache is read after (one namespace LIST per pass was most of a busy
controller's reads once any pod had anti-affinity).

A cache can lag the server, so the cached source keeps client-go's *mutation cache* rules for our
own writes: a ledger we just wrote is used until the informer delivers that resourceVersion or a
newer one, and a pod we just bound counts as bound (and its node as busy with the plugin's
handshake) until the informer shows it bound. Both expire after ``OVERLAY_TTL_SECONDS`` so a lost
watch event can never pin a stale object. What the cache cannot promise (that a pod absent from it
is gone) is checked by the controller with a GET before it releases anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from vgpu_guard.controller.pod_projection import project_pod
from vgpu_guard.engine.annotations import BIND_PHASE, VGPU_IDS
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.ledger import cached_ledger
from vgpu_guard.engine.objects import Obj, version_of
from vgpu_guard.kube.backoff import Backoff
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.errors import KubeError
from vgpu_guard.kube.informer import Handler, Informer, InformerEvent, Key, key_of
from vgpu_guard.kube.resources import (
    NAMESPACES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    PODS,
    Resource,
)
from vgpu_guard.kube.sharing import SharedParts
from vgpu_guard.kube.view_cache import ClusterCache

__all__ = ["CachedInputs", "InputSource", "PassInputs", "pod_informer"]

K = TypeVar("K")
OVERLAY_TTL_SECONDS = 30.0


# Seconds a pass waits for a side cache's first LIST (claims, volumes, namespaces) before it fails.
# Well inside the Lease (15 s), which is renewed between passes: a cache that cannot sync (RBAC
# missing) must not cost the leader its Lease. The LIST goes on in the background; a pass that gave
# up is retried with backoff and finds the cache synced.
SIDE_SYNC_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class PassInputs:
    """One consistent-enough read: raw objects plus the parsed view of nodes, queues, PodGroups."""

    ledgers: Mapping[str, Obj]  # by name (the node's)
    pods: Mapping[Key, Obj]  # by (namespace, name)
    nodes: Mapping[str, Obj]  # raw Node objects by name (for Events)
    view: ClusterView
    # Versions of the node, Queue and PodGroup caches (None: unknown): equal generations mean
    # those objects did not change, so an unplaceable pod's diagnosis can be reused.
    generation: tuple[int, ...] | None = None
    # The pod keys and ledger names whose objects may differ from the last read (informer events
    # since then); None: unknown, compare everything (a cache's first read).
    changed_pods: set[Key] | None = None
    changed_ledgers: set[str] | None = None


@dataclass(frozen=True)
class SideObjects:
    """What only some pods need read: claims and volumes (volume filters), namespaces (their labels,
    for affinity terms with a namespaceSelector). Empty where not asked for."""

    claims: Sequence[Obj] = ()
    volumes: Sequence[Obj] = ()
    namespaces: Sequence[Obj] = ()
    # Equal versions mean equal objects (None: unknown).
    version: tuple[int, ...] | None = None


class InputSource(Protocol):
    """Where a pass reads from; told about our own writes so the next read includes them."""

    async def read(self, config: GuardConfig) -> PassInputs: ...

    async def side_objects(self, *, volumes: bool, namespaces: bool) -> SideObjects: ...

    def wrote_ledger(self, obj: Obj) -> None: ...

    def bound(self, pod: Mapping[str, Any], node: str, annotations: Mapping[str, str]) -> None: ...


class Overlaid(Mapping[K, Obj]):
    """``base`` with ``overlay``'s objects in place of its own or beside them, without a copy of
    ``base`` (a pass must not copy 100,000 pods or 5,000 ledgers to lay a few of ours over them)."""

    def __init__(self, base: Mapping[K, Obj], overlay: Mapping[K, Obj]) -> None:
        self._base = base
        self._overlay = overlay

    def __getitem__(self, key: K) -> Obj:
        found = self._overlay.get(key)
        return found if found is not None else self._base[key]

    def __contains__(self, key: object) -> bool:
        return key in self._overlay or key in self._base

    def __iter__(self) -> Iterator[K]:
        yield from self._base
        yield from (k for k in self._overlay if k not in self._base)

    def __len__(self) -> int:
        return len(self._base) + sum(1 for k in self._overlay if k not in self._base)


class ByName(Mapping[str, Obj]):
    """A cluster-scoped cache's objects by name, read through (no copy)."""

    def __init__(self, items: Mapping[Key, Obj]) -> None:
        self._items = items

    def __getitem__(self, name: str) -> Obj:
        return self._items[("", name)]

    def __contains__(self, name: object) -> bool:
        return ("", name) in self._items

    def __iter__(self) -> Iterator[str]:
        return (name for _, name in self._items)

    def __len__(self) -> int:
        return len(self._items)


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _ready(node: Mapping[str, Any]) -> object:
    conditions = _get(node, "status", "conditions")
    if not isinstance(conditions, list):
        return None
    ready = [c.get("status") for c in conditions if isinstance(c, Mapping) and c.get("type") == "Ready"]
    return ready[0] if ready else None


def node_change_matters(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Anything a placement reads: labels, annotations (GPU registration), taints, cordon,
    allocatable, Ready; not the kubelet's heartbeat timestamps."""
    return (
        _get(old, "metadata", "labels") != _get(new, "metadata", "labels")
        or _get(old, "metadata", "annotations") != _get(new, "metadata", "annotations")
        or _get(old, "spec") != _get(new, "spec")
        or _get(old, "status", "allocatable") != _get(new, "status", "allocatable")
        or _ready(old) != _ready(new)
    )


def pod_change_matters(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Binding, ending, deletion, a changed assignment or a failed plugin handshake; for a pending
    pod any change but its status conditions (our own PodScheduled reports)."""
    if (
        _get(old, "spec", "nodeName") != _get(new, "spec", "nodeName")
        or _get(old, "status", "phase") != _get(new, "status", "phase")
        or _get(old, "metadata", "deletionTimestamp") != _get(new, "metadata", "deletionTimestamp")
    ):
        return True
    old_notes = _get(old, "metadata", "annotations") or {}
    new_notes = _get(new, "metadata", "annotations") or {}
    if old_notes.get(VGPU_IDS) != new_notes.get(VGPU_IDS):
        return True
    if new_notes.get(BIND_PHASE) == "failed" and old_notes.get(BIND_PHASE) != "failed":
        return True
    if _get(new, "spec", "nodeName"):
        return False
    return (
        old_notes != new_notes
        or _get(old, "metadata", "labels") != _get(new, "metadata", "labels")
        or _get(old, "spec") != _get(new, "spec")
    )


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("name") or "") if isinstance(meta, Mapping) else ""


def _uid(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("uid") or "") if isinstance(meta, Mapping) else ""


def pod_informer(
    client: ClusterClient,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    watch_timeout_seconds: int = 300,
) -> Informer:
    """The controller's watch of every pod, projected (controller/pod_projection.py); the webhook's
    cache of unbound pods reads it too when both run in one process."""
    return Informer(
        client,
        PODS,
        backoff=Backoff(),
        sleep=sleep,
        watch_timeout_seconds=watch_timeout_seconds,
        transform=functools.partial(project_pod, share=SharedParts()),
    )


class CachedInputs:
    """Pods from their informer, the rest from ``ClusterCache``; ``changed`` wakes the loop.

    ``cluster`` and ``pods``, when given, are the process's, run by their owner (``serve``);
    otherwise this object makes and runs its own. ``before_read`` is awaited at the start of every
    read (``simulate``: until the in-memory watches have delivered every change)."""

    def __init__(
        self,
        client: ClusterClient,
        *,
        cluster: ClusterCache | None = None,
        pods: Informer | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        watch_timeout_seconds: int = 300,
        before_read: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._own_cluster = cluster is None
        self.cluster = cluster or ClusterCache(
            client, sleep=sleep, watch_timeout_seconds=watch_timeout_seconds
        )
        self._own_pods = pods is None
        self.pods = (
            pods
            if pods is not None
            else pod_informer(client, sleep=sleep, watch_timeout_seconds=watch_timeout_seconds)
        )
        self._clock = clock
        self._before_read = before_read

        def side(resource: Resource) -> Informer:
            return Informer(
                client, resource, backoff=Backoff(), sleep=sleep, watch_timeout_seconds=watch_timeout_seconds
            )

        # Started by the first pass that needs them (``side_objects``), not before: a cluster whose
        # pods never use claims or namespace selectors never watches them.
        self.claims = side(PERSISTENT_VOLUME_CLAIMS)
        self.volumes = side(PERSISTENT_VOLUMES)
        self.namespaces = side(NAMESPACES)
        self._side_tasks: dict[str, asyncio.Task[None]] = {}
        self.changed = asyncio.Event()
        # Moves when a node, Queue or PodGroup changed in a way a decision can see (not heartbeats).
        self.generation = 0
        # What we listen to, so that a stop detaches us from informers we share (``run``).
        self._listening: list[tuple[Informer, Handler]] = []
        self.listen(self.pods, self._on_pod)
        self.listen(self.cluster.ledgers, self._on_ledger)
        self.listen(self.cluster.nodes, self._on_node)
        self.listen(self.cluster.queues, self._on_other)
        self.listen(self.cluster.podgroups, self._on_other)
        for informer in (self.claims, self.volumes, self.namespaces):
            informer.add_handler(self._on_other)  # a claim bound, a namespace relabelled: decide again
        self._ledger_overlay: dict[str, tuple[float, Obj]] = {}
        # Ledgers the informer saw deleted: name -> (when, the deletion's resourceVersion). Our
        # write's answer can be handled after the watch delivered a later DELETE of the same
        # ledger; without this the copy would bring it back until its TTL, and every write of that
        # node would meet 404 and end the pass (other nodes starved meanwhile).
        self._ledger_deleted: dict[str, tuple[float, int]] = {}
        self._pod_overlay: dict[str, tuple[float, Obj]] = {}
        self._changed_pods: set[Key] | None = None  # None until the first read: compare all
        self._changed_ledgers: set[str] | None = None

    # -- which events need a pass ---------------------------------------------------------------------
    # Every event could wake a pass, but most carry nothing a decision reads: kubelet heartbeats,
    # the echo of our own writes, the plugin confirming an assignment (the Binder takes that one),
    # our own PodScheduled reports. Waking on those would run back-to-back passes for nothing.

    def _on_pod(self, event: InformerEvent) -> None:
        if self._changed_pods is not None:
            self._changed_pods.add(key_of(event.object))
        if event.old is None or event.type == "DELETED":
            self.changed.set()
            return
        ours = self._pod_overlay.get(_uid(event.object))
        if ours is not None and not pod_change_matters(ours[1], event.object):
            return  # the echo of a binding we made
        if pod_change_matters(event.old, event.object):
            self.changed.set()

    def _on_ledger(self, event: InformerEvent) -> None:
        if self._changed_ledgers is not None:
            self._changed_ledgers.add(_name(event.object))
        ours = self._ledger_overlay.get(_name(event.object))
        if event.type != "DELETED" and ours is not None and version_of(ours[1]) == version_of(event.object):
            return  # the echo of our own write
        if event.type == "DELETED":
            self._ledger_deleted[_name(event.object)] = (self._clock(), version_of(event.object))
            if ours is not None and version_of(event.object) >= version_of(ours[1]):
                # Deleted after our write: the overlay must not bring it back until its TTL.
                del self._ledger_overlay[_name(event.object)]
        else:
            self._ledger_deleted.pop(_name(event.object), None)
        self.changed.set()

    def _on_node(self, event: InformerEvent) -> None:
        if event.old is None or event.type == "DELETED" or node_change_matters(event.old, event.object):
            self.generation += 1
            self.changed.set()

    def _on_other(self, _event: InformerEvent) -> None:
        self.generation += 1
        self.changed.set()

    @property
    def synced(self) -> bool:
        return self.pods.synced and self.cluster.synced

    @property
    def informers(self) -> tuple[Informer, ...]:
        """Every informer a read takes from: the pods', the cluster cache's, the side caches'."""
        return (self.pods, *self.cluster.informers, self.claims, self.volumes, self.namespaces)

    async def wait_synced(self) -> None:
        await self.pods.wait_synced()
        await self.cluster.wait_synced()

    def listen(self, informer: Informer, handler: Handler) -> None:
        """Call ``handler`` on ``informer``'s changes until these inputs stop running."""
        informer.add_handler(handler)
        self._listening.append((informer, handler))

    async def run(self) -> None:
        """Run the informers until cancelled (the shared caches only if we own them); on the way
        out, leave the shared ones without our handlers (``serve all`` restarts a crashed
        controller on the same pod informer and caches)."""
        tasks: list[asyncio.Task[None]] = []
        if self._own_pods:
            tasks.append(asyncio.create_task(self.pods.run(), name="informer-pods"))
        if self._own_cluster:
            tasks.append(asyncio.create_task(self.cluster.run(), name="cluster-cache"))
        try:
            # Until cancelled, even with nothing of our own to run: the side caches stop with us.
            await asyncio.gather(*tasks, asyncio.get_running_loop().create_future())
        finally:
            tasks.extend(self._side_tasks.values())
            self._side_tasks.clear()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for informer, handler in self._listening:
                informer.remove_handler(handler)
            self._listening.clear()

    async def side_objects(self, *, volumes: bool, namespaces: bool) -> SideObjects:
        """From their caches, started at the first need; a cache that has no complete LIST after
        ``SIDE_SYNC_SECONDS`` fails the pass (retried with backoff) with the informer's error."""
        wanted = [
            informer
            for informer, needed in (
                (self.claims, volumes),
                (self.volumes, volumes),
                (self.namespaces, namespaces),
            )
            if needed
        ]
        for informer in wanted:
            if informer.resource.plural not in self._side_tasks:
                self._side_tasks[informer.resource.plural] = asyncio.create_task(
                    informer.run(), name=f"informer-{informer.resource.plural}"
                )
        late = [informer for informer in wanted if not informer.synced]
        if late:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*(i.wait_synced() for i in late)), SIDE_SYNC_SECONDS)
        late = [informer for informer in late if not informer.synced]
        if late:
            raise KubeError(
                "; ".join(
                    f"{i.resource.plural} could not be read in {SIDE_SYNC_SECONDS:g} s "
                    f"({i.last_error or 'no answer yet'}); the pass is retried"
                    for i in late
                )
            )
        return SideObjects(
            claims=list(self.claims.items.values()) if volumes else (),
            volumes=list(self.volumes.items.values()) if volumes else (),
            namespaces=list(self.namespaces.items.values()) if namespaces else (),
            version=(self.claims.version, self.volumes.version, self.namespaces.version, volumes, namespaces),
        )

    # -- our own writes (client-go's mutation cache) ------------------------------------------------

    def wrote_ledger(self, obj: Obj) -> None:
        # Kept as the cache keeps ledgers (decoded once, no raw entries): when the informer
        # delivers the same version, World keeps this object, so a raw one would stay for good.
        deleted = self._ledger_deleted.get(_name(obj))
        if deleted is None or deleted[1] < version_of(obj):
            self._ledger_overlay[_name(obj)] = (self._clock(), cached_ledger(obj))
        if self._changed_ledgers is not None:
            self._changed_ledgers.add(_name(obj))

    def bound(self, pod: Mapping[str, Any], node: str, annotations: Mapping[str, str]) -> None:
        meta = dict(pod.get("metadata") or {})
        meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
        spec = {**(pod.get("spec") or {}), "nodeName": node}
        self._pod_overlay[_uid(pod)] = (self._clock(), {**pod, "metadata": meta, "spec": spec})
        if self._changed_pods is not None:
            self._changed_pods.add(key_of(pod))

    def _ledgers(self, now: float) -> Mapping[str, Obj]:
        """The informer's ledgers with our own writes laid over them (no copy of the cache)."""
        current = ByName(self.cluster.ledgers.items)
        for name, (stamp, _) in list(self._ledger_deleted.items()):
            if now - stamp > OVERLAY_TTL_SECONDS:
                del self._ledger_deleted[name]  # no answer of ours can be that late
        overlay: dict[str, Obj] = {}
        for name, (stamp, ours) in list(self._ledger_overlay.items()):
            seen = current.get(name)
            if now - stamp > OVERLAY_TTL_SECONDS or (
                seen is not None and version_of(seen) >= version_of(ours)
            ):
                del self._ledger_overlay[name]  # the informer caught up (or never will)
                if self._changed_ledgers is not None:
                    self._changed_ledgers.add(name)
            else:
                overlay[name] = ours
        return Overlaid(current, overlay) if overlay else current

    def _pods(self, now: float) -> Mapping[Key, Obj]:
        """The informer's pods with our bindings laid over them (no copy of the cache)."""
        items = self.pods.items
        overlay: dict[Key, Obj] = {}
        for uid, (stamp, ours) in list(self._pod_overlay.items()):
            key = key_of(ours)
            seen = items.get(key)
            seen_spec = seen.get("spec") if seen is not None else None
            bound = isinstance(seen_spec, Mapping) and bool(seen_spec.get("nodeName"))
            if now - stamp > OVERLAY_TTL_SECONDS or seen is None or _uid(seen) != uid or bound:
                # Shown bound (or gone) by the informer itself: its copy is newer than ours.
                del self._pod_overlay[uid]
                if self._changed_pods is not None:
                    self._changed_pods.add(key)
            else:
                overlay[key] = ours
        return Overlaid(items, overlay) if overlay else items

    async def read(self, config: GuardConfig) -> PassInputs:
        if self._before_read is not None:
            await self._before_read()
        now = self._clock()
        view = self.cluster.snapshot(config)
        ledgers, pods = self._ledgers(now), self._pods(now)
        changed_pods, self._changed_pods = self._changed_pods, set()
        changed_ledgers, self._changed_ledgers = self._changed_ledgers, set()
        return PassInputs(
            ledgers=ledgers,
            pods=pods,
            changed_pods=changed_pods,
            changed_ledgers=changed_ledgers,
            nodes=ByName(self.cluster.nodes.items),
            view=view,
            generation=(self.generation,),
        )
