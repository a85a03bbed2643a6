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


ARBITER = "pod-assignments.vgpu-guard.io"


def test_entry_fails_open_with_a_short_timeout() -> None:
    w = webhook({}, ENTRY)
    assert (w["failurePolicy"], w["timeoutSeconds"], w["sideEffects"]) == ("Ignore", 3, "NoneOnDryRun")
    assert w["clientConfig"]["service"]["path"] == "/validate/pod-allocations"


def test_the_arbiter_entry_fails_closed_within_the_webhook_timeout() -> None:
    w = webhook({"webhooks": {"scope": "matchConditions"}}, ARBITER)
    assert (w["failurePolicy"], w["timeoutSeconds"], w["sideEffects"]) == ("Fail", 5, "NoneOnDryRun")
    assert w["clientConfig"]["service"]["path"] == "/validate/pod-allocations"
    # Our own answer (a retriable 503) comes before the API server gives up, in both scopes.
    write_timeout = config({})["arbiter"]["writeTimeoutSeconds"]
    assert write_timeout < webhook({}, ENTRY)["timeoutSeconds"] < w["timeoutSeconds"]


def test_before_1_28_there_is_no_arbiter_entry_and_the_open_entry_arbitrates() -> None:
    """Without matchConditions a fail-closed entry would see every pod update and binding in scope."""
    names = [
        w["name"]
        for r in render_objects({"webhooks": {"scope": "namespaceOptIn"}})
        if r.kind == "ValidatingWebhookConfiguration"
        for w in r.obj["webhooks"]
    ]
    assert ENTRY in names and ARBITER not in names


def _program(w: dict[str, Any]) -> Any:
    env = celpy.Environment()
    programs = [env.program(env.compile(c["expression"])) for c in w["matchConditions"]]

    def sent(obj: dict[str, Any], old: dict[str, Any] | None, sub: str = "") -> bool:
        operation = "UPDATE" if old is not None else "CREATE"
        # "bindings": the legacy door (POST namespaces/NS/bindings), a resource of its own.
        resource, sub = ("bindings", "") if sub == "bindings" else ("pods", sub)
        request = {
            "operation": operation,
            "resource": {"group": "", "version": "v1", "resource": resource},
            # As kube-apiserver builds it: subResource left out when empty (omitempty).
            **({"subResource": sub} if sub else {}),
        }
        activation = {
            "object": celpy.json_to_cel(obj),
            "oldObject": celpy.json_to_cel(old),
            "request": celpy.json_to_cel(request),
        }
        return all(bool(p.evaluate(activation)) for p in programs)

    return sent


PLAIN = {"metadata": {"name": "p", "annotations": {"team": "a"}}}
IDS = {"metadata": {"name": "p", "annotations": {"volcano.sh/vgpu-ids-new": "GPU-0,NVIDIA,1024,10:;"}}}
OTHER_IDS = {"metadata": {"name": "p", "annotations": {"volcano.sh/vgpu-ids-new": "GPU-1,NVIDIA,1024,10:;"}}}
CONFIRMED = {
    "metadata": {
        "name": "p",
        "annotations": {
            "volcano.sh/vgpu-ids-new": "GPU-0,NVIDIA,1024,10:;",
            "volcano.sh/bind-phase": "success",
        },
    }
}
ASSIGNING = {
    "kind": "Binding",
    "metadata": {"name": "p", "annotations": {"volcano.sh/vgpu-ids-new": "GPU-0,NVIDIA,1024,10:;"}},
}
NODE_ONLY = {"kind": "Binding", "metadata": {"name": "p", "annotations": {"volcano.sh/vgpu-node": "n1"}}}


def test_scope_match_conditions_split_the_writes_between_the_two_entries() -> None:
    """The arbiter's entry gets exactly the writes that carry an assignment; the open entry the rest
    of the writes that involve an allocation annotation; nothing reaches both."""
    values = {"webhooks": {"scope": "matchConditions"}}
    who = webhook(values, ENTRY)
    assert [c["name"] for c in who["matchConditions"]] == [
        "allocation-annotations-involved",
        "no-assignment-written",
    ]
    open_, closed = _program(who), _program(webhook(values, ARBITER))
    # (object, oldObject, subresource) -> which entry is sent it
    cases = [
        ((IDS, PLAIN, ""), "arbiter"),  # Volcano 1.10-1.15 patches an assignment in
        ((OTHER_IDS, IDS, ""), "arbiter"),  # ... or changes it
        ((ASSIGNING, None, "binding"), "arbiter"),  # Volcano >= 1.16's annotated Binding
        ((ASSIGNING, None, "bindings"), "arbiter"),  # ... through the legacy bindings door
        ((PLAIN, IDS, ""), "open"),  # removed (a discard, or a forgery)
        ((CONFIRMED, IDS, ""), "open"),  # the device plugin confirms bind-phase
        ((CONFIRMED, IDS, "status"), "open"),
        ((NODE_ONLY, None, "binding"), "open"),  # a Binding with a stray allocation annotation
        ((NODE_ONLY, None, "bindings"), "open"),
        ((PLAIN, PLAIN, ""), None),  # e.g. the kubelet's status writes
        # A plain Binding commits what Volcano 1.10-1.15 patched onto the pod: reserved from the
        # stored pod, on the open entry (it cannot tell a vGPU pod's Binding from any other).
        (({"kind": "Binding", "metadata": {"name": "p"}}, None, "binding"), "open"),
        (({"kind": "Binding", "metadata": {"name": "p"}}, None, "bindings"), "open"),
    ]
    for (obj, old, sub), expected in cases:
        got = {"arbiter": closed(obj, old, sub), "open": open_(obj, old, sub)}
        assert got == {"arbiter": expected == "arbiter", "open": expected == "open"}, (obj, old, sub)


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
