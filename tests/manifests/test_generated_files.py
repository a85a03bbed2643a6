"""Generated files match the chart, and every value is documented (helm-docs `# --`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.manifests.chart import CHART, RENDERED, documented_values, generated_files, render_objects


@pytest.mark.parametrize("path_and_content", list(generated_files()), ids=lambda pc: pc[0].name)
def test_generated_file_is_current(path_and_content: tuple[Path, str]) -> None:
    path, content = path_and_content
    assert path.exists(), f"{path} is missing; run: python -m tests.manifests.chart"
    assert path.read_text("utf-8") == content, f"{path} is stale; run: python -m tests.manifests.chart"


def test_rendered_manifest_is_plain_kubectl_input() -> None:
    docs = [d for d in yaml.safe_load_all(RENDERED.read_text("utf-8")) if d]
    assert docs[0]["kind"] == "Namespace" and docs[0]["metadata"]["name"] == "vgpu-guard"
    kinds = [d["kind"] for d in docs]
    # No Helm hook: applied by kubectl, a pre-delete Job would run at once and delete the webhooks.
    assert not [d for d in docs if "helm.sh/hook" in (d["metadata"].get("annotations") or {})]
    assert "Job" not in kinds
    # Everything else the chart renders is there, webhook configurations after their Service.
    expected = {(r.kind, r.name) for r in render_objects() if not r.is_hook}
    assert {(d["kind"], d["metadata"]["name"]) for d in docs[1:]} == expected
    assert kinds.index("Service") < kinds.index("ValidatingWebhookConfiguration")
    assert kinds.index("Namespace") < kinds.index("ServiceAccount")


def test_every_value_is_documented() -> None:
    documented, undocumented = documented_values((CHART / "values.yaml").read_text("utf-8"))
    assert undocumented == [], f"values without a `# --` comment: {undocumented}"
    assert len(documented) > 100
    assert all(v.description for v in documented)


def test_an_undocumented_value_is_reported() -> None:
    text = "a:\n  # -- documented\n  b: 1\n  c: 2\nd: {}\n"
    documented, undocumented = documented_values(text)
    assert [v.key for v in documented] == ["a.b"]
    assert undocumented == ["a.c", "d"]


def test_crds_of_the_directory_are_all_rendered() -> None:
    crd_dir = CHART / "files" / "crds"
    assert crd_dir.is_symlink() and crd_dir.resolve() == (CHART.parents[1] / "crds").resolve()
    files = sorted(crd_dir.glob("*.yaml"))
    expected = {
        doc["metadata"]["name"] for f in files for doc in yaml.safe_load_all(f.read_text("utf-8")) if doc
    }
    rendered = [r.obj for r in render_objects() if r.kind == "CustomResourceDefinition"]
    assert {c["metadata"]["name"] for c in rendered} == expected
    for crd in rendered:
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert not [
        r for r in render_objects({"crds": {"install": False}}) if r.kind == "CustomResourceDefinition"
    ]
