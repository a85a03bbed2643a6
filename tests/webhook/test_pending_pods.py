"""The arbiter's cache of unbound pods (webhook/pending_pods.py): what it keeps, and when it is trusted."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

import vgpu_guard.engine.annotations as annotation_names
from tests.builders import default_config, gpu_node, view_of
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.apidouble.store import Store
from vgpu_guard.controller.inputs import pod_informer
from vgpu_guard.controller.pod_projection import project_pod
from vgpu_guard.engine.allocator import pod_queue
from vgpu_guard.engine.arbiter import arbitrate
from vgpu_guard.engine.assignment_writes import WrittenAssignment
from vgpu_guard.engine.ledger import Allocation, ContainerGrant, DeviceGrant, NodeLedger
from vgpu_guard.engine.pod_request import GROUP_ANNOTATIONS, QUEUE_ANNOTATION, PodRequestError, pod_request
from vgpu_guard.kube.resources import NAMESPACES, PODS
from vgpu_guard.webhook.pending_pods import PendingPods, pending_pod

NVIDIA = default_config().nvidia


def full_pod(**annotations: str) -> dict[str, Any]:
    """A vGPU pod as the API server returns it: everything pod_request reads, and the bulk it does not."""
    gpu = {"volcano.sh/vgpu-number": "2", "volcano.sh/vgpu-memory": "4096", "volcano.sh/vgpu-cores": "30"}
    cpu = {"cpu": "4", "memory": "16Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train-0",
            "namespace": "ml",
            "uid": "uid-train-0",
            "resourceVersion": "42",
            "creationTimestamp": "2026-11-28T10:00:00Z",
            "labels": {"app": "train"},
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{" + "x" * 4000 + "}",
                **annotations,
            },
            "managedFields": [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {
            "schedulerName": "volcano",
            "priority": 1000,
            "nodeSelector": {"pool": "a100"},
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                        ]
                    }
                },
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
            },
            "initContainers": [
                {
                    "name": "fetch",
                    "image": "busybox",
                    "resources": {"limits": {"volcano.sh/vgpu-number": "1"}},
                }
            ],
            "containers": [
                {"name": "sidecar", "image": "envoy", "env": [{"name": "A", "value": "1"}]},
                {
                    "name": "main",
                    "image": "cuda",
                    "command": ["python"],
                    "resources": {"limits": {**cpu, **gpu}, "requests": cpu},
                },
                {
                    "name": "second",
                    "image": "cuda",
                    "resources": {"limits": {"volcano.sh/vgpu-memory": "1024"}, "claims": [{"name": "x"}]},
                },
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
        },
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]},
    }


# Values that make each annotation pod_request reads change its answer (a policy, a queue, a group,
# GPU types and UUIDs, a vGPU mode).
VALUES = ("spread", "team-a", "A100,H100", "GPU-1,GPU-2", "mig", "hami-core")
NODE = view_of([gpu_node("gpu-0", count=8)]).nodes["gpu-0"]
# The assignment of main (2 cards) and second (1 card), and a ledger where main's fit and second's
# does not, so both a reservation and a refusal are compared.
RAW = "GPU-gpu-0-0,NVIDIA,4096,30:GPU-gpu-0-1,NVIDIA,4096,30:;GPU-gpu-0-2,NVIDIA,1024,0:;"


def every_annotation() -> list[str]:
    names = [v for k, v in vars(annotation_names).items() if k.isupper() and isinstance(v, str) and "/" in v]
    return sorted({*names, QUEUE_ANNOTATION, *GROUP_ANNOTATIONS})


def arbiter_reads(pod: dict[str, Any]) -> tuple[Any, ...]:
    """What the arbiter takes from a pod (webhook/arbiter.py) and what it decides on two ledgers."""
    wanted = pod_request(pod, NVIDIA)
    assert wanted is not None
    written = WrittenAssignment("gpu-0", RAW, "volcano.sh/vgpu-ids-new", "Binding")
    queue, named = pod_queue(wanted, view_of([]))
    full = Allocation(
        "uid-other",
        "ml",
        "other",
        "default",
        (ContainerGrant(0, "c", (DeviceGrant("GPU-gpu-0-2", 24576, 0),)),),
    )
    outcomes = [
        arbitrate(written, wanted, ledger=ledger, node=NODE, queue=queue, now=1, nvidia=NVIDIA)
        for ledger in (NodeLedger("gpu-0"), NodeLedger("gpu-0").with_allocation(full))
    ]
    identity = (wanted.uid, wanted.namespace, wanted.name, wanted.key, wanted.group, wanted.queue)
    return (identity, wanted.containers, queue, named, outcomes)


def controllers(pod: dict[str, Any], nvidia: Any) -> dict[str, Any]:
    """The controller's projection, which the webhook reads under ``serve all`` (it prunes in place)."""
    return project_pod(copy.deepcopy(pod))


PROJECTIONS = {"the webhook's own": pending_pod, "the controller's (serve all)": controllers}


@pytest.mark.parametrize("projection", sorted(PROJECTIONS))
@pytest.mark.parametrize("annotation", every_annotation())
def test_the_arbiter_reads_and_decides_the_same_on_the_projection_as_on_the_pod(
    annotation: str, projection: str
) -> None:
    """Annotation by annotation (every name engine/annotations.py knows), with values that matter, in
    a gang (some annotations count only there): an annotation the arbiter starts reading fails here
    until the projection keeps it. Both projections: the webhook's own watch keeps ``pending_pod``,
    and with the controller in the process it reads the controller's informer (issue 45)."""
    project = PROJECTIONS[projection]
    for value in VALUES:
        pod = full_pod(**{GROUP_ANNOTATIONS[0]: "gang", annotation: value})
        assert arbiter_reads(project(pod, NVIDIA)) == arbiter_reads(pod), (annotation, value)


def test_a_malformed_vgpu_request_reads_as_the_same_error_from_the_projection() -> None:
    pod = full_pod()
    pod["spec"]["containers"][1]["resources"]["limits"]["volcano.sh/vgpu-memory"] = "1.5"
    with pytest.raises(PodRequestError) as from_pod:
        pod_request(pod, NVIDIA)
    with pytest.raises(PodRequestError) as from_projection:
        pod_request(pending_pod(pod, NVIDIA), NVIDIA)
    assert str(from_projection.value) == str(from_pod.value)


def test_the_projection_keeps_each_containers_place_and_vgpu_resources_only() -> None:
    pod = full_pod(**{QUEUE_ANNOTATION: "team-a"})
    assert pending_pod(pod, NVIDIA) == {
        "metadata": {
            "name": "train-0",
            "namespace": "ml",
            "uid": "uid-train-0",
            "resourceVersion": "42",
            "annotations": {QUEUE_ANNOTATION: "team-a"},
        },
        "spec": {
            "containers": [
                {},  # the sidecar: no vGPU, its place kept
                {
                    "name": "main",
                    "resources": {
                        "limits": {
                            "volcano.sh/vgpu-number": "2",
                            "volcano.sh/vgpu-memory": "4096",
                            "volcano.sh/vgpu-cores": "30",
                        }
                    },
                },
                {"name": "second", "resources": {"limits": {"volcano.sh/vgpu-memory": "1024"}}},
            ]
        },
    }


def stored(store: Store, name: str, node: str | None = None) -> dict[str, Any]:
    pod = copy.deepcopy(full_pod())
    pod["metadata"] = {"name": name, "namespace": "ml"}
    del pod["spec"]["priority"], pod["status"]  # the server computes priority from the class
    del pod["spec"]["containers"][2]["resources"]["claims"]  # not on 1.20's pods
    if node is not None:
        pod["spec"]["nodeName"] = node
    created: dict[str, Any] = store.create(PODS, pod, namespace="ml")
    return created


async def test_the_cache_answers_only_when_synced_and_for_the_bindings_uid() -> None:
    store = Store()
    store.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
    waiting, bound = stored(store, "waiting"), stored(store, "bound", node="gpu-0")
    pods = PendingPods.watching(MemoryClusterClient(store), NVIDIA)
    uid = waiting["metadata"]["uid"]
    assert pods.get("ml", "waiting", uid) is None  # not listed yet: the arbiter GETs
    task = asyncio.create_task(pods.run())
    try:
        async with asyncio.timeout(5):
            await pods.informer.wait_synced()
        assert pods.get("ml", "waiting", uid) == pending_pod(waiting, NVIDIA)
        assert pods.get("ml", "waiting", "another-uid") is None  # deleted and created again
        assert pods.get("ml", "waiting", "") is None  # a Binding without a UID
        assert pods.get("ml", "bound", bound["metadata"]["uid"]) is None  # not watched: bound
        # Bound after the LIST: it leaves the cache when its event arrives.
        left = asyncio.Event()
        pods.informer.add_handler(lambda event: left.set() if event.type == "DELETED" else None)
        target = {"apiVersion": "v1", "kind": "Node", "name": "gpu-1"}
        store.bind("ml", "waiting", {"metadata": {"name": "waiting"}, "target": target})
        async with asyncio.timeout(5):
            await left.wait()
        assert pods.get("ml", "waiting", uid) is None
        assert len(pods) == 0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_over_the_controllers_informer_a_bound_pod_is_not_an_unbound_one() -> None:
    """``serve all``: the same answers from the controller's watch of every pod, where bound pods
    are cached too (the arbiter must not take a bound pod's entry for an unbound one's)."""
    store = Store()
    store.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
    waiting, bound = stored(store, "waiting"), stored(store, "bound", node="gpu-0")
    informer = pod_informer(MemoryClusterClient(store))
    pods = PendingPods(informer)
    task = asyncio.create_task(informer.run())
    try:
        async with asyncio.timeout(5):
            await informer.wait_synced()
        uid = waiting["metadata"]["uid"]
        assert arbiter_reads(pods.get("ml", "waiting", uid) or {}) == arbiter_reads(waiting)
        assert pods.get("ml", "waiting", "another-uid") is None
        assert pods.get("ml", "bound", bound["metadata"]["uid"]) is None  # cached, but bound
        assert ("ml", "bound") in informer.items
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
