"""``-f`` directories and stdin, ``-o json|yaml|policyreport`` on ``review`` and ``simulate``, exit codes in --help."""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.builders import gpu_node, pod
from tests.cli.policyreport_schema import POLICY_REPORT_SCHEMA
from vgpu_guard.cli.app import run
from vgpu_guard.cli.policy_report import report_name
from vgpu_guard.engine.rule_catalog import RULES
from vgpu_guard.engine.rules.families import FAMILIES

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
DENIALS = EXAMPLES / "denials" / "pods.yaml"
REPORT_SCHEMA = json.loads((ROOT / "docs" / "review-report.schema.json").read_text())


def out_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = run([*args, "-o", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_review_of_the_examples_directory_is_one_result_per_object_and_rule(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    code, out = out_json(capsys, "review", "-f", "examples/", "-R")
    assert code == 1
    jsonschema.Draft202012Validator.check_schema(REPORT_SCHEMA)
    jsonschema.Draft202012Validator(REPORT_SCHEMA).validate(out)
    memory = [r for r in out["results"] if r["name"] == "memory-in-gib"]
    assert memory == [
        {
            "source": "examples/denials/pods.yaml#1",
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": "default",
            "name": "memory-in-gib",
            "allowed": False,
            "rule": "vgpu-memory-unit",
            "path": "spec.containers[0].resources.limits[volcano.sh/vgpu-memory]",
            "action": "deny",
            "message": "12Gi has a unit suffix but vgpu-memory counts MiB (12Gi would mean 12884901888 MiB); "
            "write 12288",
            "fix": "write 12288",
        }
    ]
    # Two violations of one rule on two fields: two results, a path each.
    forged = [(r["rule"], r["path"]) for r in out["results"] if r["name"] == "forged-assignment"]
    assert forged == [
        ("allocation-annotations", "metadata.annotations[volcano.sh/vgpu-node]"),
        ("allocation-annotations", "metadata.annotations[volcano.sh/vgpu-ids-new]"),
    ]
    mig = [(r["action"], r["path"]) for r in out["results"] if r["name"] == "mig-pod"]
    assert ("mutate", "/metadata/annotations/vgpu-guard.io~1mig-profile") in mig
    s = out["summary"]
    assert s["objects"] == len(out["objects"]) and s["allowed"] + s["denied"] == s["objects"]
    assert s["deny"] == sum(1 for r in out["results"] if r["action"] == "deny")
    assert s["denied"] == sum(1 for o in out["objects"] if not o["allowed"])


def test_the_report_schema_rejects_what_it_should(capsys: pytest.CaptureFixture[str]) -> None:
    _, out = out_json(capsys, "review", "-f", str(DENIALS))
    validator = jsonschema.Draft202012Validator(REPORT_SCHEMA)
    result = out["results"][0]
    for broken in (
        {**result, "action": "enforce"},
        {**result, "rule": ""},
        {k: v for k, v in result.items() if k != "fix"},
    ):
        assert not validator.is_valid({**out, "results": [broken]})


def test_directory_without_r_reads_only_its_own_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "pods.yaml").write_text(DENIALS.read_text())
    (tmp_path / "notes.txt").write_text("not yaml")
    assert run(["review", "-f", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"error: {tmp_path}: a directory with no .yaml, .yml or .json files (add -R to read its subdirectories)\n"
    )
    code, out = out_json(capsys, "review", "-f", str(tmp_path), "-R")
    assert code == 1 and out["objects"][0]["source"] == f"{tmp_path}/sub/pods.yaml#1"


def test_stdin_is_named_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(DENIALS.read_text()))
    code, out = out_json(capsys, "review", "-f", "-")
    assert code == 1 and [o["source"] for o in out["objects"]] == ["stdin#1", "stdin#2", "stdin#3"]


def test_review_policyreport_validates_against_the_crd_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        run(
            [
                "review",
                "-f",
                str(DENIALS),
                "-f",
                str(EXAMPLES / "queue-guarantees" / "queues.yaml"),
                "-o",
                "policyreport",
            ]
        )
        == 1
    )
    text = capsys.readouterr().out
    assert "&id" not in text and "*id" not in text  # every value written out, no YAML aliases
    reports = list(yaml.safe_load_all(text))
    validator = jsonschema.Draft202012Validator(POLICY_REPORT_SCHEMA)
    for report in reports:
        validator.validate(report)
    assert [(r["kind"], r["metadata"].get("namespace")) for r in reports] == [
        ("ClusterPolicyReport", None),
        ("PolicyReport", "default"),
    ]
    namespaced = reports[1]
    # 4 violations; a pass for each family of each object that found nothing (3 objects x 4 - 3).
    assert namespaced["summary"] == {"pass": 9, "fail": 4, "warn": 0, "error": 0, "skip": 0}
    first = namespaced["results"][0]
    assert (first["policy"], first["rule"]) == ("vgpu-request-values", "vgpu-memory-unit")
    assert (first["category"], first["severity"], first["result"]) == ("vGPU requests", "medium", "fail")
    assert first["resources"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "memory-in-gib", "namespace": "default"}
    ]
    assert first["message"].startswith("spec.containers[0].resources.limits[volcano.sh/vgpu-memory]: 12Gi")


def test_simulate_yaml_and_policyreport(capsys: pytest.CaptureFixture[str]) -> None:
    scenario = str(EXAMPLES / "simulate")
    assert run(["simulate", "-f", scenario, "-o", "yaml"]) == 0
    out = yaml.safe_load(capsys.readouterr().out)
    assert {"results", "summary", "admission", "pods"} <= set(out)
    jsonschema.Draft202012Validator(
        {**REPORT_SCHEMA, "required": ["summary", "results"], "additionalProperties": True}
    ).validate(out)
    assert out["summary"]["objects"] == len(out["admission"])
    assert run(["simulate", "-f", scenario, "-o", "policyreport"]) == 0
    for report in yaml.safe_load_all(capsys.readouterr().out):
        jsonschema.Draft202012Validator(POLICY_REPORT_SCHEMA).validate(report)


def test_a_finding_the_fleet_admits_is_reported_as_the_warning_it_was(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """On a fleet that scales the capacity rules warn: the report says warn, not the configured deny."""
    big = pod({"volcano.sh/vgpu-number": 16, "volcano.sh/vgpu-memory": 90000}, name="big")
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(big))
    (tmp_path / "scale.yaml").write_text("admission:\n  fleetScaling: scaling\n")
    code, out = out_json(
        capsys, "review", "-f", str(tmp_path / "pod.yaml"), "--config", str(tmp_path / "scale.yaml")
    )
    assert code == 0 and out["objects"][0]["allowed"]
    assert {(r["rule"], r["action"]) for r in out["results"] if r["action"] != "mutate"} == {
        ("vgpu-number-range", "warn"),
        ("vgpu-memory-too-large", "warn"),
    }
    assert out["summary"]["deny"] == 0 and out["summary"]["warn"] == 2
    code = run(
        [
            "review",
            "-f",
            str(tmp_path / "pod.yaml"),
            "--config",
            str(tmp_path / "scale.yaml"),
            "-o",
            "policyreport",
        ]
    )
    report = yaml.safe_load(capsys.readouterr().out)
    # pass: the families that found nothing (isolation, request values, assignments)
    assert code == 0 and {r["result"] for r in report["results"]} == {"warn", "pass"}


# --- the PolicyReport as Kyverno's read (issue 38) ----------------------------------------------------

NODE = gpu_node("a30", count=1)
PRIORITY = {
    "apiVersion": "scheduling.k8s.io/v1",
    "kind": "PriorityClass",
    "metadata": {"name": "high"},
    "value": 1000,
}
NGINX = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web"},
    "spec": {"containers": [{"name": "w", "image": "nginx"}]},
}


def test_the_policyreport_golden(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """One policy per rule family with category and severity, a timestamp per result, a name from
    the input, and results only for the judged: no row for the Node, the PriorityClass or nginx."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1750000000")
    monkeypatch.chdir(tmp_path)
    gib = pod({"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": "12Gi"}, name="gib")
    Path("team-a.yaml").write_text(yaml.safe_dump_all([NODE, PRIORITY, NGINX, gib]))
    assert run(["review", "-f", "team-a.yaml", "-o", "policyreport"]) == 1
    reports = list(yaml.safe_load_all(capsys.readouterr().out))
    resource = {"apiVersion": "v1", "kind": "Pod", "name": "gib", "namespace": "default"}
    stamp = {"seconds": 1750000000, "nanos": 0}

    def passed(policy: str, category: str, severity: str, description: str) -> dict[str, Any]:
        return {
            "policy": policy,
            "rule": policy,
            "category": category,
            "severity": severity,
            "result": "pass",
            "message": f"passed: {description}",
            "scored": True,
            "source": "vgpu-guard",
            "properties": {"input": "team-a.yaml#4"},
            "timestamp": stamp,
            "resources": [resource],
        }

    path = "spec.containers[0].resources.limits[volcano.sh/vgpu-memory]"
    assert reports == [
        {
            "apiVersion": "wgpolicyk8s.io/v1alpha2",
            "kind": "PolicyReport",
            "metadata": {
                "name": "vgpu-guard-review-team-a",
                "labels": {"app.kubernetes.io/managed-by": "vgpu-guard"},
                "namespace": "default",
            },
            "summary": {"pass": 3, "fail": 1, "warn": 0, "error": 0, "skip": 0},
            "results": [
                {
                    "policy": "vgpu-request-values",
                    "rule": "vgpu-memory-unit",
                    "category": "vGPU requests",
                    "severity": "medium",
                    "result": "fail",
                    "message": f"{path}: 12Gi has a unit suffix but vgpu-memory counts MiB (12Gi would mean "
                    "12884901888 MiB); write 12288",
                    "scored": True,
                    "source": "vgpu-guard",
                    "properties": {"action": "deny", "path": path, "input": "team-a.yaml#4"},
                    "timestamp": stamp,
                    "resources": [resource],
                },
                passed(
                    "vgpu-fleet-capacity",
                    "GPU capacity",
                    "medium",
                    "vGPU requests some node of the fleet can hold",
                ),
                passed(
                    "vgpu-isolation",
                    "vGPU isolation",
                    "high",
                    "containers that cannot escape or blur their vGPU slice",
                ),
                passed(
                    "gpu-assignment-integrity",
                    "GPU assignments",
                    "high",
                    "GPU assignments written only by the allocators, and only where the GPUs are free",
                ),
            ],
        }
    ]
    jsonschema.Draft202012Validator(POLICY_REPORT_SCHEMA).validate(reports[0])


def test_exit_zero_publishes_the_report_of_a_denial(capsys: pytest.CaptureFixture[str]) -> None:
    """CI writes the report and uploads it; without --exit-zero it needed `|| true`, which also
    hides an unreadable input (exit 2, still returned)."""
    assert run(["review", "-f", str(DENIALS), "-o", "policyreport", "--exit-zero"]) == 0
    (report,) = yaml.safe_load_all(capsys.readouterr().out)
    assert report["summary"]["fail"] == 4
    assert run(["review", "-f", str(DENIALS), "--exit-zero"]) == 0
    assert capsys.readouterr().out.endswith("0 allowed, 3 denied.\n")
    assert run(["review", "-f", str(ROOT / "no-such-file.yaml"), "--exit-zero"]) == 2


@pytest.mark.parametrize(
    ("command", "inputs", "name"),
    [
        ("review", ["examples/denials/pods.yaml"], "vgpu-guard-review-examples-denials-pods"),
        ("review", ["-"], "vgpu-guard-review-stdin"),
        ("simulate", ["default-scenario"], "vgpu-guard-simulate-default-scenario"),
        ("review", ["examples/", "team_B/Queues.yml"], "vgpu-guard-review-examples-team-b-queues"),
        (
            "review",
            ["/tmp/pytest-of-ci/pytest-1234/test_a_very_long_name0/cluster/workloads.yaml"],
            "vgpu-guard-review-tmp-pytest-of-ci-pytest-1234-test-a-a907b518",
        ),
    ],
)
def test_the_report_is_named_after_its_input(command: str, inputs: list[str], name: str) -> None:
    assert report_name(command, inputs) == name
    assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)


def test_every_rule_has_one_family() -> None:
    """A rule outside every family would reach reports with no policy, category or severity."""
    counts = Counter(rule for family in FAMILIES for rule in family.rules)
    assert set(counts) == set(RULES)
    assert {rule for rule, n in counts.items() if n > 1} == set()


def test_a_decision_that_is_no_rules_is_an_error_result(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An object refused before any rule ran (too many containers) was judged by no policy: Kyverno's
    ``error`` ("could not be evaluated"), not a silent allowed-looking gap in the report."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1750000000")
    two = pod(containers=[{"name": n, "image": "i"} for n in ("a", "b")], name="wide")
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(two))
    (tmp_path / "config.yaml").write_text("webhook: {maxContainers: 1}\n")
    argv = ["review", "-f", str(tmp_path / "pod.yaml"), "--config", str(tmp_path / "config.yaml")]
    assert run([*argv, "-o", "policyreport"]) == 1
    (report,) = yaml.safe_load_all(capsys.readouterr().out)
    assert report["summary"] == {"pass": 0, "fail": 0, "warn": 0, "error": 1, "skip": 0}
    (row,) = report["results"]
    assert {k: row[k] for k in ("policy", "rule", "category", "severity", "result")} == {
        "policy": "vgpu-guard-admission",
        "rule": "object-too-large",
        "category": "Admission",
        "severity": "medium",
        "result": "error",
    }
    assert row["message"].startswith("[object-too-large] ")
