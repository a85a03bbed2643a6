"""Random scheduling cases for the kube-scheduler oracle: a small fleet and one pod, from a seed.

A case is pure data: nodes (allocatable, labels, taints, cordon), the pods already on them
(requests, host ports, labels, required anti-affinity), and the pod to place (requests, init
containers, overhead through a RuntimeClass, host ports, pod (anti-)affinity, DoNotSchedule spread
constraints, tolerations). ``render`` turns it into API objects for one side: "kube" (a plain pod
for kube-scheduler) or "ours" (the same pod asking for one vGPU, for our controller). The vGPU part
always fits (one free 24 GiB card per node, a 1 GiB request), so the verdicts differ only when the
node constraints are judged differently.

Topology keys are per slot (``oracle.vgpu-guard.io/zone-s3``) and every pod selects its own fleet
by label, so concurrent cases never see each other's domains; pods live in a namespace per slot
and side, so selectors never count another case's pods.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
HOSTNAME = "kubernetes.io/hostname"
FLEET_LABEL = "oracle.vgpu-guard.io/fleet"
PROBE_TAINT = "oracle.vgpu-guard.io/probe"
RUNTIME_CLASS = "oracle-overhead"
OVERHEAD = {"cpu": "250m", "memory": "64Mi"}
APPS = ("a", "b", "c")
TAINT_KEYS = ("oracle.vgpu-guard.io/t1", "oracle.vgpu-guard.io/t2")
GPU_MEMORY = 24576
TWIN = "oracle.vgpu-guard.io/twin"
ZONE = "topology.kubernetes.io/zone"
MAX_NODES = 8  # a case's fleet: 2 to MAX_NODES nodes


@dataclass
class NodeSpec:
    cpu: str
    memory: str
    pods: int
    storage: str
    zone: str | None
    taints: list[Obj] = field(default_factory=list)
    cordoned: bool = False


@dataclass
class PodSpec:
    labels: dict[str, str]
    containers: list[Obj]
    init_containers: list[Obj] = field(default_factory=list)
    overhead: bool = False
    affinity: Obj | None = None
    spread: list[Obj] = field(default_factory=list)
    tolerations: list[Obj] = field(default_factory=list)


@dataclass
class VolumeSpec:
    """A PersistentVolume bound to the probe's claim, with node affinity to a zone or one node."""

    zone: str | None = None
    host: int | None = None


@dataclass
class Case:
    seed: int
    nodes: list[NodeSpec]
    existing: list[tuple[int, PodSpec]]  # (node index, pod)
    probe: PodSpec
    features: tuple[str, ...]
    volume: VolumeSpec | None = None


def _quantity_cpu(rng: random.Random) -> str:
    return rng.choice(["100m", "250m", "500m", "1", "1500m", "2", "3"])


def _quantity_memory(rng: random.Random) -> str:
    return rng.choice(["64Mi", "256Mi", "512Mi", "1Gi", "2Gi", "3Gi"])


def _container(rng: random.Random, name: str, *, ports: bool) -> Obj:
    requests: Obj = {}
    if rng.random() < 0.8:
        requests["cpu"] = _quantity_cpu(rng)
    if rng.random() < 0.7:
        requests["memory"] = _quantity_memory(rng)
    if rng.random() < 0.15:
        requests["ephemeral-storage"] = rng.choice(["1Gi", "5Gi", "20Gi"])
    container: Obj = {"name": name, "image": "busybox", "resources": {"requests": requests}}
    if ports and rng.random() < 0.35:
        port: Obj = {"containerPort": 80, "hostPort": rng.choice([8080, 9090])}
        if rng.random() < 0.3:
            port["protocol"] = "UDP"
        if rng.random() < 0.3:
            port["hostIP"] = "127.0.0.1"
        container["ports"] = [port]
    return container


def _term(rng: random.Random, zone_key: str) -> Obj:
    return {
        "labelSelector": {"matchLabels": {"app": rng.choice(APPS)}},
        "topologyKey": rng.choice([zone_key, HOSTNAME]),
    }


def _pod(rng: random.Random, zone_key: str, *, probe: bool) -> PodSpec:
    pod = PodSpec(
        labels={"app": rng.choice(APPS)},
        containers=[_container(rng, f"c{i}", ports=i == 0) for i in range(rng.choice([1, 1, 2]))],
    )
    if rng.random() < 0.2:
        pod.affinity = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term(rng, zone_key)]}
        }
    if not probe:
        return pod
    if rng.random() < 0.25:
        init = _container(rng, "init", ports=False)
        init["resources"]["requests"]["cpu"] = rng.choice(["2", "4", "6"])
        pod.init_containers = [init]
    pod.overhead = rng.random() < 0.2
    if rng.random() < 0.25:
        pod.affinity = {
            **(pod.affinity or {}),
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term(rng, zone_key)]},
        }
    if rng.random() < 0.35:
        pod.spread = [
            {
                "maxSkew": rng.choice([1, 1, 2]),
                "topologyKey": rng.choice([zone_key, HOSTNAME]),
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": rng.choice(APPS)}},
            }
        ]
    if rng.random() < 0.4:
        key = rng.choice(TAINT_KEYS)
        pod.tolerations.append(
            {"key": key, "operator": "Exists"}
            if rng.random() < 0.5
            else {"key": key, "value": "v1", "effect": "NoSchedule"}
        )
    if rng.random() < 0.1:
        pod.tolerations.append(
            {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
        )
    return pod


def generate(seed: int, zone_key: str) -> Case:
    rng = random.Random(seed)
    nodes = []
    for _ in range(rng.randint(2, MAX_NODES)):
        node = NodeSpec(
            cpu=rng.choice(["2", "4", "4", "8", "3500m"]),
            memory=rng.choice(["2Gi", "4Gi", "8Gi", "16Gi"]),
            pods=rng.randint(2, 6),
            storage=rng.choice(["10Gi", "50Gi"]),
            zone=rng.choice(["z1", "z2", "z3", None]) if rng.random() < 0.9 else None,
        )
        if rng.random() < 0.25:
            node.taints.append(
                {"key": rng.choice(TAINT_KEYS), "value": rng.choice(["v1", "v2"]), "effect": "NoSchedule"}
            )
        node.cordoned = rng.random() < 0.08
        nodes.append(node)
    existing = [
        (i, _pod(rng, zone_key, probe=False)) for i in range(len(nodes)) for _ in range(rng.randint(0, 2))
    ]
    probe = _pod(rng, zone_key, probe=True)
    volume = None
    if rng.random() < 0.2:
        host = rng.randrange(len(nodes))
        volume = (
            VolumeSpec(host=host) if rng.random() < 0.4 else VolumeSpec(zone=rng.choice(["z1", "z2", "z3"]))
        )
    features = tuple(
        name
        for name, used in (
            ("ports", any("ports" in c for c in probe.containers)),
            ("init", bool(probe.init_containers)),
            ("overhead", probe.overhead),
            ("affinity", bool(probe.affinity and "podAffinity" in probe.affinity)),
            ("anti-affinity", bool(probe.affinity and "podAntiAffinity" in probe.affinity)),
            ("existing-anti-affinity", any(p.affinity for _, p in existing)),
            ("spread", bool(probe.spread)),
            ("taints", any(n.taints for n in nodes)),
            ("cordon", any(n.cordoned for n in nodes)),
            ("volume", volume is not None),
        )
        if used
    )
    return Case(seed, nodes, existing, probe, features or ("resources",), volume)


# -- rendering -------------------------------------------------------------------------------------
def node_name(fleet: str, index: int) -> str:
    return f"oracle-{fleet}-{index}"


PARKED = NodeSpec(cpu="1", memory="1Gi", pods=1, storage="1Gi", zone=None)


def render_node(
    spec: NodeSpec | None, *, fleet: str, side: str, index: int, zone_key: str, now: str
) -> tuple[Obj, Obj]:
    """The Node and its status (written through nodes/status: the kubelet's part, with a fresh
    heartbeat so the node lifecycle controller keeps it Ready).

    ``spec`` None parks the node: a fleet keeps its nodes across cases, and a case with fewer
    nodes leaves the rest parked, with no label at all. Every pod selects its fleet by label, and
    in 1.20 spread counts only the nodes that match the pod's node selector, inter-pod (anti-)
    affinity only nodes that carry the topology key, so a parked node is invisible to the case.
    """
    name = node_name(fleet, index)
    labels = {} if spec is None else {HOSTNAME: name, FLEET_LABEL: fleet}
    spec = spec or PARKED
    if spec.zone is not None:
        labels[zone_key] = spec.zone
        labels[ZONE] = spec.zone  # VolumeZone reads only the well-known zone label
    allocatable = {
        "cpu": spec.cpu,
        "memory": spec.memory,
        "pods": str(spec.pods),
        "ephemeral-storage": spec.storage,
    }
    annotations = {}
    if side == "kube":
        allocatable[TWIN] = "1000"
    if side == "ours":
        uuid = f"GPU-{name}-0"
        annotations["volcano.sh/node-vgpu-register"] = (
            f"{uuid},10,{GPU_MEMORY},NVIDIA-NVIDIA A10,true,hami-core:"
        )
        allocatable |= {
            "volcano.sh/vgpu-number": "10",
            "volcano.sh/vgpu-memory": str(GPU_MEMORY),
            "volcano.sh/vgpu-cores": "100",
        }
    # Every node carries the probe taint with its own index; the probe for node j tolerates only
    # value j, so every other node refuses it, and no taint changes while the case runs.
    taints = [*spec.taints, {"key": PROBE_TAINT, "value": str(index), "effect": "NoSchedule"}]
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"taints": taints, "unschedulable": spec.cordoned},
    }
    status = {
        "status": {
            "capacity": allocatable,
            "allocatable": allocatable,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "oracle",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        }
    }
    return node, status


def render_pod(
    spec: PodSpec,
    *,
    name: str,
    fleet: str,
    side: str,
    node: str | None = None,
    probe: int | None = None,
    claim: str | None = None,
) -> Obj:
    """An existing pod (``node``: bound there directly) or the probe for node ``probe``, mounting
    the PersistentVolumeClaim ``claim`` if given."""
    containers = [dict(c) for c in spec.containers]
    # TaintNodesByCondition puts node.kubernetes.io/not-ready on every new node until the node
    # lifecycle controller has seen it Ready; both schedulers tolerate that, so no case waits for it.
    tolerations = [
        *spec.tolerations,
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"},
    ]
    if probe is not None:
        tolerations.append(
            {"key": PROBE_TAINT, "operator": "Equal", "value": str(probe), "effect": "NoSchedule"}
        )
    pod_spec: Obj = {
        "containers": containers,
        "nodeSelector": {FLEET_LABEL: fleet},
        "tolerations": tolerations,
        "terminationGracePeriodSeconds": 0,
        # No token volume: scheduling does not look at it, and without it a pod needs only its
        # namespace's ServiceAccount (which the runner creates), not the token controller's
        # Secret, which kube-controller-manager made over 60 s late on a loaded CI machine.
        "automountServiceAccountToken": False,
    }
    if spec.init_containers:
        pod_spec["initContainers"] = spec.init_containers
    if spec.overhead:
        pod_spec["runtimeClassName"] = RUNTIME_CLASS
    if spec.affinity:
        pod_spec["affinity"] = spec.affinity
    if spec.spread:
        pod_spec["topologySpreadConstraints"] = spec.spread
    if claim is not None:
        pod_spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    if node is not None:
        pod_spec["nodeName"] = node
    else:
        # The twins differ only in this extended request: the vGPU one for our controller, a
        # plentiful stand-in for kube-scheduler's twin, so NodeResourcesFit's "requests nothing"
        # shortcut (which skips the cpu/memory checks) applies to neither.
        first = dict(containers[0])
        resources = {**first.get("resources", {})}
        resources["limits"] = (
            {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "1024"}
            if side == "ours"
            else {TWIN: "1"}
        )
        first["resources"] = resources
        containers[0] = first
        if side == "ours":
            pod_spec["schedulerName"] = "vgpu-guard"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(spec.labels)},
        "spec": pod_spec,
    }


def render_volume(
    volume: VolumeSpec, *, name: str, claim: str, fleet: str, namespace: str, zone_key: str
) -> tuple[Obj, Obj]:
    """A static PersistentVolume ``name`` pre-bound to the claim ``claim`` (the PV controller
    completes the binding) and that claim; the volume's node affinity selects a zone or one node."""
    if volume.host is not None:
        requirement = {"key": HOSTNAME, "operator": "In", "values": [node_name(fleet, volume.host)]}
        labels = {}
    else:
        requirement = {"key": zone_key, "operator": "In", "values": [str(volume.zone)]}
        labels = {ZONE: str(volume.zone)}
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "hostPath": {"path": "/tmp/oracle"},
            "claimRef": {"namespace": namespace, "name": claim},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [requirement]}]}},
        },
    }
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": name,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    return pv, pvc
