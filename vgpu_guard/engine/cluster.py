"""ClusterView: the immutable snapshot of cluster state every decision reads.

The webhook builds it from watch-fed caches, ``review`` from a ``--cluster`` file, ``simulate`` and
the controller from the API. The core only ever sees this object, which is why the four cannot
disagree. Building it from raw API objects never raises: a node with a bad registration or a bad
allocatable quantity is kept (it still counts for CPU capacity) with its problem recorded.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import cached_property
from typing import TypeVar

from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.devices import REGISTER_ANNOTATION, GpuDevice, Mode, parse_registration
from vgpu_guard.engine.objects import ObjMap
from vgpu_guard.engine.quantity import QuantityError, parse_quantity
from vgpu_guard.engine.resources import scheduler_units

__all__ = ["ClusterView", "FleetFacts", "FleetTally", "NodeInfo", "Taint", "node_info"]

_K = TypeVar("_K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class NodeInfo:
    """What the core needs to know about one node."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True
    allocatable: Mapping[str, Fraction] = field(default_factory=dict)
    gpus: tuple[GpuDevice, ...] = ()
    mode: Mode | None = None
    # Why the node's GPUs are not usable (bad registration, missing allocatable), or None.
    gpu_problem: str | None = None
    # Problems that cost no capacity of the node: an allocatable quantity that does not parse, a
    # card the registration marks unhealthy or registers twice (engine/devices.py).
    problems: tuple[str, ...] = ()

    @property
    def schedulable(self) -> bool:
        """Ready and not cordoned: the nodes whose capacity counts."""
        return self.ready and not self.unschedulable

    @cached_property
    def allocatable_units(self) -> Mapping[str, int]:
        """``allocatable`` in kube-scheduler's whole units (cpu in millicores), for NodeResourcesFit."""
        return {name: scheduler_units(name, value) for name, value in self.allocatable.items()}

    @property
    def vgpu_capable(self) -> bool:
        return bool(self.gpus) and self.gpu_problem is None


def _condition_true(obj: ObjMap, kind: str) -> bool:
    status = obj.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    if not isinstance(conditions, list):
        return False
    return any(
        isinstance(c, Mapping) and c.get("type") == kind and c.get("status") == "True" for c in conditions
    )


def _str_map(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): str(v) for k, v in value.items() if isinstance(k, str)}


def node_info(obj: ObjMap, config: GuardConfig) -> NodeInfo:
    """Parse a Node object; never raises (problems are recorded on the result)."""
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(metadata, Mapping)
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    status = obj.get("status") if isinstance(obj.get("status"), Mapping) else {}
    assert isinstance(status, Mapping)
    name = str(metadata.get("name") or "")
    annotations = _str_map(metadata.get("annotations"))
    taints = tuple(
        Taint(key=str(t.get("key", "")), value=str(t.get("value", "") or ""), effect=str(t.get("effect", "")))
        for t in spec.get("taints") or []
        if isinstance(t, Mapping)
    )
    allocatable: dict[str, Fraction] = {}
    problems: list[str] = []
    raw_allocatable = status.get("allocatable")
    if isinstance(raw_allocatable, Mapping):
        for resource, raw in raw_allocatable.items():
            try:
                allocatable[str(resource)] = parse_quantity(raw).value
            except QuantityError as e:
                problems.append(f"status.allocatable[{resource}]: {e}")
    nvidia = config.nvidia
    gpus: tuple[GpuDevice, ...] = ()
    mode: Mode | None = None
    gpu_problem: str | None = None
    if REGISTER_ANNOTATION in annotations:
        mig_models = [m for entry in nvidia.known_mig_geometries for m in entry.models]
        registration = parse_registration(annotations[REGISTER_ANNOTATION], mig_models=mig_models)
        gpus, mode, gpu_problem = registration.devices, registration.mode, registration.error
        # A card's fault (health Volcano reads as false, a UUID registered twice) costs that card,
        # not the node: its other cards keep taking pods, as Volcano keeps scheduling them.
        problems.extend(registration.notes)
        if gpu_problem is None:
            missing = [
                r
                for r in (nvidia.resource_count_name, nvidia.resource_memory_name, nvidia.resource_core_name)
                if allocatable.get(r, Fraction(0)) <= 0
            ]
            if missing:
                gpu_problem = f"registered GPUs but allocatable has no {', '.join(missing)}"
    return NodeInfo(
        name=name,
        labels=_str_map(metadata.get("labels")),
        taints=taints,
        unschedulable=bool(spec.get("unschedulable")),
        ready=_condition_true(obj, "Ready"),
        allocatable=allocatable,
        gpus=gpus,
        mode=mode,
        gpu_problem=gpu_problem,
        problems=tuple(problems),
    )


@dataclass(frozen=True)
class FleetFacts:
    """What reviews ask about the fleet as a whole, for one ``nodes`` mapping.

    Every pod review asks for the largest card, the offered modes, the most GPUs on a node and
    whether some node carries a scaling label. Walking 5,000 nodes (40,000 cards) for them cost a
    review 3.6 ms against 0.16 ms at 100 nodes (issue 44), so a cache that watches nodes keeps a
    ``FleetTally`` up to date as nodes change and hands out these facts with its nodes mapping;
    views built another way compute them with ``of``. ``nodes`` is the mapping they describe: a
    view uses them only for that very mapping.
    """

    nodes: Mapping[str, NodeInfo]
    gpu_node_count: int
    offered_modes: frozenset[Mode]
    max_gpus_per_node: int
    largest_card_memory: int
    mig_card_types: tuple[str, ...]
    label_keys: frozenset[str]

    @classmethod
    def of(cls, nodes: Mapping[str, NodeInfo]) -> FleetFacts:
        """The facts computed from scratch (offline views, tests: the tally's reference)."""
        tally = FleetTally()
        for info in nodes.values():
            tally.add(info)
        return tally.facts(nodes)

    @cached_property
    def gpu_nodes(self) -> tuple[NodeInfo, ...]:
        """Nodes whose vGPU registration is usable, in name order (built once per nodes mapping,
        shared by every view that holds the mapping)."""
        return tuple(sorted((n for n in self.nodes.values() if n.vgpu_capable), key=lambda n: n.name))


class FleetTally:
    """Counts behind ``FleetFacts``, kept by adding and removing one node at a time.

    A node's change costs the size of that node (its cards and labels), not of the fleet; the
    facts are read from counts of distinct values (card sizes, modes, label keys: a handful).
    """

    def __init__(self) -> None:
        self.gpu_nodes = 0
        self.modes: Counter[Mode] = Counter()
        self.gpus_per_node: Counter[int] = Counter()
        self.card_memory: Counter[int] = Counter()
        self.mig_types: Counter[str] = Counter()
        self.label_keys: Counter[str] = Counter()

    def add(self, info: NodeInfo) -> None:
        self._count(info, 1)

    def remove(self, info: NodeInfo) -> None:
        self._count(info, -1)

    def _count(self, info: NodeInfo, sign: int) -> None:
        for key in info.labels:
            _bump(self.label_keys, key, sign)
        if not info.vgpu_capable:
            return
        self.gpu_nodes += sign
        if info.mode is not None:
            _bump(self.modes, info.mode, sign)
        _bump(self.gpus_per_node, len(info.gpus), sign)
        for gpu in info.gpus:
            _bump(self.card_memory, gpu.memory, sign)
            if info.mode == "mig":
                _bump(self.mig_types, gpu.type, sign)

    def facts(self, nodes: Mapping[str, NodeInfo]) -> FleetFacts:
        """The facts as counted now, for ``nodes`` (the mapping these counts describe)."""
        return FleetFacts(
            nodes=nodes,
            gpu_node_count=self.gpu_nodes,
            offered_modes=frozenset(self.modes),
            max_gpus_per_node=max(self.gpus_per_node, default=0),
            largest_card_memory=max(self.card_memory, default=0),
            mig_card_types=tuple(sorted(self.mig_types)),
            label_keys=frozenset(self.label_keys),
        )


def _bump(counter: Counter[_K], key: _K, sign: int) -> None:
    """Add ``sign`` to ``key``'s count; a count that reaches 0 leaves (so the keys are what exists)."""
    count = counter[key] + sign
    if count:
        counter[key] = count
    else:
        del counter[key]


@dataclass(frozen=True)
class ClusterView:
    """An immutable snapshot; derived facts are computed once, on first use.

    ``synced`` is False until every cache behind the view has listed once: decisions that depend
    on cluster state refuse to guess from a partial view (seed 001's crash came from one).
    """

    nodes: Mapping[str, NodeInfo] = field(default_factory=dict)
    queues: Mapping[str, ObjMap] = field(default_factory=dict)
    podgroups: Mapping[tuple[str, str], ObjMap] = field(default_factory=dict)
    # Volcano HyperNodes by name (topology.volcano.sh/v1alpha1), for IB clusters by tier.
    hypernodes: Mapping[str, ObjMap] = field(default_factory=dict)
    # Our GPULedger objects by node name, and GangPlacements by (namespace, group).
    ledgers: Mapping[str, ObjMap] = field(default_factory=dict)
    gang_placements: Mapping[tuple[str, str], ObjMap] = field(default_factory=dict)
    synced: bool = True
    # Where the state came from, for messages and review output ("cluster", "file x.yaml", ...).
    source: str = "cluster"
    # The fleet facts of ``nodes`` when the builder keeps them (kube/view_cache.py); None: computed
    # on first use. Facts of another mapping (a ``replace`` of nodes) are ignored.
    fleet: FleetFacts | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_objects(
        cls, objects: Iterable[ObjMap], config: GuardConfig, *, synced: bool = True, source: str = "cluster"
    ) -> ClusterView:
        """Build a view from raw API objects of any kind; unknown kinds are ignored."""
        nodes: dict[str, NodeInfo] = {}
        queues: dict[str, ObjMap] = {}
        podgroups: dict[tuple[str, str], ObjMap] = {}
        hypernodes: dict[str, ObjMap] = {}
        ledgers: dict[str, ObjMap] = {}
        placements: dict[tuple[str, str], ObjMap] = {}
        for obj in objects:
            kind = obj.get("kind")
            metadata = obj.get("metadata")
            if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str):
                continue
            if kind == "Node":
                info = node_info(obj, config)
                nodes[info.name] = info
            elif kind == "Queue":
                queues[metadata["name"]] = obj
            elif kind == "PodGroup":
                podgroups[(str(metadata.get("namespace") or "default"), metadata["name"])] = obj
            elif kind == "HyperNode":
                hypernodes[metadata["name"]] = obj
            elif kind == "GPULedger":
                ledgers[metadata["name"]] = obj
            elif kind == "GangPlacement":
                placements[(str(metadata.get("namespace") or "default"), metadata["name"])] = obj
        return cls(
            nodes=nodes,
            queues=queues,
            podgroups=podgroups,
            hypernodes=hypernodes,
            ledgers=ledgers,
            gang_placements=placements,
            synced=synced,
            source=source,
        )

    def with_admitted(self, obj: ObjMap) -> ClusterView:
        """The view after ``obj`` was admitted or recorded (offline review and simulate: each queue
        sees the previous ones, each gang member sees its group's placement)."""
        metadata = obj.get("metadata")
        if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str):
            return self
        if obj.get("kind") == "Queue":
            return replace(self, queues={**self.queues, metadata["name"]: obj})
        key = (str(metadata.get("namespace") or "default"), metadata["name"])
        if obj.get("kind") == "GangPlacement":
            return replace(self, gang_placements={**self.gang_placements, key: obj})
        if obj.get("kind") == "PodGroup":
            return replace(self, podgroups={**self.podgroups, key: obj})
        return self

    def ledger(self, node: str) -> ObjMap | None:
        """The GPULedger of ``node`` as cached, or None: one node's read, whatever the fleet's size
        (the arbiter reads the ledger of the node a Binding names, never the others)."""
        return self.ledgers.get(node)

    @cached_property
    def facts(self) -> FleetFacts:
        """The fleet facts of ``nodes``: the builder's when they describe this very mapping."""
        if self.fleet is not None and self.fleet.nodes is self.nodes:
            return self.fleet
        return FleetFacts.of(self.nodes)

    @property
    def gpu_nodes(self) -> tuple[NodeInfo, ...]:
        """Nodes whose vGPU registration is usable, in name order."""
        return self.facts.gpu_nodes

    @property
    def offered_modes(self) -> frozenset[Mode]:
        return self.facts.offered_modes

    @property
    def max_gpus_per_node(self) -> int:
        return self.facts.max_gpus_per_node

    @property
    def largest_card_memory(self) -> int:
        """Largest registered card memory, in plugin units."""
        return self.facts.largest_card_memory

    def any_node_labelled(self, labels: tuple[str, ...]) -> bool:
        """Whether some node carries one of ``labels`` (every admission request asks)."""
        keys = self.facts.label_keys
        return any(label in keys for label in labels)

    @property
    def mig_card_types(self) -> tuple[str, ...]:
        """Distinct card types on MIG-mode nodes, sorted (the models MIG requests can land on)."""
        return self.facts.mig_card_types
