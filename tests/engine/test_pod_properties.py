"""Properties of pod mutation for generated pods: idempotent, and every patch is valid RFC 6902 that
yields a schema-valid Pod (checked with a real JSONPatch library and the Kubernetes OpenAPI schema)."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import jsonschema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import A100_40, config_with, gpu_node, mutate, view_of
from tests.kube_schema import kube_validate
from vgpu_guard.engine.admission import request_for, review_object
from vgpu_guard.engine.rules.pods_validate import validate_pod_spec

K8S_VERSION = "1.34.0"
RESOURCES = [
    "volcano.sh/vgpu-number",
    "volcano.sh/vgpu-memory",
    "volcano.sh/vgpu-cores",
    "volcano.sh/vgpu-memory-percentage",
]
VIEW = view_of(
    [
        gpu_node("a30", count=4, labels={"ib": "ib-a"}),
        gpu_node(
            "a100", count=8, memory=40960, card_type=A100_40, mode="mig", split=7, labels={"ib": "ib-b"}
        ),
    ]
)
CONFIGS = [
    config_with(),
    config_with(topology={"ibClusterLabel": "ib"}),
    config_with(scheduling={"routing": True}),
    config_with(
        deviceConfig={"nvidia": {"defaultMemory": 2048, "defaultCores": 10}}, admission={"defaultMode": "mig"}
    ),
]

quantity = st.one_of(
    st.integers(min_value=-5, max_value=90000),
    st.sampled_from(["1", "2", "3000", "12Gi", "500m", "1.5", "0", "100", "abc", "1e3", "24576", "5120"]),
)
resources = st.dictionaries(st.sampled_from([*RESOURCES, "cpu", "memory"]), quantity, max_size=5)
container = st.fixed_dictionaries(
    {"name": st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True), "image": st.just("img")},
    optional={
        "resources": st.fixed_dictionaries({}, optional={"limits": resources, "requests": resources}),
        "securityContext": st.fixed_dictionaries({"privileged": st.booleans()}),
    },
)
pod_annotations = st.dictionaries(
    st.sampled_from(
        [
            "volcano.sh/vgpu-mode",
            "vgpu-guard.io/mig-profile",
            "team",
            "nvidia.com/use-gputype",
            "scheduling.k8s.io/group-name",
        ]
    ),
    st.sampled_from(["mig", "hami-core", "x", "A100", ""]),
    max_size=3,
)


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    containers = draw(st.lists(container, min_size=1, max_size=3, unique_by=lambda c: c["name"]))
    spec: dict[str, Any] = {"containers": containers}
    if draw(st.booleans()):
        spec["initContainers"] = draw(st.lists(container, max_size=1))
    if draw(st.booleans()):
        spec["schedulerName"] = draw(st.sampled_from(["volcano", "default-scheduler"]))
    metadata: dict[str, Any] = {"name": "p", "namespace": "default"}
    if draw(st.booleans()):
        metadata["annotations"] = draw(pod_annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _schema_valid_input(obj: dict[str, Any]) -> bool:
    """Only quantities the API server would let through (it rejects non-quantities before admission)."""
    try:
        kube_validate(obj, K8S_VERSION)
    except jsonschema.ValidationError:
        return False
    return True


def _standing(warning: str) -> bool:
    """A note about the pod as it stays: its scheduler, or containers sharing a card."""
    return "spec.schedulerName default-scheduler:" in warning or "counts once" in warning


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod=pods(), config_index=st.integers(0, len(CONFIGS) - 1))
def test_mutation_is_idempotent_and_patches_apply(pod: dict[str, Any], config_index: int) -> None:
    config = CONFIGS[config_index]
    original = copy.deepcopy(pod)
    first = mutate(pod, VIEW, config)
    assert pod == original, "mutation must not touch its input"
    if not first.allowed:  # the mutating webhook denies only for a gang no IB cluster can hold
        assert first.code == 403 and first.message.startswith("[ib-cluster] ")
        return
    patched = jsonpatch.JsonPatch(first.patch).apply(copy.deepcopy(pod))
    assert patched == first.object
    assert all(op["op"] in ("add", "replace", "remove") for op in first.patch)
    view = VIEW
    for recorded in first.persist:  # what the webhook recorded (a gang's placement) is seen next time
        view = view.with_admitted(recorded)
    second = mutate(first.object, view, config)
    # A second pass changes nothing. It may only say again, word for word, what no mutation
    # changes: a pod left to default-scheduler (admission.schedulerName unset), two containers on a
    # card Volcano counts once. kube-apiserver keeps one copy of identical warnings per request.
    assert second.patch == () and set(second.warnings) <= set(first.warnings)
    assert all(_standing(w) for w in second.warnings), second.warnings
    assert all(len(w) <= 120 for w in first.warnings)
    if _schema_valid_input(pod):
        kube_validate(patched, K8S_VERSION)


@settings(max_examples=200, deadline=None)
@given(pod=pods(), config_index=st.integers(0, len(CONFIGS) - 1))
def test_review_never_raises_and_denials_are_well_formed(pod: dict[str, Any], config_index: int) -> None:
    result = review_object(request_for(pod, username="u"), VIEW, CONFIGS[config_index])
    decision = result.decision
    if not decision.allowed:
        assert decision.code in (403, 503)
        for line in decision.message.splitlines():
            assert line.startswith("[") and "] " in line and ": " in line
    else:
        # No config here changes a rule's action, so admitted means no rule fires on the final object.
        assert validate_pod_spec(result.object, VIEW, CONFIGS[config_index], username="u") == []
