"""Queue guarantees against cluster capacity, per-queue ranges, and the queue hierarchy.

Why this exists (seed 001): Volcano's proportion plugin subtracts every queue's guarantee from the
cluster total. When the guarantees add up to more than the total, older Volcano panicked
(``resource is not sufficient to do operation: <cpu 32000.00> sub <cpu 36000.00>``) and newer
Volcano silently cannot honour them. Neither Volcano's nor Kueue's webhook compares guarantees with
capacity; this module does, with exact quantities.

The model, in the scheduler's terms:

- capacity of a resource = sum of ``status.allocatable`` over Ready, schedulable nodes that match
  ``queues.nodeSelector``, minus ``queues.reserve`` (never below zero);
- a queue's children are carved out of its own guarantee (Volcano's hierarchy: the children's sum
  must fit the parent's guarantee, a parent that sets none counts as zero), so what a subtree takes
  from the cluster is ``max(own guarantee, sum of the children's takes)``; the cluster total is the
  sum over the top-level queues (parent unset or ``root``). The ``root`` queue itself is the
  cluster and takes nothing of its own;
- a change is denied only when it makes an excess worse: an UPDATE that leaves the total where it
  was is admitted with a warning, so users can still edit a queue after the cluster shrank (the
  controller audit reports that state instead).

Everything here is pure; ``admit_queue`` is the admission handler ``engine.admission`` registers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import Action, GuardConfig
from vgpu_guard.engine.decision import AdmissionDecision, AdmissionRequest, decision_from, not_synced
from vgpu_guard.engine.objects import ObjMap
from vgpu_guard.engine.quantity import QuantityError, format_quantity, parse_quantity
from vgpu_guard.engine.rules.display import show
from vgpu_guard.engine.violations import Violation

__all__ = [
    "ROOT_QUEUE",
    "QueueAudit",
    "QueueCheck",
    "QueueTree",
    "ResourceCapacity",
    "ResourceUsage",
    "admit_queue",
    "audit_queues",
    "cluster_capacity",
    "field_violations",
    "format_amount",
    "validate_queue",
]


# Volcano's hierarchy root: it stands for the whole cluster and has no guarantee of its own.
ROOT_QUEUE = "root"
# Resources counted in bytes: printed with a binary suffix when that is exact (64Gi).
_BYTE_RESOURCES = frozenset({"memory", "ephemeral-storage"})


def format_amount(resource: str, value: Fraction) -> str:
    """An exact amount of ``resource`` as kubectl users read it (``32``, ``500m``, ``64Gi``)."""
    binary = resource in _BYTE_RESOURCES or resource.startswith("hugepages-")
    return format_quantity(value, binary=binary)


def _percent(part: Fraction, whole: Fraction) -> str:
    # Floor, so "90%" is never shown for 89.99 %: the threshold test itself stays exact.
    return f"{int(part * 100 / whole)}%"


# --- capacity -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResourceCapacity:
    """How much of one resource queues may guarantee, and where it comes from (for messages)."""

    amount: Fraction
    # Counted nodes (Ready, schedulable, in the pool) that have a non-zero amount of the resource.
    nodes: int
    reserved: Fraction = Fraction(0)

    def describe(self, resource: str) -> str:
        """``64 (8 Ready nodes)``, ``60 (8 Ready nodes, less 4 reserved)``."""
        if self.nodes == 0:
            where = f"no Ready node has {resource}"
        else:
            where = f"{self.nodes} Ready node{'s' if self.nodes != 1 else ''}"
        if self.reserved:
            where += f", less {format_amount(resource, self.reserved)} reserved"
        return f"{format_amount(resource, self.amount)} ({where})"


def cluster_capacity(view: ClusterView, config: GuardConfig) -> dict[str, ResourceCapacity]:
    """Capacity per resource; a resource no counted node has is absent (``capacity_for`` gives 0)."""
    selector = config.queues.node_selector
    totals: dict[str, Fraction] = {}
    counts: dict[str, int] = {}
    for node in view.nodes.values():
        if not node.schedulable or any(node.labels.get(k) != v for k, v in selector.items()):
            continue
        for resource, amount in node.allocatable.items():
            if amount > 0:
                totals[resource] = totals.get(resource, Fraction(0)) + amount
                counts[resource] = counts.get(resource, 0) + 1
    reserve = {k: parse_quantity(v).value for k, v in config.queues.reserve.items()}
    out: dict[str, ResourceCapacity] = {}
    for resource in totals.keys() | reserve.keys():
        held = reserve.get(resource, Fraction(0))
        amount = max(Fraction(0), totals.get(resource, Fraction(0)) - held)
        out[resource] = ResourceCapacity(amount=amount, nodes=counts.get(resource, 0), reserved=held)
    return out


def _capacity_for(capacity: Mapping[str, ResourceCapacity], resource: str) -> ResourceCapacity:
    return capacity.get(resource) or ResourceCapacity(amount=Fraction(0), nodes=0)


# --- reading queues -------------------------------------------------------------------------------


def _mapping(obj: object, *keys: str) -> Mapping[str, Any]:
    for key in keys:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    return obj if isinstance(obj, Mapping) else {}


def _name(obj: ObjMap) -> str:
    return str(_mapping(obj, "metadata").get("name") or "")


def _parent(obj: ObjMap) -> str:
    parent = _mapping(obj, "spec").get("parent")
    return parent if isinstance(parent, str) else ""


# (field path prefix, keys to reach the resource list)
_GUARANTEE = ("spec.guarantee.resource", ("spec", "guarantee", "resource"))
_CAPABILITY = ("spec.capability", ("spec", "capability"))
_DESERVED = ("spec.deserved", ("spec", "deserved"))


def _amounts(obj: ObjMap, keys: tuple[str, ...]) -> dict[str, Fraction]:
    """The parseable, non-negative amounts of one resource list (bad ones are ``field_violations``)."""
    out: dict[str, Fraction] = {}
    for resource, raw in _mapping(obj, *keys).items():
        try:
            value = parse_quantity(raw).value
        except QuantityError:
            continue
        if value >= 0:
            out[str(resource)] = value
    return out


@dataclass(frozen=True)
class QueueTree:
    """Every queue's parsed guarantee and parent: the arithmetic of the hierarchy.

    Immutable; ``replaced`` gives the tree after a CREATE/UPDATE (or a DELETE with ``None``), so
    an incoming queue always replaces its stored version by name and is never counted twice.
    """

    guarantees: Mapping[str, Mapping[str, Fraction]] = field(default_factory=dict)
    parents: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_queues(cls, queues: Iterable[ObjMap]) -> QueueTree:
        guarantees: dict[str, Mapping[str, Fraction]] = {}
        parents: dict[str, str] = {}
        for obj in queues:
            name = _name(obj)
            if name:
                guarantees[name] = _amounts(obj, _GUARANTEE[1])
                parents[name] = _parent(obj)
        return cls(guarantees=guarantees, parents=parents)

    def replaced(self, name: str, obj: ObjMap | None) -> QueueTree:
        guarantees = {k: v for k, v in self.guarantees.items() if k != name}
        parents = {k: v for k, v in self.parents.items() if k != name}
        if obj is not None:
            guarantees[name] = _amounts(obj, _GUARANTEE[1])
            parents[name] = _parent(obj)
        return QueueTree(guarantees=guarantees, parents=parents)

    def with_guarantee(self, name: str, resource: str, amount: Fraction) -> QueueTree:
        """The tree with one queue's guarantee of one resource set to ``amount``."""
        guarantees = dict(self.guarantees)
        guarantees[name] = {**self.guarantees.get(name, {}), resource: amount}
        return QueueTree(guarantees=guarantees, parents=self.parents)

    def own(self, name: str, resource: str) -> Fraction:
        return self.guarantees.get(name, {}).get(resource, Fraction(0))

    def children(self, name: str) -> list[str]:
        return sorted(q for q, p in self.parents.items() if p == name and q != name)

    def is_top_level(self, name: str) -> bool:
        """Top level: parent unset, ``root``, itself, or a queue that does not exist."""
        parent = self.parents.get(name, "")
        return parent in ("", ROOT_QUEUE, name) or parent not in self.parents

    def total(self, resource: str) -> Fraction:
        """What all queues together take of ``resource`` from the cluster."""
        seen: set[str] = set()

        def take(name: str) -> Fraction:
            seen.add(name)
            children = sum((take(c) for c in self.children(name) if c not in seen), Fraction(0))
            return max(self.own(name, resource), children)

        tops = [q for q in sorted(self.parents) if q != ROOT_QUEUE and self.is_top_level(q)]
        total = sum((take(q) for q in tops), Fraction(0))
        # Queues in a parent cycle are reachable from no top-level queue; count them on their own.
        for name in sorted(self.parents):
            if name not in seen and name != ROOT_QUEUE:
                total += take(name)
        return total

    def children_sum(self, name: str, resource: str) -> Fraction:
        return sum((self.own(c, resource) for c in self.children(name)), Fraction(0))

    def child_resources(self, name: str) -> list[str]:
        """The resources any child of the queue guarantees, sorted."""
        return sorted({r for c in self.children(name) for r in self.guarantees.get(c, {})})

    def excess(self, name: str, resource: str) -> Fraction:
        """How far the children's guarantees exceed the queue's own (zero or less: they fit)."""
        return self.children_sum(name, resource) - self.own(name, resource)

    def cycles(self) -> list[tuple[str, ...]]:
        """Every parent cycle, each in ``spec.parent`` order from its first queue by name.

        Admission judges each write against the queues as they are, so two writes admitted at the
        same moment (``qx.parent=qy`` and ``qy.parent=qx``) can close a cycle neither made alone;
        the controller's audit finds it here. Why it matters (volcano-sh/volcano
        pkg/scheduler/plugins/capacity/capacity.go at ed72c7c): with hierarchy enabled the capacity
        plugin builds ancestors by following ``spec.parent`` (``updateAncestors``); in a cycle each
        queue is the other's child, so none is a leaf, a job in one fails
        ``buildHierarchicalQueueAttrs`` ("is not leaf queue"), and the plugin then refuses
        allocation and enqueueing to every queue of the session (``readyToSchedule``).
        """
        found: list[tuple[str, ...]] = []
        done: set[str] = set()
        for start in sorted(self.parents):
            path: list[str] = []
            on_path: set[str] = set()
            name = start
            while name in self.parents and name != ROOT_QUEUE and name not in done and name not in on_path:
                path.append(name)
                on_path.add(name)
                name = self.parents[name]
            if name in on_path:
                loop = path[path.index(name) :]
                first = loop.index(min(loop))
                found.append(tuple(loop[first:] + loop[:first]))
            done.update(path)
        return sorted(found)

    def ancestors(self, name: str) -> list[str]:
        """Parents up to the top, stopping at a cycle."""
        out: list[str] = []
        parent = self.parents.get(name, "")
        while parent and parent != ROOT_QUEUE and parent in self.parents and parent not in out:
            out.append(parent)
            if parent == name:
                break
            parent = self.parents.get(parent, "")
        return out


# --- per-queue field checks -----------------------------------------------------------------------


# The first Volcano release whose queue webhook requires a deserved entry for every guaranteed
# resource (validate_queue.go: "deserved[cpu] must be >= guarantee[cpu]=..." on a missing entry).
DESERVED_REQUIRED_FROM = (1, 14)
# What the queue audit judges stored queues by: only what every Volcano release checks. A release's
# admission rules are for writes; a queue stored under an older release is not re-judged by them.
EVERY_RELEASE = (1, 0)


def _deserved_missing(obj: ObjMap, release: tuple[int, int] | None) -> list[Violation]:
    """Volcano 1.14+ denies a guaranteed resource without a deserved entry; so do we, for that release."""
    if release is not None and release < DESERVED_REQUIRED_FROM:
        return []
    raw_guarantee = _mapping(obj, *_GUARANTEE[1])
    deserved = _mapping(obj, *_DESERVED[1])
    guarantee = _amounts(obj, _GUARANTEE[1])
    return [
        Violation(
            "queue-deserved-missing",
            f"{_DESERVED[0]}.{resource}",
            f"not set while spec.guarantee.resource.{resource} is {show(raw_guarantee[resource])}; "
            f"Volcano 1.14 and later deny this (queues.volcanoVersion), set spec.deserved.{resource} "
            f"to at least {format_amount(resource, guarantee[resource])}",
        )
        for resource in sorted(guarantee)
        if resource not in deserved
    ]


def field_violations(obj: ObjMap, *, release: tuple[int, int] | None) -> list[Violation]:
    """Checks of the queue alone: quantities, guarantee <= capability, deserved between the two.

    ``release`` is the Volcano (major, minor) whose rules apply (``queues.volcanoVersion``; None:
    the latest), so a fleet on an older Volcano is not denied what its Volcano accepts.
    """
    out = _quantity_violations(obj)
    out.extend(_range_violations(obj))
    out.extend(_deserved_missing(obj, release))
    return out


def _quantity_violations(obj: ObjMap) -> list[Violation]:
    """Each amount of guarantee, capability and deserved parses as a quantity and is not negative."""
    out: list[Violation] = []
    for prefix, keys in (_GUARANTEE, _CAPABILITY, _DESERVED):
        for resource, raw in _mapping(obj, *keys).items():
            path = f"{prefix}.{resource}"
            try:
                value = parse_quantity(raw).value
            except QuantityError as e:
                out.append(Violation("queue-quantity", path, f"{e}; write e.g. 32, 500m or 64Gi"))
                continue
            if value < 0:
                out.append(
                    Violation("queue-quantity", path, f"{show(raw)} must not be negative; write 0 or more")
                )
    return out


def _range_violations(obj: ObjMap) -> list[Violation]:
    """guarantee <= capability, and guarantee <= deserved <= capability, per resource; each
    message quotes the amounts as written and names the bound to write instead."""
    out: list[Violation] = []
    guarantee = _amounts(obj, _GUARANTEE[1])
    capability = _amounts(obj, _CAPABILITY[1])
    deserved = _amounts(obj, _DESERVED[1])
    raw_guarantee, raw_capability, raw_deserved = (
        _mapping(obj, *k) for _, k in (_GUARANTEE, _CAPABILITY, _DESERVED)
    )
    for resource, value in sorted(guarantee.items()):
        cap = capability.get(resource)
        if cap is not None and value > cap:
            out.append(
                Violation(
                    "queue-guarantee-capability",
                    f"spec.guarantee.resource.{resource}",
                    f"{show(raw_guarantee[resource])} exceeds spec.capability.{resource} "
                    f"{show(raw_capability[resource])}; lower the guarantee to at most "
                    f"{format_amount(resource, cap)} or raise the capability",
                )
            )
    for resource, value in sorted(deserved.items()):
        low, high = guarantee.get(resource), capability.get(resource)
        if low is not None and value < low:
            out.append(
                Violation(
                    "queue-deserved-range",
                    f"spec.deserved.{resource}",
                    f"{show(raw_deserved[resource])} is below spec.guarantee.resource.{resource} "
                    f"{show(raw_guarantee[resource])}; set deserved to at least "
                    f"{format_amount(resource, low)}",
                )
            )
        if high is not None and value > high:
            out.append(
                Violation(
                    "queue-deserved-range",
                    f"spec.deserved.{resource}",
                    f"{show(raw_deserved[resource])} is above spec.capability.{resource} "
                    f"{show(raw_capability[resource])}; set deserved to at most "
                    f"{format_amount(resource, high)}",
                )
            )
    return out


# --- checks against the other queues and the cluster ----------------------------------------------


@dataclass(frozen=True)
class QueueCheck:
    """What ``validate_queue`` found: violations (actions applied later) and plain warnings."""

    violations: tuple[Violation, ...] = ()
    warnings: tuple[str, ...] = ()


def _parent_violations(name: str, obj: ObjMap, after: QueueTree) -> list[Violation]:
    parent = _parent(obj)
    if parent in ("", ROOT_QUEUE):
        return []
    if parent == name:
        return [
            Violation(
                "queue-hierarchy", "spec.parent", f"{parent} is this queue; a queue cannot be its own parent"
            )
        ]
    if parent not in after.parents:
        return [
            Violation(
                "queue-hierarchy",
                "spec.parent",
                f"{parent} does not exist; create queue {parent} first or fix spec.parent",
            )
        ]
    if name in after.ancestors(name):
        return [
            Violation(
                "queue-hierarchy",
                "spec.parent",
                f"{parent} is a descendant of this queue; choose a parent outside its subtree",
            )
        ]
    return []


def _siblings_message(
    raw: object, resource: str, *, parent: str, children_sum: Fraction, limit: Fraction, own: Fraction
) -> str:
    limit_text = f"guarantees {format_amount(resource, limit)}" if limit else f"guarantees no {resource}"
    headroom = max(Fraction(0), own - (children_sum - limit))
    return (
        f"{show(raw)} would bring the guaranteed {resource} of queue {parent}'s children to "
        f"{format_amount(resource, children_sum)} but {parent} {limit_text}; lower it to at most "
        f"{format_amount(resource, headroom)} or raise {parent}'s guarantee"
    )


def _children_message(tree: QueueTree, name: str, resource: str, raw: object | None) -> str:
    children = tree.children(name)
    shown = ", ".join(children[:5]) + (f", and {len(children) - 5} more" if len(children) > 5 else "")
    needed = format_amount(resource, tree.children_sum(name, resource))
    value = "unset" if raw is None else f"{show(raw)} is"
    return (
        f"{value} less than its children's guarantees {needed} ({shown}); "
        f"raise it to at least {needed} or lower the children's guarantees first"
    )


def _capacity_message(
    raw: object,
    resource: str,
    *,
    total: Fraction,
    without: Fraction,
    capacity: ResourceCapacity,
    own: Fraction,
) -> str:
    head = (
        f"{show(raw)} would bring guaranteed {resource} to {format_amount(resource, total)} "
        f"but cluster capacity is {capacity.describe(resource)}"
    )
    if without > capacity.amount:
        return (
            f"{head} and the other queues already guarantee {format_amount(resource, without)}; "
            f"remove this guarantee, lower the other queues' guarantees or add nodes"
        )
    # The total rises one for one with this queue's guarantee above the knee, so lowering it by
    # the excess is exactly enough.
    return (
        f"{head}; lower it to at most {format_amount(resource, own - (total - capacity.amount))} or add nodes"
    )


def validate_queue(obj: ObjMap, *, old: ObjMap | None, view: ClusterView, config: GuardConfig) -> QueueCheck:
    """All findings for a Queue CREATE (``old`` None) or UPDATE, against a synced view.

    The incoming queue replaces the view's queue of the same name. A finding against the other
    queues or the cluster is a violation only when this change makes it worse; otherwise it comes
    back as a warning so unrelated edits stay possible.
    """
    name = _name(obj)
    violations = field_violations(obj, release=config.queues.volcano_release)
    tree = QueueTree.from_queues(view.queues.values())
    # UPDATE: the API server's old version; CREATE: the view as it is (a stale same-name entry
    # included, so a re-created queue is judged against what the scheduler still sees).
    before = tree.replaced(name, old) if old is not None else tree
    after = tree.replaced(name, obj)
    violations.extend(_parent_violations(name, obj, after))
    violations.extend(_sibling_violations(name, obj, before, after))
    violations.extend(_children_violations(name, obj, before, after))
    capacity_violations, warnings = _capacity_findings(name, obj, before, after, view=view, config=config)
    violations.extend(capacity_violations)
    return QueueCheck(violations=tuple(violations), warnings=tuple(warnings))


def _sibling_violations(name: str, obj: ObjMap, before: QueueTree, after: QueueTree) -> list[Violation]:
    """The queue's guarantee pushes its parent's children past the parent's own guarantee (and
    this change made it worse, or moved the queue under that parent)."""
    parent = _parent(obj)
    if parent in ("", ROOT_QUEUE, name) or parent not in after.parents:
        return []
    raw_guarantee = _mapping(obj, *_GUARANTEE[1])
    guarantee = after.guarantees.get(name, {})
    out = []
    for resource in sorted(guarantee):
        excess_after = after.excess(parent, resource)
        if excess_after > 0 and (
            excess_after > before.excess(parent, resource) or before.parents.get(name) != parent
        ):
            message = _siblings_message(
                raw_guarantee[resource],
                resource,
                parent=parent,
                children_sum=after.children_sum(parent, resource),
                limit=after.own(parent, resource),
                own=guarantee[resource],
            )
            out.append(Violation("queue-hierarchy", f"{_GUARANTEE[0]}.{resource}", message))
    return out


def _children_violations(name: str, obj: ObjMap, before: QueueTree, after: QueueTree) -> list[Violation]:
    """The queue's children guarantee more than the queue itself (a new queue, or worse than before)."""
    if not after.children(name):
        return []
    raw_guarantee = _mapping(obj, *_GUARANTEE[1])
    out = []
    for resource in after.child_resources(name):
        excess_after = after.excess(name, resource)
        if excess_after > 0 and (name not in before.parents or excess_after > before.excess(name, resource)):
            message = _children_message(after, name, resource, raw_guarantee.get(resource))
            out.append(Violation("queue-hierarchy", f"{_GUARANTEE[0]}.{resource}", message))
    return out


def _capacity_findings(
    name: str, obj: ObjMap, before: QueueTree, after: QueueTree, *, view: ClusterView, config: GuardConfig
) -> tuple[list[Violation], list[str]]:
    """The queues' guarantees against the cluster's capacity, per resource the queue guarantees:
    a violation when this change grows a total past capacity; a warning when the total is already
    past it, or grows past the warning level (none in audit mode, or for a zero guarantee)."""
    raw_guarantee = _mapping(obj, *_GUARANTEE[1])
    guarantee = after.guarantees.get(name, {})
    capacity = cluster_capacity(view, config)
    fraction = Fraction(config.queues.warn_fraction)
    quiet = config.action_for("queue-guarantee-capacity") is Action.AUDIT
    violations: list[Violation] = []
    warnings: list[str] = []
    for resource in sorted(guarantee):
        cap = _capacity_for(capacity, resource)
        total = after.total(resource)
        grew = total > before.total(resource)
        path = f"{_GUARANTEE[0]}.{resource}"
        if total > cap.amount and grew:
            without = after.with_guarantee(name, resource, Fraction(0)).total(resource)
            message = _capacity_message(
                raw_guarantee[resource],
                resource,
                total=total,
                without=without,
                capacity=cap,
                own=guarantee[resource],
            )
            violations.append(Violation("queue-guarantee-capacity", path, message))
        elif quiet or guarantee[resource] == 0:
            continue
        elif total > cap.amount:
            warnings.append(
                f"[queue-guarantee-capacity] {path}: queues guarantee {format_amount(resource, total)} "
                f"of capacity {format_amount(resource, cap.amount)}; lower them or add nodes"
            )
        elif grew and total > fraction * cap.amount:
            warnings.append(
                f"[queue-guarantee-capacity] {path}: queues would guarantee {format_amount(resource, total)} "
                f"of {format_amount(resource, cap.amount)} ({_percent(total, cap.amount)}, warning level "
                f"{_percent(fraction, Fraction(1))})"
            )
    return violations, warnings


def admit_queue(request: AdmissionRequest, view: ClusterView, config: GuardConfig) -> AdmissionDecision:
    """The admission handler for Queue CREATE/UPDATE (registered by ``engine.admission``).

    On an unsynced view the queue's own field errors still deny (they need no cluster state);
    anything else gets the retriable 503, never a guess from a partial view.
    """
    obj = request.object or {}
    if not view.synced:
        own = field_violations(obj, release=config.queues.volcano_release)
        if any(config.action_for(v.rule) is Action.ENFORCE for v in own):
            return decision_from(own, config, obj=obj)
        return not_synced("nodes and queues")
    old = request.old_object if request.operation == "UPDATE" else None
    check = validate_queue(obj, old=old, view=view, config=config)
    return decision_from(list(check.violations), config, warnings=list(check.warnings), obj=obj)


def delete_violations(name: str, view: ClusterView) -> list[Violation]:
    """Deleting a queue that is some queue's parent would orphan its children (Volcano denies it too)."""
    tree = QueueTree.from_queues(view.queues.values())
    children = tree.children(name)
    if not children:
        return []
    shown = ", ".join(children[:5]) + (f" and {len(children) - 5} more" if len(children) > 5 else "")
    return [
        Violation(
            "queue-hierarchy",
            "metadata.name",
            f"{name} is the parent of {len(children)} queue(s) ({shown}); deleting it would orphan them; "
            f"delete those queues or move them to another parent (spec.parent) first",
        )
    ]


def admit_queue_delete(
    request: AdmissionRequest, view: ClusterView, config: GuardConfig
) -> AdmissionDecision:
    """The admission handler for Queue DELETE (registered by ``engine.admission``).

    The name comes from the request (a DELETE carries the queue in ``oldObject``, and kube-apiserver
    always sets ``request.name``). On an unsynced view the children are unknown: retriable 503.
    """
    old = request.old_object or {}
    name = request.name or _name(old)
    if not view.synced:
        return not_synced("nodes and queues")
    return decision_from(delete_violations(name, view), config, obj=old)


# --- the whole picture, for the controller audit --------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResourceUsage:
    """One resource: what the queues take together against what the cluster has."""

    resource: str
    guaranteed: Fraction
    capacity: ResourceCapacity

    @property
    def ratio(self) -> Fraction | None:
        """guaranteed / capacity; None when capacity is zero (infinite if anything is guaranteed)."""
        return self.guaranteed / self.capacity.amount if self.capacity.amount else None

    @property
    def exceeded(self) -> bool:
        return self.guaranteed > self.capacity.amount


@dataclass(frozen=True)
class QueueAudit:
    """Every guaranteed resource's usage, and each queue's findings (only queues with findings)."""

    resources: Mapping[str, ResourceUsage]
    findings: Mapping[str, tuple[Violation, ...]]


def audit_queues(view: ClusterView, config: GuardConfig) -> QueueAudit:
    """Judge the queues as they stand (the controller's pass after capacity or queues changed).

    Same arithmetic as admission; the capacity finding lands on every queue that guarantees an
    over-committed resource, since any of them giving some up fixes it.
    """
    tree = QueueTree.from_queues(view.queues.values())
    capacity = cluster_capacity(view, config)
    resources = sorted({r for g in tree.guarantees.values() for r, v in g.items() if v > 0})
    usage = {r: ResourceUsage(r, tree.total(r), _capacity_for(capacity, r)) for r in resources}
    findings: dict[str, tuple[Violation, ...]] = {}
    for name in sorted(view.queues):
        obj = view.queues[name]
        found = field_violations(obj, release=EVERY_RELEASE)
        found.extend(_parent_violations(name, obj, tree))
        raw_guarantee = _mapping(obj, *_GUARANTEE[1])
        for resource in tree.child_resources(name):
            if tree.excess(name, resource) > 0:
                found.append(
                    Violation(
                        "queue-hierarchy",
                        f"{_GUARANTEE[0]}.{resource}",
                        _children_message(tree, name, resource, raw_guarantee.get(resource)),
                    )
                )
        for resource, amount in sorted(tree.guarantees.get(name, {}).items()):
            use = usage.get(resource)
            if use is None or not use.exceeded or amount == 0:
                continue
            excess = use.guaranteed - use.capacity.amount
            found.append(
                Violation(
                    "queue-guarantee-capacity",
                    f"{_GUARANTEE[0]}.{resource}",
                    f"{show(raw_guarantee[resource])} is part of {format_amount(resource, use.guaranteed)} "
                    f"guaranteed {resource} but cluster capacity is {use.capacity.describe(resource)}; "
                    f"the queues must give up {format_amount(resource, excess)} or nodes be added",
                )
            )
        if found:
            findings[name] = tuple(found)
    return QueueAudit(resources=usage, findings=findings)
