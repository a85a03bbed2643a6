"""The allocation webhook entry and admin-listed exempt namespaces, as the chart renders them.

Issue 21: pod UPDATE, pods/status and pods/binding go to a separate entry with failurePolicy
Ignore (the controller's binds never wait on it), in both scopes. Issue 22: no namespace label
opts out; exempt namespaces are listed by an administrator and never skip the allocation checks.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.manifests.chart import render_objects

celpy = pytest.importorskip("celpy")

ENTRY = "pod-allocations.vgpu-guard.io"
CONTROLLER_SA = "system:serviceaccount:vgpu-guard:vgpu-guard-controller"


def webhook(
    values: dict[str, Any], name: str, kind: str = "ValidatingWebhookConfiguration"
) -> dict[str, Any]:
    for r in render_objects(values):
        if r.kind == kind:
            for w in r.obj["webhooks"]:
                if w["name"] == name:
                    return dict(w)
    raise AssertionError(f"{kind} {name} not rendered")


def config(values: dict[str, Any]) -> dict[str, Any]:
    cm = next(
        r.obj for r in render_objects(values) if r.kind == "ConfigMap" and "config.yaml" in r.obj["data"]
    )
    loaded: dict[str, Any] = yaml.safe_load(cm["data"]["config.yaml"])
    return loaded


def selector_names(w: dict[str, Any]) -> list[str]:
    return next(
        list(e["values"])
        for e in w["namespaceSelector"]["matchExpressions"]
        if e["key"] == "kubernetes.io/metadata.name"
    )


def test_entry_fails_open_with_a_short_timeout() -> None:
    w = webhook({}, ENTRY)
    assert (w["failurePolicy"], w["timeoutSeconds"], w["sideEffects"]) == ("Ignore", 3, "None")
    assert w["clientConfig"]["service"]["path"] == "/validate/pod-allocations"


def test_scope_match_conditions_sends_only_writes_that_involve_allocation_annotations() -> None:
    w = webhook({"webhooks": {"scope": "matchConditions"}}, ENTRY)
    assert [c["name"] for c in w["matchConditions"]] == ["allocation-annotations-involved"]
    program = celpy.Environment().program(celpy.Environment().compile(w["matchConditions"][0]["expression"]))

    def sent(obj: dict[str, Any], old: dict[str, Any] | None) -> bool:
        operation = "UPDATE" if old is not None else "CREATE"
        activation = {
            "object": celpy.json_to_cel(obj),
            "oldObject": celpy.json_to_cel(old),
            "request": celpy.json_to_cel({"operation": operation}),
        }
        return bool(program.evaluate(activation))

    plain = {"metadata": {"name": "p", "annotations": {"team": "a"}}}
    forged = {"metadata": {"name": "p", "annotations": {"volcano.sh/vgpu-ids-new": "GPU-0,NVIDIA,1024,10:;"}}}
    binding = {"kind": "Binding", "metadata": {"name": "p", "annotations": {"volcano.sh/vgpu-node": "n1"}}}
    assert sent(forged, plain)  # added
    assert sent(plain, forged)  # removed
    assert sent(binding, None)  # a Binding that carries an assignment
    assert not sent(plain, plain)  # e.g. the kubelet's status writes
    assert not sent({"kind": "Binding", "metadata": {"name": "p"}}, None)


def test_scope_namespace_opt_in_uses_the_opt_in_label_and_no_conditions() -> None:
    w = webhook({"webhooks": {"scope": "namespaceOptIn"}}, ENTRY)
    assert "matchConditions" not in w
    assert {"key": "vgpu-guard.io/admission", "operator": "In", "values": ["enabled"]} in w[
        "namespaceSelector"
    ]["matchExpressions"]


def test_exempt_namespaces_leave_the_mutation_and_workloads_but_not_the_forgery_checks() -> None:
    values = {
        "webhooks": {"scope": "matchConditions"},
        "config": {"admission": {"exemptNamespaces": ["lab"]}},
    }
    assert "lab" in selector_names(webhook(values, "pods.vgpu.vgpu-guard.io", "MutatingWebhookConfiguration"))
    assert "lab" in selector_names(webhook(values, "workloads.vgpu.vgpu-guard.io"))
    assert "lab" not in selector_names(webhook(values, "pods.vgpu.vgpu-guard.io"))
    assert "lab" not in selector_names(webhook(values, ENTRY))
    assert config(values)["admission"]["exemptNamespaces"] == ["lab"]


def test_no_label_opts_a_namespace_out() -> None:
    w = webhook({"webhooks": {"scope": "matchConditions"}}, "pods.vgpu.vgpu-guard.io")
    assert [e["key"] for e in w["namespaceSelector"]["matchExpressions"]] == ["kubernetes.io/metadata.name"]


def test_config_names_the_controller_and_the_plugin_as_allocation_writers() -> None:
    admission = config({})["admission"]
    assert admission["allocationWriters"] == [
        CONTROLLER_SA,
        "system:serviceaccount:kube-system:volcano-device-plugin",
        "system:serviceaccount:volcano-system:volcano-scheduler",
    ]
    assert admission["allocationWriterGroups"] == ["system:masters"]
    custom = config({"config": {"admission": {"allocationWriters": ["system:serviceaccount:gpu:plugin"]}}})
    assert custom["admission"]["allocationWriters"] == [CONTROLLER_SA, "system:serviceaccount:gpu:plugin"]


def test_the_entry_can_be_turned_off() -> None:
    for r in render_objects({"webhooks": {"validatePodAllocations": {"enabled": False}}}):
        if r.kind == "ValidatingWebhookConfiguration":
            assert ENTRY not in [w["name"] for w in r.obj["webhooks"]]
