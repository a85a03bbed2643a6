"""The GPU ledger: which pod holds what on which physical GPU of one node.

One ``GPULedger`` object per node lives in the API server (docs/design/ledger.md says why); every
replica and every restart reads the same truth, and every write carries the resourceVersion it was
decided on. This module is the pure model of one such object: entries keyed by pod UID (adding the
same allocation twice or removing an absent one changes nothing, so retries are harmless), exact
integer arithmetic, the capacity invariants, and the exact CRD encoding.

Units: the ledger stores MiB (plugin units x gpuMemoryFactor), so it reads the same whatever the
factor; capacities come from the node's registration at check time, never from the ledger itself.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote, unquote

from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.devices import GpuDevice
from vgpu_guard.engine.mig_placement import total_slices
from vgpu_guard.engine.untrusted import MAX_GPU_MEMORY_MIB, MAX_UNIX_SECONDS, plain_int

__all__ = [
    "API_VERSION",
    "ENTRY_FLAGS",
    "KIND",
    "MAX_CONTAINER_INDEX",
    "MAX_MIG_NUMBER",
    "Allocation",
    "ContainerGrant",
    "DeviceGrant",
    "GpuUsage",
    "LedgerError",
    "LedgerViolation",
    "MigSlot",
    "NodeLedger",
    "cached_ledger",
    "check_invariants",
    "check_write",
    "decode_entry",
    "decode_ledger",
    "encode_entry",
    "encode_ledger",
    "gpu_usage",
]

API_VERSION = "vgpu-guard.io/v1alpha1"
KIND = "GPULedger"
MAX_CORES = 100


class LedgerError(ValueError):
    """Raised when a ledger object does not decode, or an add contradicts an existing entry."""


@dataclass(frozen=True, slots=True)
class MigSlot:
    """A MIG instance: group and position as the plugin reads them, slices as the hardware has them."""

    group: str
    profile: str
    position: int
    start: int | None = None
    size: int | None = None


# DeviceGrant, ContainerGrant and Allocation are built for every ledger entry a start decodes
# (100,000 of each); a frozen dataclass's init costs 4-6x a plain one's (every field is set through
# ``object.__setattr__``), ~0.5 s of a start. So they are plain slotted classes, never changed after
# they are built (a new entry is a new object: ``dataclasses.replace``, ``NodeLedger.with_*``), and
# equal ones hash equal (``unsafe_hash``: they are hashed only as the values they are).


@dataclass(slots=True, unsafe_hash=True)
class DeviceGrant:
    """One physical GPU given to one container: MiB and percent of SMs reserved on it."""

    uuid: str
    memory: int
    cores: int
    mig: MigSlot | None = None


@dataclass(slots=True, unsafe_hash=True)
class ContainerGrant:
    """The GPUs of one container (``index`` into ``spec.containers``)."""

    index: int
    name: str
    devices: tuple[DeviceGrant, ...]


@dataclass(slots=True, unsafe_hash=True)
class Allocation:
    """Everything one pod holds on one node; the unit of add and remove."""

    pod_uid: str
    namespace: str
    name: str
    queue: str
    containers: tuple[ContainerGrant, ...]
    # Unix seconds of the reservation, from the controller's clock (also the pod's vgpu-time).
    reserved_at: int = 0
    # PodGroup name of a pod that has one ("" otherwise), with ``namespace`` the group's key: a
    # partial gang's reservations are found by it, and so are the GPUs that Volcano's PodGroup
    # spread policy keeps the group's other members off (``Holdings.member_cards``).
    group: str = ""
    # True when taken over from a binding made before the entry existed (reconcile, never decided by us).
    adopted: bool = False
    # True once a controller is about to bind the pod (written, with CAS, before every Binding). A
    # committed entry is released only when the pod ends or turns up bound elsewhere, never
    # re-decided: that is what makes a stale replica's release and a binding exclude each other.
    committed: bool = False
    # True when reserved by the webhook's arbiter as an allocation writer (Volcano, the device
    # plugin) wrote the assignment: released when its pod ends, moves, or is still unbound after
    # ``arbiter.unboundReleaseSeconds`` (the write was refused after admission, or Volcano
    # discarded it); see docs/design/ledger.md "Reservations at admission".
    admitted: bool = False

    def grants(self) -> Iterator[DeviceGrant]:
        for container in self.containers:
            yield from container.devices

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class NodeLedger:
    """One node's ledger as last read (``resource_version`` None: the object does not exist yet).

    ``legacy``: the stored object holds entries (or a summary) as a release before issue 44 wrote
    them, one JSON object each; read the same, and rewritten as strings by the controller (it is
    not part of the ledger's value: equal entries are equal ledgers however they were stored).
    """

    node: str
    allocations: Mapping[str, Allocation] = field(default_factory=dict)
    resource_version: str | None = None
    legacy: bool = field(default=False, compare=False)

    def with_allocation(self, allocation: Allocation) -> NodeLedger:
        """The ledger plus ``allocation``; unchanged when the same entry is already there.

        A different entry under the same UID is a bug in the caller (a pod is placed once), so it
        raises instead of silently replacing what another replica may have bound.
        """
        return self.with_allocations((allocation,))

    def with_allocations(self, allocations: Iterable[Allocation]) -> NodeLedger:
        """The ledger plus every entry of ``allocations`` (same rules as ``with_allocation``).

        One copy of the map for the lot: adopting a node's 20 pods one at a time copied it 20
        times, 100,000 times in all at a first start on a busy cluster.
        """
        merged: dict[str, Allocation] | None = None
        for allocation in allocations:
            existing = (merged if merged is not None else self.allocations).get(allocation.pod_uid)
            if existing == allocation:
                continue
            if existing is not None:
                raise LedgerError(
                    f"pod {allocation.key} (uid {allocation.pod_uid}) already holds an entry on node "
                    f"{self.node}; release it before placing the pod again"
                )
            if merged is None:
                merged = dict(self.allocations)
            merged[allocation.pod_uid] = allocation
        if merged is None:
            return self
        return NodeLedger(node=self.node, allocations=merged, resource_version=self.resource_version)

    def without(self, pod_uid: str) -> NodeLedger:
        """The ledger without the pod's entry; unchanged when there is none."""
        if pod_uid not in self.allocations:
            return self
        return NodeLedger(
            node=self.node,
            allocations={k: v for k, v in self.allocations.items() if k != pod_uid},
            resource_version=self.resource_version,
        )


@dataclass(slots=True)
class GpuUsage:
    """What one GPU's entries add up to."""

    memory: int = 0
    cores: int = 0
    grants: int = 0
    pods: list[str] = field(default_factory=list)
    mig: list[tuple[str, MigSlot]] = field(default_factory=list)


def gpu_usage(allocations: Iterable[Allocation]) -> dict[str, GpuUsage]:
    """Per GPU uuid: memory, cores, grants (one per container per device) and MIG slots."""
    usage: dict[str, GpuUsage] = {}
    for allocation in allocations:
        for grant in allocation.grants():
            u = usage.get(grant.uuid)
            if u is None:
                u = usage[grant.uuid] = GpuUsage()
            u.memory += grant.memory
            u.cores += grant.cores
            u.grants += 1
            u.pods.append(allocation.key)
            if grant.mig is not None:
                u.mig.append((allocation.key, grant.mig))
    return usage


ViolationKind = Literal[
    "memory",
    "cores",
    "pods",
    "mig",
    "unknown-gpu",
    "duplicate-device",
    "exclusive",
    "cores-full",
    "registered-twice",
]


@dataclass(frozen=True, slots=True)
class LedgerViolation:
    """One broken invariant on one GPU, with a message an operator can act on."""

    node: str
    gpu: str
    kind: ViolationKind
    message: str


def _pods(u: GpuUsage) -> str:
    shown = ", ".join(u.pods[:5])
    return shown + (f" and {len(u.pods) - 5} more" if len(u.pods) > 5 else "")


def _mig_violations(node: str, uuid: str, u: GpuUsage, total: int | None) -> list[LedgerViolation]:
    out: list[LedgerViolation] = []

    def bad(message: str) -> None:
        out.append(LedgerViolation(node, uuid, "mig", f"GPU {uuid} on node {node}: {message}"))

    groups = sorted({slot.group for _, slot in u.mig})
    if len(groups) > 1:
        bad(f"MIG instances of several geometry groups ({', '.join(groups)}); a card holds one group")
    seen: dict[tuple[str, int], str] = {}
    for pod, slot in u.mig:
        if (slot.group, slot.position) in seen:
            first = seen[slot.group, slot.position]
            bad(f"MIG position {slot.group}-{slot.position} given to {first} and {pod}")
        seen[slot.group, slot.position] = pod
    placed = sorted(
        [
            (slot.start, slot.start + slot.size, pod, slot)
            for pod, slot in u.mig
            if slot.start is not None and slot.size is not None
        ],
        key=lambda t: (t[0], t[1], t[2], t[3].position),
    )
    for start, end, pod, slot in placed:
        if start < 0 or (total is not None and end > total):
            bad(f"MIG {slot.profile} of {pod} at slices [{start},{end}) is outside the {total} slices")
    for i, (s1, e1, p1, m1) in enumerate(placed):
        for s2, e2, p2, m2 in placed[i + 1 :]:
            if s2 >= e1:
                break
            bad(f"MIG {m1.profile} of {p1} [{s1},{e1}) overlaps {m2.profile} of {p2} [{s2},{e2})")
    return out


def check_invariants(
    ledger: NodeLedger,
    node: NodeInfo,
    *,
    memory_factor: int = 1,
    mig_slices: Mapping[str, int] | None = None,
    usage: Mapping[str, GpuUsage] | None = None,
) -> list[LedgerViolation]:
    """Every broken capacity invariant of ``ledger`` against the node's registered GPUs.

    Per GPU: memory used <= card memory, cores <= 100, grants <= split count, MIG instances of a
    single group, distinct positions, non-overlapping slices inside the card (``mig_slices``: the
    card's slice count per uuid when known). Grants on a uuid the node does not register are
    reported too (the card vanished or the node re-registered): their capacity cannot be checked.
    ``usage``: ``gpu_usage`` of the ledger when the caller has computed it already.
    """
    out = _duplicate_devices(ledger)
    cards = {g.uuid: g for g in node.gpus}
    if usage is None:
        usage = gpu_usage(ledger.allocations.values())
    for uuid, u in sorted(usage.items()):
        card = cards.get(uuid)
        if card is None:
            out.append(
                LedgerViolation(
                    ledger.node,
                    uuid,
                    "unknown-gpu",
                    f"GPU {uuid} is not registered on node {ledger.node} but held by {_pods(u)}",
                )
            )
            continue
        out.extend(_card_violations(ledger.node, card, u, memory_factor))
        if u.mig:
            total = (mig_slices or {}).get(uuid, total_slices(card.type))
            out.extend(_mig_violations(ledger.node, uuid, u, total))
    return out


def _duplicate_devices(ledger: NodeLedger) -> list[LedgerViolation]:
    """A container holding one GPU twice (its grants would count the card twice)."""
    out: list[LedgerViolation] = []
    for allocation in ledger.allocations.values():
        for container in allocation.containers:
            uuids = [d.uuid for d in container.devices]
            for uuid in sorted({u for u in uuids if uuids.count(u) > 1}):
                out.append(
                    LedgerViolation(
                        ledger.node,
                        uuid,
                        "duplicate-device",
                        f"container {container.name} of {allocation.key} holds GPU {uuid} twice; "
                        "a container needs distinct GPUs",
                    )
                )
    return out


def _card_violations(node: str, card: GpuDevice, u: GpuUsage, memory_factor: int) -> list[LedgerViolation]:
    """One registered card's memory, cores and vGPU count against what the ledger reserves on it."""
    out: list[LedgerViolation] = []
    capacity = card.memory * memory_factor
    where = f"GPU {card.uuid} on node {node}"
    if u.memory > capacity:
        out.append(
            LedgerViolation(
                node,
                card.uuid,
                "memory",
                f"{where}: {u.memory} MiB reserved > {capacity} MiB capacity ({_pods(u)})",
            )
        )
    if u.cores > MAX_CORES:
        out.append(
            LedgerViolation(
                node, card.uuid, "cores", f"{where}: {u.cores}% cores reserved > 100% ({_pods(u)})"
            )
        )
    if u.grants > card.split_count:
        out.append(
            LedgerViolation(
                node,
                card.uuid,
                "pods",
                f"{where}: {u.grants} vGPUs > split count {card.split_count} ({_pods(u)})",
            )
        )
    return out


def check_write(
    old: NodeLedger, new: NodeLedger, node: NodeInfo, *, memory_factor: int = 1
) -> list[LedgerViolation]:
    """The violations a write from ``old`` to ``new`` would introduce.

    Only GPUs that gain a grant are judged: a pre-existing overcommit (from before installation)
    must not block releasing pods elsewhere on the node, and is reported by reconcile instead.
    Beyond the capacity invariants, the grants the write adds meet Volcano's own per-card rules
    (``_volcano_rules``), so that nothing Volcano would refuse is reserved.
    """
    changed = [
        (old.allocations.get(uid), a) for uid, a in new.allocations.items() if old.allocations.get(uid) != a
    ]
    gained = {grant.uuid for _, allocation in changed for grant in allocation.grants()}
    if not gained:
        return []
    found = [v for v in check_invariants(new, node, memory_factor=memory_factor) if v.gpu in gained]
    over = {v.gpu for v in found if v.kind == "cores"}
    held = gpu_usage(a for uid, a in new.allocations.items() if old.allocations.get(uid) == a)
    added: list[tuple[str, DeviceGrant]] = []
    for before, allocation in changed:
        # A grant the pod held already (an entry only marked committed, a second Binding that
        # names the same device) is held, not added: it is not judged again.
        kept = Counter(before.grants()) if before is not None else Counter[DeviceGrant]()
        for grant in allocation.grants():
            if kept[grant] > 0:
                kept[grant] -= 1
                use = held.setdefault(grant.uuid, GpuUsage())
                use.cores, use.grants = use.cores + grant.cores, use.grants + 1
            else:
                added.append((allocation.key, grant))
    for card in node.gpus:
        if card.uuid in gained and card.uuid not in over:
            found.extend(_volcano_rules(node.name, card, held.get(card.uuid) or GpuUsage(), added))
    return found


def _volcano_rules(
    node: str, card: GpuDevice, held: GpuUsage, added: list[tuple[str, DeviceGrant]]
) -> list[LedgerViolation]:
    """Volcano's per-card rules on the grants a write adds to ``card`` (``added``: pod and grant),
    each judged after what the card holds and the grants added before it, as Volcano's fit sees
    a card (pkg/scheduler/api/devices/nvidia/vgpu/utils.go ``checkNodeGPUSharingPredicateAndScore``,
    the same at v1.10.0 and master): a 100-core request needs a card no grant holds
    ("Coresreq=100 indicates it want this card exclusively": ``UsedNum > 0`` refuses), a 0-core
    request is refused on a card whose used cores are 100. The sum over 100 is
    ``check_invariants``'. A card registered twice takes no grant at all (engine/devices.py)."""
    where = f"GPU {card.uuid} on node {node}"
    mine = [(pod, grant) for pod, grant in added if grant.uuid == card.uuid]
    if not mine:
        return []
    if card.unusable is not None:
        return [LedgerViolation(node, card.uuid, "registered-twice", f"{where} {card.unusable}")]
    out: list[LedgerViolation] = []
    cores, grants = held.cores, held.grants
    for pod, grant in mine:
        if grant.cores == MAX_CORES and grants > 0:
            message = (
                f"{where} is in use, and {pod} asks 100% cores, which Volcano gives only a GPU no pod "
                "holds (its exclusive rule)"
            )
            out.append(LedgerViolation(node, card.uuid, "exclusive", message))
        elif grant.cores == 0 and cores >= MAX_CORES:
            message = (
                f"{where} has all its cores taken (100%), and {pod} asks 0% cores, which Volcano never "
                "gives a GPU whose cores are all taken"
            )
            out.append(LedgerViolation(node, card.uuid, "cores-full", message))
        cores, grants = cores + grant.cores, grants + 1
    return out


# --- encoding: the GPULedger custom resource -------------------------------------------------------
#
# Each entry of ``spec.allocations`` is one line of text (issue 44: with a typed entry of ~25 JSON
# values, a PUT cost kube-apiserver 1.20 2.5-9x the CPU of a ConfigMap of the same bytes, 0.35 ms an
# entry; as text 0.03 ms an entry, 1.7-2x a ConfigMap, near the 1.2-1.7x any custom resource costs
# there: docs/benchmarks.md). The grammar, written and read only here (docs/design/ledger.md "Wire
# format" shows it with examples):
#
#   entry     = NAMESPACE "/" NAME " podUID=" UID [" queue=" QUEUE] [" podGroup=" GROUP]
#               " reservedAt=" SECONDS *(" committed" / " admitted" / " adopted") *(" | " container)
#   container = "#" INDEX [" " NAME] *(" " device)
#   device    = UUID "=" MIB "MiB," CORES "%" ["," "mig=" GROUP "/" PROFILE "/" POSITION]
#               ["," "slices=" START "+" SIZE]
#
# e.g. ``team-a/web-0 podUID=6c1f... queue=default reservedAt=1750000000 committed | #0 web
# GPU-8f1c...=12288MiB,0%``. Every name is written as it is when it holds only [A-Za-z0-9._~-] (every
# Kubernetes name, UUID and MIG profile does), percent-encoded (RFC 3986) otherwise, so no value can
# be mistaken for a separator. Numbers are ASCII digits within the bounds below; a token the grammar
# does not know is an error, not skipped: an entry written by a later release is refused whole (its
# node left alone), never read as less than it holds.
#
# Entries written by releases before issue 44 (one JSON object each, the same fields) are read too:
# the CRD leaves both kinds of item as sent (its items are untyped), and the next write of the ledger
# writes strings (``NodeLedger.legacy``).

MAX_CONTAINER_INDEX = 1 << 20  # an index into spec.containers: more containers than a pod object can hold
MAX_MIG_NUMBER = 1 << 10  # a MIG position, first slice or slice count (cards have 7 or 8 slices)
ENTRY_FLAGS = ("committed", "admitted", "adopted")
_SECTION = " | "
_PLAIN = re.compile(r"[A-Za-z0-9._~-]*").fullmatch


def _text(value: str) -> str:
    """A name as an entry writes it: as it is when plain, percent-encoded when it holds anything
    the grammar could read as a separator (or anything outside RFC 3986's unreserved characters)."""
    return value if _PLAIN(value) else quote(value, safe="")


def encode_entry(a: Allocation) -> str:
    """One ledger entry as its line of text (the grammar above); ``decode_entry`` reads it back equal."""
    out = [f"{_text(a.namespace)}/{_text(a.name)} podUID={_text(a.pod_uid)}"]
    if a.queue:
        out.append(f" queue={_text(a.queue)}")
    if a.group:
        out.append(f" podGroup={_text(a.group)}")
    out.append(f" reservedAt={a.reserved_at}")
    if a.committed:
        out.append(" committed")
    if a.admitted:
        out.append(" admitted")
    if a.adopted:
        out.append(" adopted")
    for c in a.containers:
        out.append(f"{_SECTION}#{c.index}")
        if c.name:
            out.append(f" {_text(c.name)}")
        for d in c.devices:
            out.append(f" {_text(d.uuid)}={d.memory}MiB,{d.cores}%")
            mig = d.mig
            if mig is not None:
                out.append(f",mig={_text(mig.group)}/{_text(mig.profile)}/{mig.position}")
                if mig.start is not None and mig.size is not None:
                    out.append(f",slices={mig.start}+{mig.size}")
    return "".join(out)


def _name(token: str, path: str, what: str) -> str:
    """A name as written: percent-decoded when it holds an escape."""
    if "%" not in token:
        return token
    try:
        return unquote(token, errors="strict")
    except UnicodeDecodeError:
        raise LedgerError(f"{path}: {what} {token!r} is not UTF-8 once percent-decoded") from None


def _number(text: str, path: str, what: str, most: int, least: int = 0) -> int:
    """ASCII digits within ``least``..``most``: what no GPU, pod or clock can hold is refused by name."""
    value = plain_int(text)
    if value is None:
        raise LedgerError(f"{path}: {what} {text!r} is not a number")
    if not least <= value <= most:
        raise LedgerError(f"{path}: {what} {value} is outside {least}..{most}")
    return value


_HEAD_KEYS = ("podUID", "queue", "podGroup", "reservedAt")
# The entries our writer writes, plain names and no MIG: matched whole by one expression, then the
# numbers checked against their bounds; anything else (or a number out of bounds) goes through
# ``_decode_entry``, which names what is wrong. A start decodes 100,000 entries: ~2x faster so.
_N = r"[A-Za-z0-9._~-]"
_WELL_FORMED = re.compile(  # possessive (*+): nothing to backtrack into, ~15 % faster
    rf"({_N}*+)/({_N}*+) podUID=({_N}++)(?: queue=({_N}++))?(?: podGroup=({_N}++))?"
    rf" reservedAt=([0-9]{{1,10}}+)( committed)?( admitted)?( adopted)?"
    rf"((?: \| #[0-9]{{1,7}}+(?: {_N}++(?!=))?+(?: {_N}*+=[0-9]{{1,8}}+MiB,[0-9]{{1,3}}+%)*+)*+)"
).fullmatch


def _well_formed_entry(text: str) -> Allocation | None:
    """The entry when it is one our writer writes without MIG, its numbers within bounds; else None."""
    m = _WELL_FORMED(text)
    if m is None:
        return None
    namespace, name, uid, queue, group, reserved, committed, admitted, adopted, rest = m.groups()
    containers = []
    for section in rest.split(" | #")[1:]:  # the expression matched: split by what it matched
        index, *tokens = section.split(" ")
        container = tokens.pop(0) if tokens and "=" not in tokens[0] else ""
        devices = []
        for token in tokens:
            uuid, _, numbers = token.partition("=")
            memory, _, cores = numbers.partition("MiB,")
            mib, percent = int(memory), int(cores[:-1])
            if mib > MAX_GPU_MEMORY_MIB or percent > MAX_CORES:
                return None
            devices.append(DeviceGrant(sys.intern(uuid), mib, percent))
        number = int(index)
        if number > MAX_CONTAINER_INDEX:
            return None
        containers.append(ContainerGrant(number, container, tuple(devices)))
    return Allocation(
        uid,
        sys.intern(namespace),
        name,
        sys.intern(queue or ""),
        tuple(containers),
        int(reserved),  # 10 digits at most: within MAX_UNIX_SECONDS
        group or "",
        adopted is not None,
        committed is not None,
        admitted is not None,
    )


def decode_entry(text: str, path: str = "entry") -> Allocation:
    """An entry's line of text (``encode_entry``); raises ``LedgerError`` naming ``path`` and the field."""
    return _well_formed_entry(text) or _decode_entry(text, path)


def _decode_entry(text: str, path: str) -> Allocation:
    """``decode_entry``'s checked path: every token read on its own, an error naming the field."""
    head, *sections = text.split(_SECTION)
    pod, *tokens = head.split(" ")
    namespace, slash, name = pod.partition("/")
    if not slash or "/" in name:
        raise LedgerError(f"{path}: {pod!r} is not NAMESPACE/NAME")
    fields: dict[str, str] = {}
    flags: set[str] = set()
    for token in tokens:
        key, eq, value = token.partition("=")
        if eq and key in _HEAD_KEYS:
            if key in fields:
                raise LedgerError(f"{path}: {key} is given twice")
            fields[key] = value
        elif not eq and token in ENTRY_FLAGS:
            if token in flags:
                raise LedgerError(f"{path}: {token} is given twice")
            flags.add(token)
        else:
            raise LedgerError(
                f"{path}: unknown field {token!r} (known: {', '.join((*_HEAD_KEYS, *ENTRY_FLAGS))})"
            )
    where = f"{path} ({pod})"
    uid = fields.get("podUID")
    if uid is None:
        raise LedgerError(f"{where}: podUID is missing")
    if not uid:
        raise LedgerError(
            f"{where}: podUID is empty (it is the entry's key)"
        )  # the CRD's minLength: 1 before issue 44
    reserved = fields.get("reservedAt")
    return Allocation(
        _name(uid, where, "podUID"),
        sys.intern(_name(namespace, where, "namespace")),
        _name(name, where, "name"),
        sys.intern(_name(fields.get("queue", ""), where, "queue")),
        tuple(_decode_container(section, where) for section in sections),
        _number(reserved, where, "reservedAt", MAX_UNIX_SECONDS) if reserved is not None else 0,
        _name(fields.get("podGroup", ""), where, "podGroup"),
        "adopted" in flags,
        "committed" in flags,
        "admitted" in flags,
    )


def _decode_container(section: str, where: str) -> ContainerGrant:
    index, *tokens = section.split(" ")
    path = f"{where} container {index}"
    if not index.startswith("#"):
        raise LedgerError(f"{path}: {index!r} is not #INDEX")
    number = _number(index[1:], path, "index", MAX_CONTAINER_INDEX)
    name = ""
    if tokens and "=" not in tokens[0]:
        name = _name(tokens.pop(0), path, "name")
    return ContainerGrant(number, name, tuple(_decode_device(token, path) for token in tokens))


def _decode_device(token: str, path: str) -> DeviceGrant:
    uuid, eq, rest = token.partition("=")
    memory, _, rest = rest.partition(",")
    cores, _, rest = rest.partition(",")
    if not eq or not memory.endswith("MiB") or not cores.endswith("%"):
        raise LedgerError(f"{path}: device {token!r} is not UUID=MEMORYMiB,CORES%")
    uuid = _name(uuid, path, "GPU uuid")
    where = f"{path} GPU {uuid}"
    mig, slices = None, None
    for attribute in rest.split(",") if rest else ():
        key, eq, value = attribute.partition("=")
        if key == "mig" and eq and mig is None:
            mig = value
        elif key == "slices" and eq and slices is None:
            slices = value
        else:
            raise LedgerError(f"{where}: unknown or repeated attribute {attribute!r} (known: mig, slices)")
    if mig is None and slices is not None:
        raise LedgerError(f"{where}: slices without mig")
    return DeviceGrant(
        sys.intern(uuid),
        _number(memory[:-3], where, "memoryMiB", MAX_GPU_MEMORY_MIB),
        _number(cores[:-1], where, "cores", MAX_CORES),
        _decode_mig(mig, slices, where) if mig is not None else None,
    )


def _decode_mig(mig: str, slices: str | None, where: str) -> MigSlot:
    parts = mig.split("/")
    if len(parts) != 3:
        raise LedgerError(f"{where}: mig {mig!r} is not GROUP/PROFILE/POSITION")
    group, profile, position = parts
    start = size = None
    if slices is not None:
        first, plus, count = slices.partition("+")
        if not plus:
            raise LedgerError(f"{where}: slices {slices!r} is not START+SIZE")
        start = _number(first, where, "slices start", MAX_MIG_NUMBER)
        size = _number(count, where, "slices size", MAX_MIG_NUMBER, 1)
    return MigSlot(
        _name(group, where, "mig group"),
        _name(profile, where, "mig profile"),
        _number(position, where, "mig position", MAX_MIG_NUMBER),
        start,
        size,
    )


def encode_ledger(ledger: NodeLedger, summary: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The GPULedger object for a write; carries ``resourceVersion`` when read from the API.

    Entries are written one string each, in (namespace, name, uid) order. ``summary``
    (engine/ledger_summary.py ``ledger_summary``) is stored as ``spec.summary`` for ``kubectl get``
    columns; it is derived, never read back by ``decode_ledger``, and left out when None.
    """
    metadata: dict[str, Any] = {"name": ledger.node, "labels": {"vgpu-guard.io/node": ledger.node}}
    if ledger.resource_version is not None:
        metadata["resourceVersion"] = ledger.resource_version
    allocations = sorted(ledger.allocations.values(), key=lambda a: (a.namespace, a.name, a.pod_uid))
    spec: dict[str, Any] = {
        "nodeName": ledger.node,
        "allocations": [encode_entry(a) for a in allocations],
    }
    if summary is not None:
        spec["summary"] = dict(summary)
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}


# --- entries written before issue 44: one JSON object each (read, never written) -------------------


def _field(obj: Mapping[str, Any], key: str, kind: type, path: str) -> Any:
    value = obj.get(key)
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise LedgerError(f"{path}.{key}: expected an integer, got {value!r}")
    if not isinstance(value, kind):
        raise LedgerError(f"{path}.{key}: expected {kind.__name__}, got {value!r}")
    return value


def _well_formed_allocation(raw: object) -> Allocation | None:
    """The entry as ``_decode_allocation`` reads it when every field has exactly the type our
    writer gives it and no device is a MIG instance; None sends anything else down the checked
    path (which names the field). Exact type tests and no field paths built ahead of an error:
    a start decodes 100,000 entries, ~2.5x faster this way; a property test holds both equal."""
    if type(raw) is not dict:
        return None
    raw_containers = raw.get("containers")
    if type(raw_containers) is not list:
        return None
    containers = []
    for c in raw_containers:
        if type(c) is not dict:
            return None
        index, raw_devices = c.get("index"), c.get("devices")
        if type(index) is not int or type(raw_devices) is not list or not 0 <= index <= MAX_CONTAINER_INDEX:
            return None
        devices = []
        for d in raw_devices:
            if type(d) is not dict or d.get("mig") is not None:
                return None
            uuid, memory, cores = d.get("uuid"), d.get("memoryMiB"), d.get("cores")
            if type(uuid) is not str or type(memory) is not int or type(cores) is not int:
                return None
            if not (0 <= memory <= MAX_GPU_MEMORY_MIB and 0 <= cores <= MAX_CORES):
                return None  # the checked path names the field
            devices.append(DeviceGrant(sys.intern(uuid), memory, cores))
        containers.append(ContainerGrant(index, str(c.get("name") or ""), tuple(devices)))
    uid, namespace, name, reserved = (
        raw.get("podUID"),
        raw.get("namespace"),
        raw.get("name"),
        raw.get("reservedAt"),
    )
    if type(uid) is not str or type(namespace) is not str or type(name) is not str:
        return None
    if reserved is not None and (type(reserved) is not int or not 0 <= reserved <= MAX_UNIX_SECONDS):
        return None
    return _allocation(
        raw, uid=uid, namespace=namespace, name=name, containers=tuple(containers), reserved_at=reserved or 0
    )


def _allocation(
    raw: Mapping[str, Any],
    *,
    uid: str,
    namespace: str,
    name: str,
    containers: tuple[ContainerGrant, ...],
    reserved_at: int,
) -> Allocation:
    """An entry from its checked fields; the rest are read leniently (absent or odd: empty, false)."""
    # Positional: keyword arguments cost twice as much to pass, and a start builds 100,000.
    return Allocation(
        uid,  # pod_uid
        sys.intern(namespace),
        name,
        sys.intern(str(raw.get("queue") or "")),
        containers,
        reserved_at,
        str(raw.get("podGroup") or ""),  # group
        bool(raw.get("adopted", False)),
        bool(raw.get("committed", False)),
        bool(raw.get("admitted", False)),
    )


def _decode_allocation(raw: object, path: str) -> Allocation:
    if not isinstance(raw, Mapping):
        raise LedgerError(f"{path}: expected an object")
    containers = []
    for ci, c in enumerate(_field(raw, "containers", list, path)):
        cpath = f"{path}.containers[{ci}]"
        if not isinstance(c, Mapping):
            raise LedgerError(f"{cpath}: expected an object")
        devices = []
        for di, d in enumerate(_field(c, "devices", list, cpath)):
            dpath = f"{cpath}.devices[{di}]"
            if not isinstance(d, Mapping):
                raise LedgerError(f"{dpath}: expected an object")
            mig = None
            if d.get("mig") is not None:
                m = d["mig"]
                if not isinstance(m, Mapping):
                    raise LedgerError(f"{dpath}.mig: expected an object")
                mpath = f"{dpath}.mig"
                mig = MigSlot(
                    group=_field(m, "group", str, mpath),
                    profile=_field(m, "profile", str, mpath),
                    position=_bounded(m, "position", mpath, MAX_MIG_NUMBER),
                    start=_bounded(m, "start", mpath, MAX_MIG_NUMBER) if "start" in m else None,
                    size=_bounded(m, "size", mpath, MAX_MIG_NUMBER, 1) if "size" in m else None,
                )
            devices.append(
                DeviceGrant(
                    uuid=sys.intern(_field(d, "uuid", str, dpath)),
                    memory=_bounded(d, "memoryMiB", dpath, MAX_GPU_MEMORY_MIB),
                    cores=_bounded(d, "cores", dpath, MAX_CORES),
                    mig=mig,
                )
            )
        containers.append(
            ContainerGrant(
                index=_bounded(c, "index", cpath, MAX_CONTAINER_INDEX),
                name=str(c.get("name") or ""),
                devices=tuple(devices),
            )
        )
    return _allocation(
        raw,
        uid=_field(raw, "podUID", str, path),
        namespace=_field(raw, "namespace", str, path),
        name=_field(raw, "name", str, path),
        containers=tuple(containers),
        reserved_at=_reserved_at(raw.get("reservedAt"), path),
    )


def _bounded(obj: Mapping[str, Any], key: str, path: str, most: int, least: int = 0) -> int:
    """An integer field within ``least``..``most``: what no GPU can hold is unreadable, not summed
    (the ledger's own sums are int64, and a write over that limit is refused by the API server).
    The CRD no longer types these entries (issue 44), so every bound it gave is checked here."""
    value: int = _field(obj, key, int, path)
    if not least <= value <= most:
        raise LedgerError(f"{path}.{key}: {value} is outside {least}..{most}")
    return value


def _reserved_at(value: object, path: str) -> int:
    """Unix seconds; absent reads as 0. A number in a string or a float is read as before; what is
    not a number at all is an error naming the field, never a crash of the reader."""
    if value is None or value == "":
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise LedgerError(f"{path}.reservedAt: expected an integer, got {value!r}")
    try:
        seconds = int(value)
    except (ValueError, OverflowError):
        raise LedgerError(f"{path}.reservedAt: expected an integer, got {value!r}") from None
    if not 0 <= seconds <= MAX_UNIX_SECONDS:
        raise LedgerError(f"{path}.reservedAt: {seconds} is outside 0..{MAX_UNIX_SECONDS}")
    return seconds


# The key under which a cached ledger carries its decoded form (never an API field: it has no
# slash, and the object holding it is never sent).
DECODED = "decoded"
_CACHED_METADATA = ("name", "namespace", "uid", "resourceVersion", "labels")


def cached_ledger(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What a watch cache keeps of a GPULedger: its identity and the ledger decoded once (or why it
    does not decode), not the raw entries.

    The raw list is the bulk of a ledger in memory (~1.6 KB per entry as JSON-decoded dicts,
    against ~0.4 KB decoded; 100,000 entries are 160 MB), and every reader decoded it again.
    ``decode_ledger`` returns the decoded form at once; the object must not be written back.
    """
    try:
        decoded: NodeLedger | str = decode_ledger(obj)
    except LedgerError as e:
        decoded = str(e)
    metadata = obj.get("metadata")
    meta = metadata if isinstance(metadata, Mapping) else {}
    spec = obj.get("spec")
    kept = {k: spec[k] for k in ("nodeName", "summary") if k in spec} if isinstance(spec, Mapping) else {}
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {k: meta[k] for k in _CACHED_METADATA if k in meta},
        # The summary stays (a few numbers and a line a GPU): the controller compares it with the
        # node's registration and rewrites it only when it no longer matches.
        "spec": kept,
        DECODED: decoded,
    }


def decode_ledger(obj: Mapping[str, Any]) -> NodeLedger:
    """Parse a GPULedger object; raises ``LedgerError`` naming the field path when malformed."""
    cached = obj.get(DECODED)
    if isinstance(cached, NodeLedger):
        return cached
    if isinstance(cached, str):
        raise LedgerError(cached)
    metadata = obj.get("metadata")
    spec = obj.get("spec")
    if not isinstance(metadata, Mapping) or not isinstance(spec, Mapping):
        raise LedgerError("GPULedger: metadata and spec must be objects")
    node = spec.get("nodeName") or metadata.get("name")
    if not isinstance(node, str) or not node:
        raise LedgerError("GPULedger: spec.nodeName is missing")
    name = metadata.get("name")
    if name is not None and name != node:
        # One ledger per node, named after it: a second object naming the same node must not
        # shadow (or be shadowed by) the real one, whichever order a LIST returns them in.
        raise LedgerError(f"GPULedger {name}: spec.nodeName {node!r} differs from the object's name")
    allocations: dict[str, Allocation] = {}
    raw_list = spec.get("allocations") or []
    if not isinstance(raw_list, list):
        raise LedgerError(f"GPULedger {node}: spec.allocations must be a list")
    legacy = False
    for i, raw in enumerate(raw_list):
        if type(raw) is str:
            allocation = decode_entry(raw, f"GPULedger {node}: spec.allocations[{i}]")
        elif isinstance(raw, Mapping):
            legacy = True
            allocation = _well_formed_allocation(raw) or _decode_allocation(
                raw, f"GPULedger {node}: spec.allocations[{i}]"
            )
        else:
            raise LedgerError(
                f"GPULedger {node}: spec.allocations[{i}]: expected a string (or an object, as releases "
                f"before issue 44 wrote entries), got {raw!r}"
            )
        if allocation.pod_uid in allocations:
            raise LedgerError(f"GPULedger {node}: pod uid {allocation.pod_uid} appears twice")
        allocations[allocation.pod_uid] = allocation
    rv = metadata.get("resourceVersion")
    return NodeLedger(
        node=node,
        allocations=allocations,
        resource_version=str(rv) if rv else None,
        legacy=legacy or _legacy_summary(spec.get("summary")),
    )


def _legacy_summary(summary: object) -> bool:
    """A summary as releases before issue 44 wrote it: one JSON object a GPU in ``perGPU``."""
    per_gpu = summary.get("perGPU") if isinstance(summary, Mapping) else None
    return isinstance(per_gpu, list) and any(isinstance(g, Mapping) for g in per_gpu)
