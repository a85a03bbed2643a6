"""The arbiter's cache of unbound pods (webhook/pending_pods.py): what it keeps, and when it is trusted."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest

import vgpu_guard.engine.annotations as annotation_names
from tests.builders import default_config
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.apidouble.store import Store
from vgpu_guard.engine.pod_request import GROUP_ANNOTATIONS, QUEUE_ANNOTATION, pod_request
from vgpu_guard.kube.resources import NAMESPACES, PODS
from vgpu_guard.webhook.pending_pods import PendingPods, pending_pod

NVIDIA = default_config().nvidia


def full_pod(**annotations: str) -> dict[str, Any]:
    """A vGPU pod as the API server returns it: everything pod_request reads, and the bulk it does not."""
    gpu = {"volcano.sh/vgpu-number": "2", "volcano.sh/vgpu-memory": "4096", "volcano.sh/vgpu-cores": "30"}
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
                {"name": "main", "image": "cuda", "command": ["python"], "resources": {"limits": gpu}},
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


def every_annotation() -> list[str]:
    names = [v for k, v in vars(annotation_names).items() if k.isupper() and isinstance(v, str) and "/" in v]
    return sorted({*names, QUEUE_ANNOTATION, *GROUP_ANNOTATIONS})


@pytest.mark.parametrize("annotation", every_annotation())
def test_pod_request_reads_the_same_request_from_the_projection_as_from_the_pod(annotation: str) -> None:
    """Annotation by annotation (every name engine/annotations.py knows), with values that matter:
    an annotation pod_request starts reading fails here until the projection keeps it. The pod is
    in a gang (some annotations count only there)."""
    for value in VALUES:
        pod = full_pod(**{GROUP_ANNOTATIONS[0]: "gang", annotation: value})
        assert pod_request(pending_pod(pod), NVIDIA) == pod_request(pod, NVIDIA), (annotation, value)


def test_the_projection_drops_what_pod_request_does_not_read() -> None:
    pod = full_pod(**{QUEUE_ANNOTATION: "team-a"})
    kept = pending_pod(pod)
    assert kept["metadata"]["annotations"] == {QUEUE_ANNOTATION: "team-a"}
    assert set(kept) == {"metadata", "spec"}
    assert set(kept["metadata"]) == {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "annotations",
    }
    assert set(kept["spec"]) == {"priority", "nodeSelector", "tolerations", "affinity", "containers"}
    assert kept["spec"]["affinity"] == {"nodeAffinity": pod["spec"]["affinity"]["nodeAffinity"]}
    # Every container stays in its place (its index is its field path), with names and resources.
    assert kept["spec"]["containers"] == [
        {"name": "sidecar"},
        {"name": "main", "resources": pod["spec"]["containers"][1]["resources"]},
        {"name": "second", "resources": {"limits": {"volcano.sh/vgpu-memory": "1024"}}},
    ]
    assert len(json.dumps(kept)) * 5 < len(json.dumps(pod))


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
    pods = PendingPods(MemoryClusterClient(store))
    uid = waiting["metadata"]["uid"]
    assert pods.get("ml", "waiting", uid) is None  # not listed yet: the arbiter GETs
    task = asyncio.create_task(pods.run())
    try:
        async with asyncio.timeout(5):
            await pods.informer.wait_synced()
        assert pods.get("ml", "waiting", uid) == pending_pod(waiting)
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
