"""The controller's incremental picture of the cluster, brought up to date by what changed.

A pass used to rebuild everything from every pod and ledger: the allocator, kube-scheduler's
workloads, the release/verify/adopt loop, the per-node counts. At 100,000 pods that is seconds per
pass, so every new pod waited seconds. ``World`` instead keeps, across passes:

- the last pod and ledger objects seen (an unchanged object is skipped by identity, a re-listed one
  by resourceVersion), each pod reduced to a ``PodRecord`` of the facts the controller reads;
- indexes over those records: which pods are pending for us, which nodes wait for the plugin's
  handshake, whole-card GPUs per node, running gang members, bound pods per node, ledger entries
  by pod UID;
- the allocator (``World.allocator``: one ``Allocator``, kept in step) and the workloads, updated
  per changed node, ledger and pod.

``update`` returns ``Changes``: the pods and ledger entries that must be checked again (release,
verify, adopt) and the nodes whose invariants may have changed. Nothing here talks to the API.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from vgpu_guard.engine.allocator import Allocator
from vgpu_guard.engine.annotations import BIND_PHASE, BIND_TIME, VGPU_IDS, VGPU_NODE
from vgpu_guard.engine.cluster import ClusterView, NodeInfo
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.ledger import LedgerError, NodeLedger
from vgpu_guard.engine.objects import Obj
from vgpu_guard.engine.pod_request import GROUP_ANNOTATIONS, whole_card_gpus
from vgpu_guard.engine.scheduling import PodFacts, Workloads
from vgpu_guard.engine.untrusted import as_mapping, plain_int

__all__ = ["Changes", "PodRecord", "World", "record_of"]

Key = tuple[str, str]


@dataclass(slots=True)
class PodRecord:
    """What the controller reads of one pod, computed once per pod version; never changed after
    (a new version gets a new record). Not ``frozen``: a frozen init costs 3.5x as much, ~0.3 s of
    a start on 100,000 pods."""

    key: Key
    uid: str
    rv: str
    node: str  # spec.nodeName
    pod_phase: str  # status.phase
    terminal: bool  # Succeeded or Failed
    deleting: bool  # deletionTimestamp set
    ours: bool  # spec.schedulerName names us
    whole: int  # whole-card nvidia.com/gpu it holds
    group: str  # PodGroup name from the group annotations ("" for none)
    bind_phase: str  # volcano.sh/bind-phase
    vgpu_node: str  # volcano.sh/vgpu-node
    # volcano.sh/bind-time of an allocating pod (the handshake's timeout counts from it; no other
    # pod's is read), 0 when absent or unreadable
    bind_time: int
    assignment: str  # volcano.sh/vgpu-ids-new ("" for none)

    @property
    def bound(self) -> bool:
        return bool(self.node) and not self.terminal

    @property
    def pending(self) -> bool:
        return self.ours and not self.node and not self.terminal and not self.deleting

    @property
    def allocating(self) -> bool:
        """The node waits for the plugin to confirm this pod (one such pod per node)."""
        return self.bound and self.bind_phase == "allocating" and self.vgpu_node == self.node


def record_of(key: Key, pod: Mapping[str, Any], scheduler: str) -> PodRecord:
    # ``as_mapping`` only for what is not a plain dict: a decoded pod's maps all are, and a start
    # reads 100,000 of them.
    meta, spec, status = pod.get("metadata"), pod.get("spec"), pod.get("status")
    if meta.__class__ is not dict:
        meta = as_mapping(meta)
    if spec.__class__ is not dict:
        spec = as_mapping(spec)
    if status.__class__ is not dict:
        status = as_mapping(status)
    notes = meta.get("annotations")
    if notes.__class__ is not dict:
        notes = as_mapping(notes)
    phase = _text(status.get("phase"))
    bind_phase = _text(notes.get(BIND_PHASE))
    # Positional, in the fields' order: keyword arguments cost twice as much to pass.
    return PodRecord(
        key,
        _text(meta.get("uid")),
        _text(meta.get("resourceVersion")),  # rv
        _text(spec.get("nodeName")),  # node
        phase,  # pod_phase
        phase in ("Succeeded", "Failed"),  # terminal
        bool(meta.get("deletionTimestamp")),  # deleting
        spec.get("schedulerName") == scheduler,  # ours
        whole_card_gpus(pod),  # whole
        _group_of(notes),  # group
        bind_phase,  # bind_phase
        _text(notes.get(VGPU_NODE)),  # vgpu_node
        (plain_int(str(notes.get(BIND_TIME, "0"))) or 0) if bind_phase == "allocating" else 0,  # bind_time
        _text(notes.get(VGPU_IDS)),  # assignment
    )


def _text(value: Any) -> str:
    """``str(value or "")``, without the call for the usual case (a start reads 100,000 pods)."""
    return value if value.__class__ is str else str(value or "")


def _group_of(notes: Mapping[str, Any]) -> str:
    """The PodGroup name, read in ``pod_request``'s order (the first group annotation that is set
    wins), so a pod carrying both names counts as running in the group its request names."""
    for key in GROUP_ANNOTATIONS:
        if notes.get(key):
            return str(notes[key])
    return ""


@dataclass
class Changes:
    """What one ``update`` found changed."""

    # Pod UIDs to check again: changed pods, entries of changed ledgers, pods on those nodes. In
    # the order they were found (a dict's keys, not a set): at a start the walks over these 100,000
    # then meet the records and entries in the order they were built, next to each other in memory;
    # in a set's hash order each step was a cache miss, and the walks took twice as long.
    dirty: dict[str, None] = field(default_factory=dict)
    ledgers: set[str] = field(default_factory=set)  # nodes whose ledger changed, appeared or went
    nodes: set[str] = field(default_factory=set)  # nodes whose registration or labels changed
    whole: set[str] = field(default_factory=set)  # nodes whose whole-card count changed
    gone: set[str] = field(default_factory=set)  # pod UIDs no longer in the cluster
    freed: bool = False  # capacity may have been freed (an entry or a placed pod went)


Decode = Callable[[Obj], NodeLedger]
FactsOf = Callable[[Obj], PodFacts]


class World:
    """Pods, ledgers and the indexes over them; ``engine`` is the allocator kept in step."""

    def __init__(self, config: GuardConfig) -> None:
        self.config = config
        self._scheduler = config.scheduling.scheduler_name
        self._pod_objs: dict[Key, Obj] = {}
        self._ledger_objs: dict[str, Obj] = {}
        self.records: dict[str, PodRecord] = {}  # uid -> record
        self.pods: dict[str, Obj] = {}  # uid -> pod
        self.ledgers: dict[str, NodeLedger] = {}
        self.bad: dict[str, str] = {}  # ledger name -> why it does not decode
        # pod uid -> nodes whose ledger holds an entry for it (one, unless a ledger was edited or a
        # pod moved: every entry is checked, the stray ones released). Tuples: a set per pod would
        # cost ~200 bytes more for each of 100,000 pods.
        self.entries: dict[str, tuple[str, ...]] = {}
        self.bound_on: dict[str, set[str]] = {}  # node -> uids of pods bound there
        self.whole: Counter[str] = Counter()
        self.running: Counter[tuple[str, str]] = Counter()
        self.pending: dict[str, PodRecord] = {}
        self.allocating: dict[str, PodRecord] = {}  # uid -> record, bind-phase allocating
        self.failed: dict[str, PodRecord] = {}  # uid -> record, bind-phase failed
        self.placed: dict[str, str] = {}  # uid -> node, as the workloads count it
        self.nodes: Mapping[str, NodeInfo] = {}
        # The view's node mapping last taken in, and the unreadable ledgers then (their nodes are
        # left out): while both stand, the nodes did not change.
        self._nodes_source: Mapping[str, NodeInfo] | None = None
        self._bad_nodes: frozenset[str] = frozenset()
        self.view = ClusterView()
        self._allocator: Allocator | None = None
        self.workloads = Workloads()
        self._refill_workloads = False  # set by resync(None): count every placed pod again
        self.full_resyncs = 0  # rebuilds of a built allocator (resync(None))
        # Node, ledger and whole-card changes the allocator has not taken in yet: a pass that stops
        # after releasing or adopting does not reach it, and the next one must still apply them.
        self._unsynced = Changes()
        # Nodes whose ledger the controller cannot write now (node -> why): the allocator places no
        # new pod there (controller/node_queue.py sets this before each decision).
        self.held: dict[str, str] = {}

    def entry_node(self, uid: str) -> str | None:
        """A node whose ledger holds the pod (the first by name when several do)."""
        held = self.entries.get(uid)
        return min(held) if held else None

    # -- the diff ----------------------------------------------------------------------------------

    def update(
        self,
        pods: Mapping[Key, Obj],
        ledgers: Mapping[str, Obj],
        view: ClusterView,
        *,
        decode: Decode,
        facts: FactsOf,
        changed_pods: set[Key] | None = None,
        changed_ledgers: set[str] | None = None,
    ) -> Changes:
        """Take in the current objects; ``self.view`` is ``view`` without nodes whose ledger is
        unreadable (they are left alone until it is fixed). ``changed_*``: the keys that may have
        changed since the last update (from the informers' events); None compares everything."""
        changes = Changes()
        self._update_ledgers(ledgers, decode, changes, changed_ledgers)
        self._update_pods(pods, changes, changed_pods)
        self._update_nodes(view, changes)
        for name in changes.ledgers | changes.nodes:
            changes.dirty.update(dict.fromkeys(self.bound_on.get(name, ())))
        self._update_placed(changes, facts)
        self._unsynced.nodes |= changes.nodes
        self._unsynced.ledgers |= changes.ledgers
        self._unsynced.whole |= changes.whole
        return changes

    def _update_nodes(self, view: ClusterView, changes: Changes) -> None:
        """Take in the view's nodes; compared one by one only when the cache rebuilt them or the
        set of unreadable ledgers moved (a pass must not compare 5,000 nodes for nothing)."""
        bad = frozenset(self.bad)
        if view.nodes is self._nodes_source and bad == self._bad_nodes:
            self.view = replace(view, nodes=self.nodes) if bad else view
            return
        self._nodes_source, self._bad_nodes = view.nodes, bad
        nodes = view.nodes
        if bad:
            nodes = {n: i for n, i in nodes.items() if n not in bad}
            view = replace(view, nodes=nodes)
        self.view = view
        for name in set(nodes) | set(self.nodes):
            now, before = nodes.get(name), self.nodes.get(name)
            if now is not before and now != before:  # parsed again from an unchanged object: equal
                changes.nodes.add(name)
        self.nodes = nodes

    def _update_ledgers(
        self, current: Mapping[str, Obj], decode: Decode, changes: Changes, names: set[str] | None
    ) -> None:
        if names is None:
            gone = [n for n in self._ledger_objs if n not in current]
            changed: Iterable[tuple[str, Obj]] = current.items()
        else:
            gone = [n for n in names if n not in current and n in self._ledger_objs]
            changed = [(n, current[n]) for n in names if n in current]
        for name in gone:
            del self._ledger_objs[name]
            self.bad.pop(name, None)
            self._set_ledger(name, None, changes)
        for name, obj in changed:
            old = self._ledger_objs.get(name)
            if old is obj or (old is not None and _rv(old) == _rv(obj) and _rv(obj)):
                continue
            self._ledger_objs[name] = obj
            try:
                ledger: NodeLedger | None = decode(obj)
                self.bad.pop(name, None)
            except LedgerError as e:
                self.bad[name] = str(e)
                ledger = None
            self._set_ledger(name, ledger, changes)

    def _set_ledger(self, name: str, ledger: NodeLedger | None, changes: Changes) -> None:
        """``name``'s ledger is now ``ledger`` (None: gone or unreadable); the entries index follows."""
        old = self.ledgers.pop(name, None)
        if ledger is not None:
            self.ledgers[name] = ledger
        _reindex_entries(self.entries, name, old, ledger, changes)

    def _update_pods(self, current: Mapping[Key, Obj], changes: Changes, keys: set[Key] | None) -> None:
        """Take in the pods at ``keys`` (those the informer saw change), or diff them all (None)."""
        if keys is None:
            gone_keys = [k for k in self._pod_objs if k not in current]
            changed: Iterable[tuple[Key, Obj]] = current.items()
        else:
            gone_keys = [k for k in keys if k not in current and k in self._pod_objs]
            changed = [(k, current[k]) for k in keys if k in current]
        for key in gone_keys:
            went = self._pod_objs.pop(key)
            uid = str(as_mapping(went.get("metadata")).get("uid") or "")
            record = self.records.get(uid)
            if record is not None and record.key == key:
                self._forget(record, changes)
                changes.gone.add(uid)
        # Locals for what every step reads: a start takes in 100,000 pods here.
        pod_objs, records, pods, scheduler = self._pod_objs, self.records, self.pods, self._scheduler
        for key, obj in changed:
            old = pod_objs.get(key)
            if old is obj:
                continue
            pod_objs[key] = obj
            record = record_of(key, obj, scheduler)
            uid = record.uid
            previous = records.get(uid)
            pods[uid] = obj
            if old is not None:
                old_uid = str(as_mapping(old.get("metadata")).get("uid") or "")
                if old_uid != uid and old_uid in records:
                    self._forget(records[old_uid], changes)  # same name, a new pod
                    changes.gone.add(old_uid)
            if previous is None:
                self._remember(record, changes)  # new to this world: no deferred version to refresh
                continue
            self.workloads.refresh(uid, obj)
            if previous != record:
                self._forget(previous, changes)
                self._remember(record, changes)

    def _remember(self, record: PodRecord, changes: Changes) -> None:
        self.records[record.uid] = record
        changes.dirty[record.uid] = None
        if record.bound:
            on = self.bound_on.get(record.node)
            if on is None:  # not setdefault(node, set()): that builds a set for every pod
                on = self.bound_on[record.node] = set()
            on.add(record.uid)
            if record.whole:
                self.whole[record.node] += record.whole
                changes.whole.add(record.node)
            if record.group:
                self.running[(record.key[0] or "default", record.group)] += 1
            if record.allocating:
                self.allocating[record.uid] = record
            if record.bind_phase == "failed":
                self.failed[record.uid] = record
        if record.pending:
            self.pending[record.uid] = record

    def _forget(self, record: PodRecord, changes: Changes) -> None:
        """Take ``record``'s contributions out of every index (the pod changed or went)."""
        self.records.pop(record.uid, None)
        changes.dirty[record.uid] = None
        if record.bound:
            on = self.bound_on.get(record.node)
            if on is not None:
                on.discard(record.uid)
                if not on:
                    del self.bound_on[record.node]
            if record.whole:
                self.whole[record.node] -= record.whole
                if self.whole[record.node] <= 0:
                    del self.whole[record.node]
                changes.whole.add(record.node)
            if record.group:
                group = (record.key[0] or "default", record.group)
                self.running[group] -= 1
                if self.running[group] <= 0:
                    del self.running[group]
        self.allocating.pop(record.uid, None)
        self.failed.pop(record.uid, None)
        self.pending.pop(record.uid, None)

    def _update_placed(self, changes: Changes, facts: FactsOf) -> None:
        """Pods the workloads count: not ended, and bound or held by a ledger entry."""
        for uid in changes.gone:
            self.pods.pop(uid, None)
        for uid in changes.dirty:
            record = self.records.get(uid)
            node = None
            if record is not None and not record.terminal:
                node = record.node or self.entry_node(uid)
            was = self.placed.get(uid)
            if node is None:
                if was is not None:
                    del self.placed[uid]
                    changes.freed = True
                # Also what the allocator assumed for a pod this world never saw placed (reserved,
                # bound and deleted between two passes): a stale pod would block its node.
                self.workloads.forget(uid)
                continue
            if was != node or (record is not None and record.rv and self.workloads.node_of(uid) is None):
                self.placed[uid] = node
                # Counted when a decision first reads the node: a start on 100,000 bound pods
                # derives only the facts of the few nodes its first decisions weigh.
                self.workloads.defer(uid, node, self.pods[uid], facts)

    # -- the allocator ----------------------------------------------------------------------------------

    def allocator(self, view: ClusterView) -> Allocator:
        """The long-lived allocator brought to ``view`` and the ledgers; built at first use."""
        changes, self._unsynced = self._unsynced, Changes()
        if self._allocator is None:
            good = {n: ledger for n, ledger in self.ledgers.items() if n not in self.bad}
            self._allocator = Allocator(
                view, good, config=self.config, whole_card=self.whole, workloads=self.workloads
            )
            self._allocator.hold_nodes(self.held)
            return self._allocator
        allocator = self._allocator
        allocator.set_view(view)
        for name in changes.nodes:
            allocator.replace_node(name, view.nodes.get(name))
        for name in changes.ledgers:
            allocator.replace_ledger(name, self.ledgers.get(name) if name not in self.bad else None)
        for name in changes.whole:
            allocator.set_whole_card(name, self.whole.get(name, 0))
        allocator.hold_nodes(self.held)
        return allocator

    def resync(self, nodes: set[str] | None = None) -> None:
        """Forget the allocator's decisions that may not have reached the server: on ``nodes``
        (their ledgers as last read), or everything (rebuilt at the next pass) when None. A whole
        rebuild costs the fleet (the allocator, the workloads): it is for a lost watch or an
        error that may have left any node stale, never for one node's lost race
        (``full_resyncs`` counts them; the controller benchmark checks it stays 0 under races)."""
        if nodes is None or self._allocator is None:
            if self._allocator is not None:
                self.full_resyncs += 1
            self._allocator = None
            self.workloads = Workloads()
            self.placed.clear()
            for record in self.records.values():
                node = record.node or self.entry_node(record.uid)
                if node and not record.terminal:
                    self.placed[record.uid] = node
            self._refill_workloads = True
            return
        for name in nodes:
            self._allocator.replace_ledger(name, self.ledgers.get(name) if name not in self.bad else None)

    def revert(self, node: str, decided: Iterable[str]) -> None:
        """Undo this pass's decisions on ``node`` whose write failed: the allocator holds its
        ledger as last read again, and the pods ``decided`` there are no longer assumed on it."""
        stored = self.ledgers.get(node)
        self.resync({node})
        for uid in decided:
            if stored is None or uid not in stored.allocations:
                self.workloads.forget(uid)

    def legacy_among(self, names: Iterable[str]) -> list[str]:
        """Of ``names``, the readable ledgers stored in a release's encoding before issue 44."""
        return sorted(
            n
            for n in names
            if (ledger := self.ledgers.get(n)) is not None and ledger.legacy and n not in self.bad
        )

    def stored_summary(self, node: str) -> object:
        """``spec.summary`` of the node's GPULedger as last read (None: no ledger or no summary)."""
        obj = self._ledger_objs.get(node)
        spec = as_mapping(obj.get("spec")) if obj is not None else None
        return spec.get("summary") if spec is not None else None

    def refill(self, facts: FactsOf) -> None:
        """After ``resync(None)``: count every placed pod in the fresh workloads."""
        if self._refill_workloads:
            for uid, node in self.placed.items():
                self.workloads.defer(uid, node, self.pods[uid], facts)
            self._refill_workloads = False


def _reindex_entries(
    entries: dict[str, tuple[str, ...]],
    name: str,
    old: NodeLedger | None,
    new: NodeLedger | None,
    changes: Changes,
) -> None:
    """Move node ``name`` in the pod -> nodes index from ``old``'s entries to ``new``'s; every pod
    of either is dirty, and capacity counts as freed when an entry went."""
    if old is not None:
        for uid in old.allocations:
            held = entries.get(uid)
            if held is not None:
                rest = tuple(n for n in held if n != name)
                if rest:
                    entries[uid] = rest
                else:
                    del entries[uid]
            changes.dirty[uid] = None
        if new is None or not set(old.allocations) <= set(new.allocations):
            changes.freed = True
    if new is not None:
        for uid in new.allocations:
            held = entries.get(uid, ())
            if name not in held:
                entries[uid] = (*held, name)
            changes.dirty[uid] = None
    changes.ledgers.add(name)


def _rv(obj: Mapping[str, Any]) -> str:
    return str(as_mapping(obj.get("metadata")).get("resourceVersion") or "")
