"""The webhooks' matchConditions, evaluated with a CEL interpreter on the objects users create.

This is what keeps an outage of ours from blocking pods that do not ask for a GPU, so each case
names the object and whether the API server must send it to us. cel-python implements the CEL
spec the API server's cel-go does; the expressions use only standard macros (has, exists, in).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.manifests.chart import render_objects
from tests.manifests.conftest import SCENARIOS

celpy = pytest.importorskip("celpy")

GPU = {"limits": {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "12288"}}
CPU = {"limits": {"cpu": "1", "memory": "1Gi"}}


def pod(
    resources: dict[str, Any] | None = None, *, init: bool = False, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "busybox"}
    if resources is not None:
        container["resources"] = resources
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}]}
    if init:
        spec["initContainers"] = [container]
    else:
        spec["containers"].append(container)
    meta: dict[str, Any] = {"name": "p", "namespace": "team-a"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def conditions(values: dict[str, Any], kind: str, webhook: str) -> list[str]:
    for r in render_objects(values):
        if r.kind == kind:
            for w in r.obj["webhooks"]:
                if w["name"] == webhook:
                    return [c["expression"] for c in w.get("matchConditions", [])]
    raise AssertionError(f"{kind} {webhook} not rendered")


def sent(expressions: list[str], obj: dict[str, Any], *, group: str = "", resource: str = "pods") -> bool:
    env = celpy.Environment()
    activation = {
        "object": celpy.json_to_cel(obj),
        "oldObject": celpy.json_to_cel(None),
        "request": celpy.json_to_cel(
            {"resource": {"group": group, "version": "v1", "resource": resource}, "operation": "CREATE"}
        ),
    }
    results = []
    for expression in expressions:
        value = env.program(env.compile(expression)).evaluate(activation)
        assert isinstance(value, celpy.celtypes.BoolType), (
            f"not a bool (an error applies failurePolicy): {value!r}"
        )
        results.append(bool(value))
    return all(results)


POD_CASES = [
    ("vGPU in limits", pod(GPU), True, True),
    ("vGPU in requests only", pod({"requests": {"volcano.sh/vgpu-cores": "50"}}), True, True),
    ("vGPU in an init container", pod(GPU, init=True), True, True),
    ("CPU only", pod(CPU), False, False),
    ("no resources at all", pod(None), False, False),
    ("nvidia.com/gpu (not ours)", pod({"limits": {"nvidia.com/gpu": "1"}}), False, False),
    (
        "forged allocation annotation",
        pod(CPU, annotations={"volcano.sh/vgpu-ids-new": "GPU-1,NVIDIA,12288,50:"}),
        False,
        True,
    ),
    ("unrelated annotations", pod(CPU, annotations={"team": "a"}), False, False),
]


@pytest.mark.parametrize(("case", "obj", "mutate", "validate"), POD_CASES, ids=[c[0] for c in POD_CASES])
def test_pod_webhooks_see_only_gpu_pods(case: str, obj: dict[str, Any], mutate: bool, validate: bool) -> None:
    assert sent(conditions({}, "MutatingWebhookConfiguration", "pods.vgpu.vgpu-guard.io"), obj) is mutate
    assert sent(conditions({}, "ValidatingWebhookConfiguration", "pods.vgpu.vgpu-guard.io"), obj) is validate


def test_gang_members_reach_the_mutating_webhook_with_ib_pinning() -> None:
    member = pod(CPU, annotations={"scheduling.k8s.io/group-name": "train-1"})
    assert not sent(conditions({}, "MutatingWebhookConfiguration", "pods.vgpu.vgpu-guard.io"), member)
    ib = conditions(SCENARIOS["routing-and-ib"], "MutatingWebhookConfiguration", "pods.vgpu.vgpu-guard.io")
    assert sent(ib, member)
    assert not sent(ib, pod(CPU))


def test_gang_members_reach_the_mutating_webhook_with_routing_alone() -> None:
    """Routing sends a vGPU gang whole: a member without vGPU must reach the mutation to be routed."""
    member = pod(CPU, annotations={"scheduling.k8s.io/group-name": "mpi"})
    routing = {"config": {"scheduling": {"routing": True}}}
    expressions = conditions(routing, "MutatingWebhookConfiguration", "pods.vgpu.vgpu-guard.io")
    assert sent(expressions, member)
    assert not sent(expressions, pod(CPU))


def test_inline_device_config_resource_names() -> None:
    values = SCENARIOS["device-config-inline"]
    expressions = conditions(values, "MutatingWebhookConfiguration", "pods.vgpu.vgpu-guard.io")
    assert sent(expressions, pod({"limits": {"example.com/vgpu": "1"}}))
    # Names the inline config did not override keep their defaults.
    assert sent(expressions, pod({"limits": {"volcano.sh/vgpu-cores": "10"}}))
    assert not sent(expressions, pod({"limits": {"volcano.sh/vgpu-number": "1"}}))
    extra = conditions(
        {"webhooks": {"extraVgpuResourceNames": ["corp.example/gpu-slice"]}},
        "MutatingWebhookConfiguration",
        "pods.vgpu.vgpu-guard.io",
    )
    assert sent(extra, pod({"limits": {"corp.example/gpu-slice": "1"}}))


def _template(resources: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "c", "image": "x", "resources": resources}]}}


WORKLOAD_CASES = [
    ("apps", "deployments", {"spec": {"template": _template(GPU)}}, True),
    ("apps", "deployments", {"spec": {"template": _template(CPU)}}, False),
    ("apps", "statefulsets", {"spec": {"template": _template(GPU)}}, True),
    ("batch", "jobs", {"spec": {"template": _template(GPU)}}, True),
    ("batch", "cronjobs", {"spec": {"jobTemplate": {"spec": {"template": _template(GPU)}}}}, True),
    ("batch", "cronjobs", {"spec": {"jobTemplate": {"spec": {"template": _template(CPU)}}}}, False),
    (
        "batch.volcano.sh",
        "jobs",
        {
            "spec": {
                "tasks": [
                    {"name": "a", "template": _template(CPU)},
                    {"name": "b", "template": _template(GPU)},
                ]
            }
        },
        True,
    ),
    ("batch.volcano.sh", "jobs", {"spec": {"tasks": [{"name": "a", "template": _template(CPU)}]}}, False),
    ("batch.volcano.sh", "jobs", {"spec": {}}, False),
]


@pytest.mark.parametrize(("group", "resource", "obj", "expected"), WORKLOAD_CASES)
def test_workload_webhook_sees_only_gpu_templates(
    group: str, resource: str, obj: dict[str, Any], expected: bool
) -> None:
    expressions = conditions({}, "ValidatingWebhookConfiguration", "workloads.vgpu.vgpu-guard.io")
    assert sent(expressions, obj, group=group, resource=resource) is expected
