"""The default chart, rendered for every Kubernetes minor it claims, holds only fields that minor knows.

Chart.yaml's ``kubeVersion`` floor (1.20) to the newest minor kubernetes-validate ships: for each, the
chart is rendered as ``helm template --kube-version 1.N.0`` renders it (``.Capabilities.KubeVersion``
picks the PDB API, the webhook scope, the preStop action, the Job's TTL) and every object, Helm hooks
included, is validated strictly (unknown fields rejected) against that minor's OpenAPI schema. A field
a server does not know is either rejected by Helm's and kubectl's validation (``preStop.sleep`` before
1.29: ``unknown field "sleep"``) or dropped without a word, so it must not be rendered there.

kubernetes-validate ships schemas from 1.25 only; 1.21 to 1.24 come from tests/data/kube-schemas (the
same library's earlier release, for the kinds the chart renders). 1.20 is judged by the real
kube-apiserver 1.20.2 instead, which Helm installs the README's values on with the Deployments enabled
(tests/e2e/test_clients.py::test_helm_install_upgrade_uninstall); it is listed here as skipped.
"""

from __future__ import annotations

import re
from importlib.resources import files
from typing import Any

import jsonschema
import kubernetes_validate  # type: ignore[import-untyped]  # kubernetes-validate ships no type information
import pytest
import yaml

from tests.kube_schema import kube_validate, vendored_minors
from tests.manifests.chart import CHART, RENDERED, RENDERED_FOR, Rendered, render_objects

E2E_TEST = "tests/e2e/test_clients.py::test_helm_install_upgrade_uninstall"


def _floor() -> int:
    """The minor of Chart.yaml's ``kubeVersion: ">=1.N.0-0"``."""
    constraint = yaml.safe_load((CHART / "Chart.yaml").read_text("utf-8"))["kubeVersion"]
    match = re.fullmatch(r">=\s*v?1\.(\d+)\.0(-0)?", constraint)
    assert match, f"Chart.yaml kubeVersion {constraint!r} is not a plain floor; teach this test to read it"
    return int(match[1])


def _shipped() -> set[int]:
    """The minors whose strict schemas the installed kubernetes-validate carries."""
    schemas = files("kubernetes_validate") / "kubernetes-json-schema"
    found = (re.fullmatch(r"v1\.(\d+)\.0-local-strict", p.name) for p in schemas.iterdir())
    return {int(m[1]) for m in found if m}


FLOOR = _floor()
SHIPPED = _shipped()
VENDORED = vendored_minors() - SHIPPED
# 1.34 at least (the newest minor when the check was written), and whatever newer the library ships.
NEWEST = max(34, *SHIPPED)


def _minors() -> list[object]:
    out: list[object] = []
    for minor in range(FLOOR, NEWEST + 1):
        version = f"1.{minor}.0"
        if minor in SHIPPED or minor in VENDORED:
            out.append(pytest.param(version, id=version))
            continue
        judged = (
            f"judged instead by the real kube-apiserver 1.20.2 in {E2E_TEST}[cluster]"
            if minor == 20
            else "no test judges this minor's fields"
        )
        reason = (
            f"kubernetes-validate {kubernetes_validate.__version__} ships no OpenAPI schema for {version} "
            f"(it has 1.{min(SHIPPED)}.0 to 1.{max(SHIPPED)}.0); {judged}"
        )
        out.append(pytest.param(version, id=f"{version}-no-schema", marks=pytest.mark.skip(reason=reason)))
    return out


def test_the_range_covers_the_floor_and_the_newest() -> None:
    assert FLOOR == 20, "Chart.yaml's kubeVersion floor moved: update the docstring and the e2e note"
    assert SHIPPED and max(SHIPPED) >= 34, f"kubernetes-validate ships {sorted(SHIPPED)}"
    # Every minor above the floor has a schema: the library's, or tests/data/kube-schemas.
    unjudged = [m for m in range(FLOOR + 1, NEWEST + 1) if m not in SHIPPED | VENDORED]
    assert not unjudged, f"no schema for 1.{unjudged}: vendor it into tests/data/kube-schemas"


@pytest.mark.parametrize("version", _minors())
def test_default_chart_validates_strictly_on(version: str) -> None:
    objects = render_objects(kube_version=version)
    assert objects
    problems = []
    for rendered in objects:
        obj = rendered.obj
        try:
            kube_validate(obj, version)
        except jsonschema.ValidationError as e:
            path = ".".join(str(p) for p in e.absolute_path)
            problems.append(
                f"{rendered.template}: {obj['kind']}/{obj['metadata']['name']}: {path}: {e.message}"
            )
        except kubernetes_validate.SchemaNotFoundError as e:
            problems.append(f"{rendered.template}: {obj['apiVersion']} {obj['kind']}: no schema: {e.message}")
    assert not problems, f"Kubernetes {version} does not know:\n" + "\n".join(problems)


RENDERED_FLOOR = int(RENDERED_FOR.split(".")[1])


@pytest.mark.parametrize(
    "version", [f"1.{m}.0" for m in range(RENDERED_FLOOR, NEWEST + 1) if m in SHIPPED | VENDORED], ids=str
)
def test_the_rendered_manifest_validates_on_every_minor_it_claims(version: str) -> None:
    # manifests/rendered/vgpu-guard.yaml (plain kubectl apply) says which minors it is for.
    text = RENDERED.read_text("utf-8")
    assert f"# For Kubernetes 1.{RENDERED_FLOOR} or later" in text
    problems = []
    for obj in (d for d in yaml.safe_load_all(text) if d):
        try:
            kube_validate(obj, version)
        except jsonschema.ValidationError as e:
            path = ".".join(str(p) for p in e.absolute_path)
            problems.append(f"{obj['kind']}/{obj['metadata']['name']}: {path}: {e.message}")
    assert not problems, f"Kubernetes {version} does not know:\n" + "\n".join(problems)


# Fields a minor's schema already lists while its server drops them (alpha: the feature gate is off
# by default) or, before they exist, rejects them. Strict schemas cannot tell the first case apart,
# so the chart's gates are pinned here, both ways: (kind, path, first minor where the field is
# served by default, feature gate).
GATED = [
    ("Job", "spec.ttlSecondsAfterFinished", 21, "TTLAfterFinished"),
    ("Deployment", "spec.template.spec.containers.*.lifecycle.preStop.sleep", 30, "PodLifecycleSleepAction"),
    ("MutatingWebhookConfiguration", "webhooks.*.matchConditions", 28, "AdmissionWebhookMatchConditions"),
    ("ValidatingWebhookConfiguration", "webhooks.*.matchConditions", 28, "AdmissionWebhookMatchConditions"),
]


def _found(node: Any, path: list[str]) -> bool:
    if not path:
        return True
    head, rest = path[0], path[1:]
    if head == "*":
        return isinstance(node, list) and any(_found(item, rest) for item in node)
    return isinstance(node, dict) and head in node and _found(node[head], rest)


def _with_field(objects: list[Rendered], kind: str, path: str) -> list[str]:
    return [f"{r.kind}/{r.name}" for r in objects if r.kind == kind and _found(r.obj, path.split("."))]


@pytest.mark.parametrize("minor", range(FLOOR, NEWEST + 1), ids=lambda m: f"1.{m}.0")
def test_feature_gated_fields_only_where_on_by_default(minor: int) -> None:
    objects = render_objects(kube_version=f"1.{minor}.0")
    for kind, path, since, gate in GATED:
        carriers = _with_field(objects, kind, path)
        if minor < since:
            assert not carriers, f"{', '.join(carriers)}: {path} needs {gate}, on by default from 1.{since}"
        else:
            assert carriers, f"no {kind} carries {path} on 1.{minor}, where {gate} is on by default"


def test_the_prestop_fallback_runs_on_the_products_image() -> None:
    # Below 1.30 the webhook's preStop delay is an exec of the image's own interpreter: the
    # python base image has python3 on PATH (Dockerfile), no shell or sleep binary is assumed.
    (deployment,) = [
        r.obj for r in render_objects(kube_version="1.29.0") if r.kind == "Deployment" and "webhook" in r.name
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["lifecycle"]["preStop"] == {
        "exec": {"command": ["python3", "-c", "import time; time.sleep(5)"]}
    }
    dockerfile = (CHART.parents[2] / "Dockerfile").read_text("utf-8")
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in dockerfile
    off = render_objects({"webhook": {"preStopSleepSeconds": 0}}, kube_version="1.29.0")
    assert not _with_field(off, "Deployment", "spec.template.spec.containers.*.lifecycle")
