"""Real `helm lint --strict`, and every rendered object against the Kubernetes API schemas.

kubernetes-validate ships the OpenAPI schemas of each Kubernetes minor version (1.25 to 1.37 in the
pinned release) and validates offline; strict mode also rejects fields the API does not have, which
catches indentation slips that `helm lint` accepts. Every value scenario is rendered for, and checked
against, 1.30 and the newest version shipped; the default values on every minor the chart supports
are test_kube_versions.py's. Kinds that are not part of Kubernetes
(cert-manager, prometheus-operator) get their own schemas below, written from their API references
for the fields we render.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import helm_python.chart
import jsonschema
import kubernetes_validate  # type: ignore[import-untyped]  # kubernetes-validate ships no type information
import pytest
from helm_python.errors import HelmRenderError

from tests.kube_schema import kube_validate
from tests.manifests.chart import CHART, render_objects
from tests.manifests.conftest import OTHER_RELEASE, SCENARIOS

KUBE_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())
assert all(v.count(".") == 2 for v in KUBE_VERSIONS)

_DURATION = {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"}
_OBJECT_META = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", "maxLength": 253},
        "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "additionalProperties": False,
}
_ISSUER_REF = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": {"type": "string"}, "kind": {"type": "string"}, "group": {"type": "string"}},
    "additionalProperties": False,
}


def _custom(api_version: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": api_version},
            "kind": {"const": kind},
            "metadata": _OBJECT_META,
            "spec": spec,
        },
        "additionalProperties": False,
    }


# cert-manager.io/v1 (cert-manager.io/docs/reference/api-docs) and monitoring.coreos.com/v1
# (prometheus-operator API reference): only the fields this chart renders, closed to others.
CUSTOM_SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("cert-manager.io/v1", "Issuer"): _custom(
        "cert-manager.io/v1",
        "Issuer",
        {
            "type": "object",
            "properties": {"selfSigned": {"type": "object"}},
            "required": ["selfSigned"],
            "additionalProperties": False,
        },
    ),
    ("cert-manager.io/v1", "Certificate"): _custom(
        "cert-manager.io/v1",
        "Certificate",
        {
            "type": "object",
            "required": ["secretName", "issuerRef"],
            "properties": {
                "secretName": {"type": "string"},
                "duration": _DURATION,
                "renewBefore": _DURATION,
                "commonName": {"type": "string", "maxLength": 64},
                "dnsNames": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "privateKey": {
                    "type": "object",
                    "properties": {
                        "algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]},
                        "size": {"type": "integer"},
                        "rotationPolicy": {"enum": ["Never", "Always"]},
                    },
                    "additionalProperties": False,
                },
                "usages": {
                    "type": "array",
                    "items": {
                        "enum": ["server auth", "client auth", "digital signature", "key encipherment"]
                    },
                },
                "issuerRef": _ISSUER_REF,
            },
            "additionalProperties": False,
        },
    ),
    ("monitoring.coreos.com/v1", "ServiceMonitor"): _custom(
        "monitoring.coreos.com/v1",
        "ServiceMonitor",
        {
            "type": "object",
            "required": ["selector", "endpoints"],
            "properties": {
                "namespaceSelector": {
                    "type": "object",
                    "properties": {"matchNames": {"type": "array", "items": {"type": "string"}}},
                    "additionalProperties": False,
                },
                "selector": {
                    "type": "object",
                    "properties": {
                        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}
                    },
                    "additionalProperties": False,
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["port"],
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "interval": _DURATION,
                            "scrapeTimeout": _DURATION,
                        },
                        "additionalProperties": False,
                    },
                },
            },
            "additionalProperties": False,
        },
    ),
}


def test_cached_validator_agrees_with_the_library() -> None:
    for rendered in render_objects():
        if (rendered.obj["apiVersion"], rendered.kind) in CUSTOM_SCHEMAS:
            continue
        kubernetes_validate.validate(rendered.obj, KUBE_VERSIONS[0], strict=True)
        kube_validate(rendered.obj, KUBE_VERSIONS[0])


def test_lint_strict_defaults() -> None:
    report = helm_python.chart.lint(str(CHART), strict=True, namespace="vgpu-guard", kube_version="v1.30.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and problems == [], report


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_lint_strict_with_values(name: str) -> None:
    report = helm_python.chart.lint(str(CHART), SCENARIOS[name], strict=True, namespace="vgpu-guard")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and problems == [], report


def test_lint_reports_a_broken_template(tmp_path: Path) -> None:
    # The lint call must be able to fail: a copy of the chart whose Service renders invalid YAML.
    copy = tmp_path / "vgpu-guard"
    shutil.copytree(CHART, copy, symlinks=True)
    (copy / "files" / "crds").unlink()
    (copy / "files" / "crds").mkdir()
    services = copy / "templates" / "services.yaml"
    services.write_text(
        services.read_text("utf-8").replace("  type: ClusterIP", " type: ClusterIP", 1), "utf-8"
    )
    report = helm_python.chart.lint(str(copy), strict=True)
    assert report["errors"] or any(m["severity"] >= 2 for m in report["messages"]), report


def test_render_refuses_an_unknown_certificate_mode() -> None:
    # Lint mode turns `fail` into a log line, so the chart's own checks are exercised by rendering.
    with pytest.raises(HelmRenderError, match="use builtin or certManager"):
        render_objects({"certs": {"mode": "selfsigned"}})


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_object_matches_its_schema(name: str, version: str) -> None:
    objects = render_objects(SCENARIOS[name], kube_version=version)
    assert objects
    for rendered in objects:
        obj = rendered.obj
        custom = CUSTOM_SCHEMAS.get((obj["apiVersion"], obj["kind"]))
        where = f"{rendered.template}: {obj['kind']}/{obj['metadata']['name']}"
        try:
            if custom is not None:
                jsonschema.validate(obj, custom)
            else:
                kube_validate(obj, version)
        except jsonschema.ValidationError as e:
            pytest.fail(f"{where} (Kubernetes {version}): {e.message} at {list(e.absolute_path)}")
        except kubernetes_validate.SchemaNotFoundError as e:
            pytest.fail(f"{where}: no schema: {e.message}; add one to CUSTOM_SCHEMAS")


def test_schemas_reject_a_misplaced_field() -> None:
    # Strict validation is what catches an indentation slip; make sure it does.
    deployment = next(r.obj for r in render_objects() if r.kind == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readOnlyRootFilesystem"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBE_VERSIONS[0], strict=True)
    with pytest.raises(jsonschema.ValidationError):
        kube_validate(deployment, KUBE_VERSIONS[0])


def test_other_release_name_and_namespace_validate() -> None:
    name, namespace = OTHER_RELEASE
    for rendered in render_objects({}, name=name, namespace=namespace):
        if (rendered.obj["apiVersion"], rendered.kind) not in CUSTOM_SCHEMAS:
            kube_validate(rendered.obj, KUBE_VERSIONS[-1])
        assert rendered.name.startswith(f"{name}-vgpu-guard") or rendered.kind == "CustomResourceDefinition"
