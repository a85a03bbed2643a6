"""What `helm install` prints: the notes must match the scope the chart rendered for the cluster."""

from __future__ import annotations

from typing import Any

from tests.manifests.chart import render_templates


def notes(kube_version: str, values: dict[str, Any] | None = None) -> str:
    return next(
        text
        for path, text in render_templates(values=values, kube_version=kube_version).items()
        if path.endswith("NOTES.txt")
    )


def test_before_1_28_the_notes_say_every_namespace_is_checked_and_nothing_blocked() -> None:
    """Issue 38 item 2: below 1.28 the default guarded only opted-in namespaces; it now guards every
    namespace but the excluded ones, failing open, and the notes say so, and what the other choice is."""
    for version in ("1.21.0", "1.27.9"):
        text = notes(version)
        assert (
            "Scope: allNamespaces (webhooks.scope=auto picked it: matchConditions need Kubernetes 1.28)."
            in text
        )
        assert (
            "Every pod of every namespace but kube-system, kube-node-lease, vgpu-guard reaches the pod webhooks"
            in text
        )
        assert "admit pods unchecked and block none" in text
        assert "webhooks.mutatePods.failurePolicy=Ignore, webhooks.validatePods.failurePolicy=Ignore" in text
        assert "To fail closed on chosen namespaces instead: webhooks.scope=namespaceOptIn" in text
        assert "label namespace" not in text and "never reach it" not in text
        assert "kubernetes.io/metadata.name" not in text


def test_on_1_20_the_notes_say_how_the_excluded_namespaces_stay_out() -> None:
    text = notes("1.20.2")
    assert "Kubernetes 1.20 sets no kubernetes.io/metadata.name label, the one that keeps those out" in text
    assert "the install hook (nameLabelHook) set it on them" in text
    assert "Let only\nadministrators patch namespaces" in text
    off = notes("1.20.2", {"nameLabelHook": {"enabled": False}})
    assert "nameLabelHook is off, so label each of them yourself" in off
    assert "kubectl label namespace <namespace> kubernetes.io/metadata.name=<namespace>" in off


def test_the_opt_in_preset_says_to_label_namespaces_or_nothing_is_checked() -> None:
    text = notes("1.25.0", {"webhooks": {"scope": "namespaceOptIn"}})
    assert "Scope: namespaceOptIn (webhooks.scope=namespaceOptIn)." in text
    assert "Pods are checked ONLY in namespaces labelled vgpu-guard.io/admission=enabled" in text
    assert "kubectl label namespace <namespace> vgpu-guard.io/admission=enabled" in text
    assert "GPU pods and all others are\nREJECTED there while the webhook is unreachable" in text
    assert "never reach it" not in text


def test_from_1_28_the_notes_say_pods_without_vgpu_never_reach_the_webhook() -> None:
    text = notes("1.30.0")
    assert "pods that request no vGPU never reach it (matchConditions)" in text
    assert "label namespace" not in text
    assert "GPU pods are REJECTED while the webhook is unreachable" in text
