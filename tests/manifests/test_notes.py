"""What `helm install` prints: the notes must match the scope the chart rendered for the cluster."""

from __future__ import annotations

from tests.manifests.chart import render_templates


def notes(kube_version: str) -> str:
    return next(
        text
        for path, text in render_templates(kube_version=kube_version).items()
        if path.endswith("NOTES.txt")
    )


def test_before_1_28_the_notes_say_to_label_namespaces_or_nothing_is_checked() -> None:
    text = notes("1.25.0")
    assert "Pods are checked ONLY in namespaces labelled vgpu-guard.io/admission=enabled" in text
    assert "kubectl label namespace <namespace> vgpu-guard.io/admission=enabled" in text
    assert "never reach it" not in text


def test_from_1_28_the_notes_say_pods_without_vgpu_never_reach_the_webhook() -> None:
    text = notes("1.30.0")
    assert "pods that request no vGPU never reach it (matchConditions)" in text
    assert "label namespace" not in text
    assert "GPU pods are REJECTED while the webhook is unreachable" in text
