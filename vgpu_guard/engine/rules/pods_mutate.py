"""Pod CREATE mutations: make a vGPU request explicit, consistent and placeable.

Each step edits a private copy of the pod and says what it changed (one admission warning per
change); the JSONPatch is the difference between the original and the copy. Running the pipeline
on its own output changes nothing, which is what ``reinvocationPolicy: IfNeeded`` needs.

Steps, in order:
1. requests and limits made equal for vGPU resources (Volcano reads limits; the API server needs
   both equal for extended resources);
2. defaults nothing applies today: defaultGPUNum, defaultMemory, defaultCores; a whole-card request
   gets vgpu-cores 100 (exclusive), as HAMi does;
3. the sharing mode stamped explicitly (``volcano.sh/vgpu-mode``), chosen among modes nodes offer;
4. MIG requests rounded up to the profile Volcano will place them on, profile recorded;
5. routing to our allocator (``spec.schedulerName``) when enabled; with routing off (Volcano
   schedules vGPU pods), a pod left to ``default-scheduler`` is given ``admission.schedulerName``
   when set, else warned: kube-scheduler would bind it with no GPU assignment;
6. with routing off, a note when two of its containers may share a card whose use Volcano counts
   once (``shared_card``).
A container whose values do not parse is left alone; validation reports it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping
from typing import Any

from vgpu_guard.engine.annotations import MIG_PROFILE, VGPU_MODE
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import DEFAULT_SCHEDULER, Action, GuardConfig
from vgpu_guard.engine.devices import MODES, Mode
from vgpu_guard.engine.mig import MigChoice, round_to_profile, usable_mib
from vgpu_guard.engine.patch import working_copy
from vgpu_guard.engine.pod_request import GROUP_ANNOTATIONS
from vgpu_guard.engine.rules.shared_card import shared_card_pair
from vgpu_guard.engine.vgpu_request import ContainerVgpu, VgpuKey, resource_names, vgpu_containers

__all__ = ["choose_mode", "normalise_pod", "vgpu_gang"]

_WHO = "vgpu-guard"


def _well_formed(cv: ContainerVgpu) -> bool:
    """Only containers whose values are plain whole numbers are normalised; validation reports the rest."""
    return all(v.integer is not None and not v.byte_suffixed for v in cv.values.values())


def _ensure_map(parent: MutableMapping[str, Any], key: str) -> MutableMapping[str, Any]:
    value = parent.get(key)
    if not isinstance(value, MutableMapping):
        value = {}
        parent[key] = value
    return value


def _container(pod: MutableMapping[str, Any], cv: ContainerVgpu) -> MutableMapping[str, Any]:
    container = pod["spec"][cv.list_name][cv.index]
    assert isinstance(container, MutableMapping)
    return container


def _set_resource(container: MutableMapping[str, Any], resource: str, value: int) -> None:
    resources = _ensure_map(container, "resources")
    _ensure_map(resources, "limits")[resource] = str(value)
    _ensure_map(resources, "requests")[resource] = str(value)


def _sync_requests_limits(
    container: MutableMapping[str, Any], cv: ContainerVgpu, names: Mapping[VgpuKey, str], warnings: list[str]
) -> None:
    resources = _ensure_map(container, "resources")
    limits, requests = resources.get("limits"), resources.get("requests")
    limits = limits if isinstance(limits, Mapping) else {}
    requests = requests if isinstance(requests, Mapping) else {}
    for key in cv.values:
        resource = names[key]
        if resource in requests and resource not in limits:
            _ensure_map(resources, "limits")[resource] = requests[resource]
            warnings.append(
                f'{_WHO}: container "{cv.name}": copied requests {resource} to limits (Volcano reads limits)'
            )
        elif resource in limits and resource not in requests:
            _ensure_map(resources, "requests")[resource] = limits[resource]
            warnings.append(
                f'{_WHO}: container "{cv.name}": set requests {resource}={limits[resource]} to match limits'
            )


def _apply_defaults(
    container: MutableMapping[str, Any], cv: ContainerVgpu, config: GuardConfig, warnings: list[str]
) -> dict[VgpuKey, int]:
    """Fill in defaults; return the container's effective integer request."""
    nvidia = config.nvidia
    names = resource_names(nvidia)
    values: dict[VgpuKey, int] = {k: v for k in cv.values if (v := cv.integer(k)) is not None}

    def put(key: VgpuKey, value: int, why: str) -> None:
        values[key] = value
        _set_resource(container, names[key], value)
        warnings.append(f'{_WHO}: container "{cv.name}": set {names[key]}={value} ({why})')

    if "number" not in values and values.keys() & {"memory", "cores", "percentage"}:
        put("number", nvidia.default_gpu_num, "defaultGPUNum")
    if "memory" not in values and "percentage" not in values and nvidia.default_memory > 0:
        put("memory", nvidia.default_memory, "defaultMemory")
    if "cores" not in values and nvidia.default_cores > 0:
        put("cores", nvidia.default_cores, "defaultCores")
    whole_card = ("memory" not in values and "percentage" not in values) or values.get("percentage") == 100
    if "cores" not in values and whole_card:
        put("cores", 100, "a whole card is exclusive")
    return values


def choose_mode(view: ClusterView, config: GuardConfig) -> tuple[Mode | None, str]:
    """The mode to stamp when a pod names none, and why (documented in docs/configuration.md).

    ``auto``: the only mode nodes offer; when both are offered, hami-core (it fits any request size;
    MIG is opted into per pod). An explicit default that no node offers falls back to ``auto``:
    stamping a mode nobody offers would leave the pod Pending forever.
    """
    offered = view.offered_modes
    if not offered:
        return None, "no node registers vGPU devices"
    preferred = config.admission.default_mode
    if preferred != "auto" and preferred in offered:
        return preferred, f"defaultMode {preferred}"
    auto: Mode = "hami-core" if "hami-core" in offered else "mig"
    if preferred != "auto":
        return auto, f"defaultMode {preferred} is offered by no node"
    return auto, "defaultMode auto" + ("" if len(offered) == 1 else ", both modes offered")


def _round_mig(
    container: MutableMapping[str, Any],
    cv: ContainerVgpu,
    *,
    memory: int,
    view: ClusterView,
    config: GuardConfig,
    warnings: list[str],
    advisories: list[str],
) -> str | None:
    """Round a MIG memory request; returns the profile label to record, or None.

    ``advisories`` (real slice smaller than configured) are reported only when the profile is first
    recorded, so a reinvocation stays silent.
    """
    nvidia = config.nvidia
    factor = nvidia.gpu_memory_factor
    choices: list[MigChoice] = [
        choice
        for card_type in view.mig_card_types
        if (choice := round_to_profile(card_type, memory * factor, nvidia.known_mig_geometries)) is not None
    ]
    if not choices:
        return None
    # Rounding is monotone per card type, so the smallest rounded size rounds to the same profile
    # on every type: the pod gets exactly the profile Volcano will carve, whichever card it lands on.
    rounded = math.ceil(min(c.memory for c in choices) / factor)
    resource = nvidia.resource_memory_name
    if rounded != memory:
        _set_resource(container, resource, rounded)
        profiles = ", ".join(sorted({c.profile for c in choices}))
        warnings.append(
            f'{_WHO}: container "{cv.name}": rounded {resource} {memory} -> {rounded} (MIG {profiles})'
        )
    for c in choices:
        real = usable_mib(c.card_type, c.profile)
        if real is not None and real < c.memory:
            model = c.card_type.removeprefix("NVIDIA-").removeprefix("NVIDIA ")
            advisories.append(
                f"{_WHO}: MIG {c.profile} on {model} exposes ~{real} MiB, not the {c.memory} MiB configured"
            )
    if len({c.profile for c in choices}) == 1:
        return choices[0].profile
    return ",".join(sorted(f"{c.card_type.removeprefix('NVIDIA-')}={c.profile}" for c in choices))


def _exempt(pod: Mapping[str, Any], config: GuardConfig) -> bool:
    """Pods of an admin-exempted namespace are not mutated (the chart keeps them from us too)."""
    metadata = pod.get("metadata")
    return isinstance(metadata, Mapping) and metadata.get("namespace") in config.admission.exempt_namespaces


def vgpu_gang(pod: Mapping[str, Any], view: ClusterView, config: GuardConfig) -> str | None:
    """``namespace/name`` of the pod's PodGroup when that gang asks for vGPU, else None.

    Routing sends a gang whole (a mixed gang split between two schedulers waits forever), so a
    member that asks no vGPU is routed too. At its admission the other members may not exist yet;
    the PodGroup's ``spec.minResources`` says what the gang asks (Volcano's job controller sums
    the first minAvailable tasks' resources into it: pkg/controllers/job/job_controller_actions.go
    ``calcPGMinResources``), so a vGPU resource there marks a vGPU gang. Older releases sum the
    containers' requests and limits (plain names); newer ones the pod's quota usage, where an
    extended resource appears only as ``requests.<name>``: both are read.
    """
    metadata = pod.get("metadata")
    notes = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    if not isinstance(notes, Mapping):
        return None
    group = next((str(notes[a]) for a in GROUP_ANNOTATIONS if notes.get(a)), "")
    namespace = str(metadata.get("namespace") or "default") if isinstance(metadata, Mapping) else "default"
    podgroup = view.podgroups.get((namespace, group)) if group else None
    spec = podgroup.get("spec") if podgroup is not None else None
    wanted = spec.get("minResources") if isinstance(spec, Mapping) else None
    if not isinstance(wanted, Mapping):
        return None
    asked = {str(name).removeprefix("requests.").removeprefix("limits.") for name in wanted}
    if not set(resource_names(config.nvidia).values()) & asked:
        return None
    return f"{namespace}/{group}"


def _route_gang_member(
    work: dict[str, Any], spec: MutableMapping[str, Any], view: ClusterView, config: GuardConfig
) -> list[str]:
    """Routing on: a pod without vGPU of a vGPU gang goes to our scheduler with the rest of it."""
    scheduling = config.scheduling
    if not scheduling.routing or spec.get("schedulerName") == scheduling.scheduler_name:
        return []
    gang = vgpu_gang(work, view, config)
    if gang is None:
        return []
    previous = spec.get("schedulerName") or "default-scheduler"
    spec["schedulerName"] = scheduling.scheduler_name
    return [
        f"{_WHO}: set spec.schedulerName={scheduling.scheduler_name} (was {previous}; "
        f"routing sends vGPU gang {gang} whole)"
    ]


def normalise_pod(
    pod: Mapping[str, Any], view: ClusterView, config: GuardConfig
) -> tuple[dict[str, Any], list[str]]:
    """The mutated copy of ``pod`` and the warnings; ``pod`` itself is not touched."""
    work: dict[str, Any] = working_copy(pod)
    spec = work.get("spec")
    if not isinstance(spec, MutableMapping) or _exempt(work, config):
        return work, []
    nvidia = config.nvidia
    names = resource_names(nvidia)
    found = list(vgpu_containers(spec, nvidia))
    containers = [cv for cv in found if _well_formed(cv)]
    if not found:
        return work, _route_gang_member(work, spec, view, config)
    warnings: list[str] = []
    effective: list[tuple[ContainerVgpu, dict[VgpuKey, int]]] = []
    for cv in containers:
        container = _container(work, cv)
        _sync_requests_limits(container, cv, names, warnings)
        effective.append((cv, _apply_defaults(container, cv, config, warnings)))

    metadata = _ensure_map(work, "metadata")
    mode = _vgpu_mode(metadata, view, config, warnings)
    if mode == "mig" and mode in MODES:
        _mig_profile(work, metadata, effective, view=view, config=config, warnings=warnings)
    _route_to_scheduler(spec, config, warnings)
    if not config.scheduling.routing:
        _volcano_scheduler(spec, config, warnings)
        _shared_card_note(work, view, config, warnings)
    return work, warnings


def _vgpu_mode(
    metadata: MutableMapping[str, Any], view: ClusterView, config: GuardConfig, warnings: list[str]
) -> object:
    """The pod's vGPU mode annotation; when unset, the mode the cluster's nodes allow is set (and
    said), or a warning says why none could be chosen."""
    annotations = metadata.get("annotations")
    mode = annotations.get(VGPU_MODE) if isinstance(annotations, Mapping) else None
    if mode is not None:
        return mode
    chosen, why = choose_mode(view, config)
    if chosen is None:
        warnings.append(f"{_WHO}: {VGPU_MODE} left unset: {why}")
        return None
    _ensure_map(metadata, "annotations")[VGPU_MODE] = chosen
    warnings.append(f"{_WHO}: set annotation {VGPU_MODE}={chosen} ({why})")
    return chosen


def _mig_profile(
    work: dict[str, Any],
    metadata: MutableMapping[str, Any],
    effective: list[tuple[ContainerVgpu, dict[VgpuKey, int]]],
    *,
    view: ClusterView,
    config: GuardConfig,
    warnings: list[str],
) -> None:
    """In MIG mode: each container's memory rounded up to a MIG profile, and the pod's profile
    annotation set to them (with the rounding advisories, only when the annotation changes)."""
    labels = []
    advisories: list[str] = []
    for cv, values in effective:
        if "memory" in values:
            label = _round_mig(
                _container(work, cv),
                cv,
                memory=values["memory"],
                view=view,
                config=config,
                warnings=warnings,
                advisories=advisories,
            )
            if label is not None:
                labels.append(label if len(effective) == 1 else f"{cv.name}/{label}")
    if labels:
        profile = ";".join(labels)
        current = _ensure_map(metadata, "annotations").get(MIG_PROFILE)
        if current != profile:
            metadata["annotations"][MIG_PROFILE] = profile
            warnings.extend(advisories)
            warnings.append(f"{_WHO}: set annotation {MIG_PROFILE}={profile}")


def _route_to_scheduler(spec: MutableMapping[str, Any], config: GuardConfig, warnings: list[str]) -> None:
    """With routing on, a vGPU pod goes to our scheduler (and the warning names the one it left)."""
    scheduling = config.scheduling
    if scheduling.routing and spec.get("schedulerName") != scheduling.scheduler_name:
        previous = spec.get("schedulerName") or "default-scheduler"
        spec["schedulerName"] = scheduling.scheduler_name
        warnings.append(
            f"{_WHO}: set spec.schedulerName={scheduling.scheduler_name} (was {previous}; vGPU routing on)"
        )


def _volcano_scheduler(spec: MutableMapping[str, Any], config: GuardConfig, warnings: list[str]) -> None:
    """Routing off: a vGPU pod left to kube-scheduler gets no GPU assignment from anyone.

    kube-scheduler binds it to a node with ``vgpu-number`` capacity, writing no assignment, and the
    device plugin's Allocate then finds no pod for the kubelet's request (``GetPendingPod``) and
    fails it on the node. ``admission.schedulerName`` set: the pod is given that scheduler, as
    HAMi's webhook gives pods its own (pkg/scheduler/webhook.go ``Handle``); unset: the pod is
    warned. Only an empty name (review reads files as written; the API server defaults it before
    admission) or ``default-scheduler`` is changed: any other name is a scheduler chosen on
    purpose (a second Volcano), and a pod with ``spec.nodeName`` is not scheduled at all. With
    routing on, ``_route_to_scheduler`` gives every vGPU pod ``scheduling.schedulerName`` instead.
    """
    current = spec.get("schedulerName") or ""
    if current not in ("", DEFAULT_SCHEDULER) or spec.get("nodeName"):
        return
    wanted = config.admission.scheduler_name
    if wanted:
        spec["schedulerName"] = wanted
        warnings.append(
            f"{_WHO}: set spec.schedulerName={wanted} (was {DEFAULT_SCHEDULER}; admission.schedulerName)"
        )
    else:
        warnings.append(
            f"{_WHO}: spec.schedulerName {DEFAULT_SCHEDULER}: Volcano will not assign this pod a GPU; "
            "set schedulerName: volcano"
        )


def _shared_card_note(
    work: Mapping[str, Any], view: ClusterView, config: GuardConfig, warnings: list[str]
) -> None:
    """Routing off: two containers that Volcano may put on one card, whose use it counts once.

    Such a pod has vGPU in two containers, so rule vgpu-multi-container fires on it; enforced (the
    default, ``admission.multiContainer: deny``), the pod is denied and its mutation notes dropped
    (admission ``_mutate_pod``), so the cards are not even looked at."""
    if config.action_for("vgpu-multi-container") is Action.ENFORCE:
        return
    pair = shared_card_pair(work, view, config)
    if pair is not None:
        first, second = pair
        warnings.append(
            f'{_WHO}: "{first}" and "{second}" may share a GPU Volcano counts once: later pods there wait; '
            "use one vGPU container"
        )
