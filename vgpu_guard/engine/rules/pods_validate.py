"""Pod validation: every vGPU request the scheduler or the plugin would mishandle, denied up front.

Runs on the pod as the mutating step left it (the API server calls validating webhooks after
mutating ones), and on the pod templates of workloads so ``kubectl apply`` of a Deployment or a
Volcano Job fails at once instead of leaving a ReplicaSet retrying forever.

``cluster_checks`` is False when the caller must not consult cluster state (an unsynced cache);
the field checks still run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from vgpu_guard.engine.annotations import ALLOCATION_ANNOTATIONS, VGPU_MODE
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import Action, GuardConfig
from vgpu_guard.engine.devices import MODES, REGISTER_ANNOTATION
from vgpu_guard.engine.mig import geometries_for
from vgpu_guard.engine.quantity import QuantityError, parse_quantity
from vgpu_guard.engine.rules.display import show
from vgpu_guard.engine.rules.fleet import fleet_config, fleet_scales
from vgpu_guard.engine.rules.pods_allocation import prebound_violations
from vgpu_guard.engine.vgpu_request import ContainerVgpu, VgpuValue, resource_names, vgpu_containers
from vgpu_guard.engine.violations import Violation

__all__ = ["show", "validate_pod_spec"]

_MIB = 2**20

# The remedy of a capacity rule on a fleet that can grow, where it warns instead of denying.
_GROWS = "; admitted as the fleet can grow (admission.fleetScaling): Pending until {what} joins"


def growing(rule: str, view: ClusterView, config: GuardConfig) -> bool:
    """True when ``rule`` warns because the fleet can grow (its text then says why it admitted)."""
    return fleet_scales(view, config) and fleet_config(config, view).action_for(rule) is not Action.ENFORCE


def fleet_text(
    rule: str, view: ClusterView, config: GuardConfig, *, why: str, joins: str, refused: str, asked: str
) -> str:
    """The message of a rule that judges the current fleet: when the fleet can grow, ``why`` and
    what the pod waits for (``joins``); else ``refused``, which says how to fix the pod, unless no
    node offers vGPU at all: then what was ``asked`` and why no node offers it (a pod cannot follow
    "ask for at most 0")."""
    if growing(rule, view, config):
        return why + _GROWS.format(what=joins)
    return refused if view.gpu_nodes else _no_vgpu_text(asked, view)


def _value_violations(cv: ContainerVgpu, config: GuardConfig) -> list[Violation]:
    nvidia = config.nvidia
    out: list[Violation] = []
    for key, value in cv.values.items():
        if value.quantity is None:
            out.append(
                Violation("vgpu-quantity", value.path, f"{value.error}; write a whole number such as 1")
            )
            continue
        q = value.quantity
        if key == "memory" and value.byte_suffixed:
            mib = math.ceil(q.value / _MIB / nvidia.gpu_memory_factor)
            unit = "MiB" if nvidia.gpu_memory_factor == 1 else f"units of {nvidia.gpu_memory_factor} MiB"
            out.append(
                Violation(
                    "vgpu-memory-unit",
                    value.path,
                    f"{show(value.raw)} has a unit suffix but vgpu-memory counts {unit} "
                    f"({show(value.raw)} would mean {q.value} {unit}); write {mib}",
                )
            )
            continue
        if not q.is_integer:
            out.append(
                Violation(
                    "vgpu-integer",
                    value.path,
                    f"{show(value.raw)} is not a whole number; vGPU resources count whole units, "
                    f"write {max(1, math.ceil(q.value))}",
                )
            )
    return out


def _mismatch(container: Mapping[str, Any], cv: ContainerVgpu, config: GuardConfig) -> list[Violation]:
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return []
    limits, requests = resources.get("limits"), resources.get("requests")
    if not isinstance(limits, Mapping) or not isinstance(requests, Mapping):
        return []
    out = []
    for key, resource in resource_names(config.nvidia).items():
        if key in cv.values and resource in limits and resource in requests:
            lim, req = cv.values[key], requests[resource]
            if lim.quantity is not None and show(req) != show(lim.raw):
                try:
                    equal = parse_quantity(req).value == lim.quantity.value
                except QuantityError:
                    equal = False
                if not equal:
                    out.append(
                        Violation(
                            "vgpu-request-limit-mismatch",
                            f"{cv.path}.resources.requests[{resource}]",
                            f"{show(req)} differs from limits {show(lim.raw)}; extended resources need "
                            f"equal values, set both to {show(lim.raw)}",
                        )
                    )
    return out


def _range_violations(
    cv: ContainerVgpu,
    view: ClusterView,
    config: GuardConfig,
    *,
    mode: str | None,
    cluster_checks: bool,
    reported: set[str],
) -> list[Violation]:
    """Each integer vGPU value against its range, in the order number, cores, percentage, memory;
    a value whose path was reported already (unreadable) is not judged again."""

    def integer(key: str) -> tuple[VgpuValue, int] | None:
        value = cv.values.get(key)  # type: ignore[call-overload]
        if value is None or value.integer is None or value.path in reported:
            return None
        return value, value.integer

    out: list[Violation] = []
    if (got := integer("number")) is not None:
        out.extend(_number_violations(*got, view, config, cluster_checks=cluster_checks))
    for key, code, unit in _PERCENTS:
        if (got := integer(key)) is not None and not 0 <= got[1] <= 100:
            value, n = got
            out.append(Violation(code, value.path, f"{n} is outside 0..100 ({unit}"))
    if (got := integer("memory")) is not None and cluster_checks and mode != "mig":
        out.extend(_memory_violations(*got, view, config))
    return out


# The percent values: what a percent is of, and how to fix it.
_PERCENTS = (
    ("cores", "vgpu-cores-range", "percent of one GPU); use 0..100, 100 = whole card"),
    ("percentage", "vgpu-memory-percentage-range", "percent of one card's memory); use 0..100"),
)


def _number_violations(
    value: VgpuValue, n: int, view: ClusterView, config: GuardConfig, *, cluster_checks: bool
) -> list[Violation]:
    """At least one card, and (against the cluster) no more than the most any node has."""
    if n < 1:
        return [
            Violation(
                "vgpu-number-range",
                value.path,
                f"{n} must be at least 1; ask for 1 or more cards or remove the resource",
            )
        ]
    if not cluster_checks or n <= view.max_gpus_per_node:
        return []
    most = view.max_gpus_per_node
    text = fleet_text(
        "vgpu-number-range",
        view,
        config,
        why=f"{n} > {most}, the most cards on any current node",
        joins=f"a node with {n} GPUs",
        refused=f"{n} is more cards than any node has (at most {most} on one node); ask for at most {most}",
        asked=f"{n} card(s) asked",
    )
    return [Violation("vgpu-number-range", value.path, text)]


def _no_vgpu_text(asked: str, view: ClusterView) -> str:
    """The refusal when no node offers vGPU at all: why not (the first node's registration problem,
    or that none registers a card), not an "ask for at most 0" no pod could follow."""
    nodes = view.nodes
    problems = sorted((name, info.gpu_problem) for name, info in nodes.items() if info.gpu_problem)
    if not nodes:
        why = "the cluster has no nodes"
    elif problems:
        name, problem = problems[0]
        more = f"; {len(problems) - 1} more node(s) likewise" if len(problems) > 1 else ""
        why = f"node {name}: {problem}{more}"
    else:
        why = f"none of its {len(nodes)} node(s) registers a GPU (annotation {REGISTER_ANNOTATION})"
    return (
        f"{asked}, but no node offers vGPU ({why}); fix the nodes' GPU registration (see vgpu-guard status)"
    )


def _units(n: int, config: GuardConfig) -> str:
    """A vgpu-memory amount as the user wrote it, with its unit. Not ``value.raw``: kube-apiserver
    hands admission the canonical quantity, so a written ``1000`` arrives as ``1k`` and ``12000`` as
    ``12k``, which the user never wrote and which reads as a byte count."""
    factor = config.nvidia.gpu_memory_factor
    return f"{n} MiB" if factor == 1 else f"{n} units of {factor} MiB"


def _memory_violations(value: VgpuValue, n: int, view: ClusterView, config: GuardConfig) -> list[Violation]:
    """No more memory per card than the largest card offers (unless the fleet is growing), never
    negative."""
    largest = view.largest_card_memory
    asked, most = _units(n, config), _units(largest, config)
    if n > largest:
        text = fleet_text(
            "vgpu-memory-too-large",
            view,
            config,
            why=f"{asked} > {most}, the largest current card",
            joins="a node with such a card",
            refused=f"{asked} is more than the largest card offers ({most}); "
            f"ask for at most {largest} per card, or more cards",
            asked=f"{asked} of memory asked",
        )
        return [Violation("vgpu-memory-too-large", value.path, text)]
    if n < 0:
        return [Violation("vgpu-memory-too-large", value.path, f"{asked} must not be negative")]
    return []


def _mig_violations(cv: ContainerVgpu, view: ClusterView, config: GuardConfig) -> list[Violation]:
    value = cv.values.get("memory")
    if value is None or value.integer is None:
        return []
    nvidia = config.nvidia
    request = value.integer * nvidia.gpu_memory_factor
    largest: tuple[int, str, str] | None = None
    for card_type in view.mig_card_types:
        entry = geometries_for(card_type, nvidia.known_mig_geometries)
        if entry is None:
            continue
        for group in entry.allowed_geometries:
            for geometry in group.geometries:
                if geometry.memory >= request:
                    return []
                if largest is None or geometry.memory > largest[0]:
                    largest = (geometry.memory, geometry.name, card_type.removeprefix("NVIDIA-"))
    if largest is None:
        return []  # no MIG card at all: vgpu-mode-unavailable says so
    mib, name, model = largest
    asked = _units(value.integer, config)
    text = fleet_text(
        "mig-no-profile",
        view,
        config,
        why=f"{asked} fits no current MIG profile (largest: {name}, {mib} MiB on {model})",
        joins="a node with a larger MIG card",
        refused=f"{asked} fits no MIG profile (largest: {name} with {mib} MiB on {model}); "
        f"ask for at most {mib // nvidia.gpu_memory_factor} or use hami-core",
        asked=f"{asked} of MIG memory asked",
    )
    return [Violation("mig-no-profile", value.path, text)]


def validate_pod_spec(
    pod: Mapping[str, Any],
    view: ClusterView,
    config: GuardConfig,
    *,
    username: str,
    groups: tuple[str, ...] = (),
    prefix: str = "",
    cluster_checks: bool = True,
) -> list[Violation]:
    """All violations of a pod (or a pod template, with ``prefix`` such as ``spec.template.``).

    In a namespace of ``admission.exemptNamespaces`` only the allocation checks run (forged
    annotations, a vGPU pod bound at creation): an exemption skips policy, never forgery checks.
    """
    spec = pod.get("spec")
    metadata = pod.get("metadata")
    spec = spec if isinstance(spec, Mapping) else {}
    metadata = metadata if isinstance(metadata, Mapping) else {}
    annotations = metadata.get("annotations")
    annotations = annotations if isinstance(annotations, Mapping) else {}
    # At CREATE no allocator writes these (ours binds with a Binding, Volcano's and the plugin patch
    # the pod later), so only trustedUsers (migrations) may; later writes are pods_allocation's.
    trusted = username in config.admission.trusted_users
    out = [] if trusted else _forged_annotations(annotations, username=username, prefix=prefix)
    containers = list(vgpu_containers(spec, config.nvidia, prefix=f"{prefix}spec"))
    if not containers:
        return out
    if not trusted:
        out.extend(prebound_violations(spec, username=username, groups=groups, config=config, prefix=prefix))
    if metadata.get("namespace") in config.admission.exempt_namespaces:
        return out
    mode, mode_problems = _mode(annotations, view, config, prefix=prefix, cluster_checks=cluster_checks)
    out.extend(mode_problems)
    if len(containers) > 1:  # admission.multiContainer is this rule's action (config.action_for)
        out.extend(_multi_container(containers))
    raw_lists = {name: spec.get(name) for name in ("initContainers", "containers")}
    for cv in containers:
        container = raw_lists[cv.list_name][cv.index]  # type: ignore[index]
        out.extend(
            _container_violations(container, cv, view, config, mode=mode, cluster_checks=cluster_checks)
        )
    return out


def _forged_annotations(annotations: Mapping[str, Any], *, username: str, prefix: str) -> list[Violation]:
    return [
        Violation(
            "allocation-annotations",
            f"{prefix}metadata.annotations[{key}]",
            f"{show(annotations[key])} was set by {username or 'an unknown user'}; allocation "
            f"annotations are written by the scheduler at binding, remove it",
        )
        for key in ALLOCATION_ANNOTATIONS
        if key in annotations
    ]


def _mode(
    annotations: Mapping[str, Any],
    view: ClusterView,
    config: GuardConfig,
    *,
    prefix: str,
    cluster_checks: bool,
) -> tuple[str | None, list[Violation]]:
    """The pod's vGPU mode (None when unset or invalid) and what is wrong with it: not a mode, or
    a mode no node offers."""
    mode_raw = annotations.get(VGPU_MODE)
    mode = mode_raw if isinstance(mode_raw, str) else None
    path = f"{prefix}metadata.annotations[{VGPU_MODE}]"
    if mode_raw is not None and mode not in MODES:
        text = f"{show(mode_raw)} is not a vGPU mode; use hami-core or mig"
        return None, [Violation("vgpu-mode-invalid", path, text)]
    if mode is None or not cluster_checks or mode in view.offered_modes:
        return mode, []
    offered = ", ".join(sorted(view.offered_modes)) or "none"
    text = fleet_text(
        "vgpu-mode-unavailable",
        view,
        config,
        why=f"{mode} is offered by no current node (offered: {offered})",
        joins=f"a node offering {mode}",
        refused=f"{mode} is offered by no node (modes offered: {offered}); "
        "use an offered mode or remove the annotation",
        asked=f"{mode} asked",
    )
    return mode, [Violation("vgpu-mode-unavailable", path, text)]


def _multi_container(containers: list[ContainerVgpu]) -> list[Violation]:
    first = containers[0].path
    return [
        Violation(
            "vgpu-multi-container",
            cv.path,
            f"also requests vGPU (as does {first}), and the device plugin cannot tell the containers "
            f"apart at allocation; request vGPU in one container, or split the pod",
        )
        for cv in containers[1:]
    ]


def _container_violations(
    container: Any,
    cv: ContainerVgpu,
    view: ClusterView,
    config: GuardConfig,
    *,
    mode: str | None,
    cluster_checks: bool,
) -> list[Violation]:
    """One vGPU container: privileged, its values, limits against requests, ranges, MIG profiles."""
    out: list[Violation] = []
    security = container.get("securityContext") if isinstance(container, Mapping) else None
    if isinstance(security, Mapping) and security.get("privileged") is True:
        out.append(
            Violation(
                "vgpu-privileged",
                f"{cv.path}.securityContext.privileged",
                "true gives the container every GPU and bypasses vGPU limits; "
                "drop privileged from vGPU containers",
            )
        )
    value_problems = _value_violations(cv, config)
    out.extend(value_problems)
    out.extend(_mismatch(container, cv, config))
    reported = {v.path for v in value_problems}
    out.extend(
        _range_violations(cv, view, config, mode=mode, cluster_checks=cluster_checks, reported=reported)
    )
    if mode == "mig" and cluster_checks and not value_problems:
        out.extend(_mig_violations(cv, view, config))
    return out
