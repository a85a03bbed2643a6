"""Which namespaces the pod webhooks guard, on every server version the chart installs on (issue 38
item 2): a default install guards every namespace but the excluded ones everywhere; below 1.28 (no
matchConditions) the pod webhooks then see every pod and fail open, and ``webhooks.scope:
namespaceOptIn`` is the fail-closed preset. Below 1.21 the namespaces the selectors exclude carry
no ``kubernetes.io/metadata.name`` label, so a pre-install/pre-upgrade hook sets it on exactly those.
What fails closed never sees kube-system or our own namespace, on any version."""

from __future__ import annotations

from typing import Any

import pytest

from tests.manifests.chart import Rendered, render_objects

MINORS = range(20, 35)
NS = "vgpu-guard"
POD_CREATE = {"pods.vgpu.vgpu-guard.io"}
NAME_LABEL = "kubernetes.io/metadata.name"
OPT_IN = {"key": "vgpu-guard.io/admission", "operator": "In", "values": ["enabled"]}


def webhooks(objects: list[Rendered]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (r.kind, w)
        for r in objects
        if r.kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for w in r.obj["webhooks"]
    ]


def excluded(w: dict[str, Any]) -> set[str]:
    return {
        v
        for e in w["namespaceSelector"]["matchExpressions"]
        if e["key"] == NAME_LABEL and e["operator"] == "NotIn"
        for v in e["values"]
    }


@pytest.mark.parametrize("minor", MINORS, ids=lambda m: f"1.{m}")
def test_a_default_install_guards_every_namespace_but_the_excluded_ones(minor: int) -> None:
    """Before: below 1.28 every pod webhook required the opt-in label, so an unlabelled namespace's
    pods were never checked."""
    for kind, w in webhooks(render_objects(kube_version=f"1.{minor}.0")):
        if "namespaceSelector" not in w:
            continue  # Queues: cluster-scoped
        assert OPT_IN not in w["namespaceSelector"]["matchExpressions"], (minor, kind, w["name"])
        assert [e["key"] for e in w["namespaceSelector"]["matchExpressions"]] == [NAME_LABEL]
        if w["name"] in POD_CREATE:
            # Without matchConditions every pod comes here: fail open, and wait briefly; with them
            # only GPU pods do, and those fail closed.
            cel = bool(w.get("matchConditions"))
            assert cel == (minor >= 28), (minor, w["name"])
            assert (w["failurePolicy"], w["timeoutSeconds"]) == (("Fail", 5) if cel else ("Ignore", 3))


@pytest.mark.parametrize("minor", [20, 24, 27], ids=lambda m: f"1.{m}")
def test_the_opt_in_preset_guards_labelled_namespaces_and_fails_closed(minor: int) -> None:
    objects = render_objects({"webhooks": {"scope": "namespaceOptIn"}}, kube_version=f"1.{minor}.0")
    for _, w in webhooks(objects):
        if "namespaceSelector" in w:
            assert OPT_IN in w["namespaceSelector"]["matchExpressions"], w["name"]
        if w["name"] in POD_CREATE:
            assert (w["failurePolicy"], w["timeoutSeconds"]) == ("Fail", 5)


def test_explicit_policies_are_kept_in_every_scope() -> None:
    values = {"webhooks": {"mutatePods": {"failurePolicy": "Fail", "timeoutSeconds": 8}}}
    for version in ("1.25.0", "1.30.0"):
        [mutate] = [
            w for k, w in webhooks(render_objects(values, kube_version=version)) if k.startswith("Mut")
        ][:1]
        assert (mutate["failurePolicy"], mutate["timeoutSeconds"]) == ("Fail", 8)
    with pytest.raises(Exception, match='failurePolicy is "Sometimes"; use auto, Fail or Ignore'):
        render_objects({"webhooks": {"validatePods": {"failurePolicy": "Sometimes"}}})
    with pytest.raises(Exception, match="is not one of auto, matchConditions, allNamespaces, namespaceOptIn"):
        render_objects({"webhooks": {"scope": "everything"}})


def _hook(objects: list[Rendered]) -> list[Rendered]:
    return [r for r in objects if r.is_hook and r.obj["metadata"]["name"].endswith("-name-label")]


@pytest.mark.parametrize("scope", ["auto", "namespaceOptIn", "matchConditions"])
@pytest.mark.parametrize("minor", MINORS, ids=lambda m: f"1.{m}")
def test_what_fails_closed_never_sees_kube_system_or_our_namespace(minor: int, scope: str) -> None:
    """kube-system, kube-node-lease and the release namespace are kept out by their name label; the
    API server sets it from 1.21, and below that the hook labels every namespace any selector keeps
    out (the exempt ones too), before the webhook configurations exist (pre-install) or change."""
    values = {"webhooks": {"scope": scope}, "config": {"admission": {"exemptNamespaces": ["batch-legacy"]}}}
    objects = render_objects(values, namespace="gpu-system", kube_version=f"1.{minor}.0")
    kept_out: set[str] = set()
    for _, w in webhooks(objects):
        if "namespaceSelector" in w:
            assert {"kube-system", "kube-node-lease", "gpu-system"} <= excluded(w), w["name"]
            kept_out |= excluded(w)
    hook = _hook(objects)
    if minor >= 21:
        assert hook == []
        return
    assert sorted(r.kind for r in hook) == ["ClusterRole", "ClusterRoleBinding", "Job", "ServiceAccount"]
    for r in hook:
        assert r.obj["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    job = next(r.obj for r in hook if r.kind == "Job")
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert container["args"][0] == "label-ns" and set(container["args"][1:]) == kept_out
    assert kept_out == {"kube-system", "kube-node-lease", "gpu-system", "batch-legacy"}
    assert "ttlSecondsAfterFinished" not in job["spec"]  # alpha on 1.20: the server drops it
    [role] = [r.obj for r in hook if r.kind == "ClusterRole"]
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["namespaces"],
            "resourceNames": container["args"][1:],
            "verbs": ["patch"],
        }
    ]


def test_the_hook_can_be_left_out() -> None:
    assert _hook(render_objects({"nameLabelHook": {"enabled": False}}, kube_version="1.20.2")) == []
