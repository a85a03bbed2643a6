"""``-f`` directories and stdin, ``-o json|yaml|policyreport`` on ``review`` and ``simulate``, exit codes in --help."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.builders import pod
from tests.cli.policyreport_schema import POLICY_REPORT_SCHEMA
from vgpu_guard.cli.app import run

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
    assert namespaced["summary"] == {"pass": 0, "fail": 4, "warn": 0, "error": 0, "skip": 0}
    first = namespaced["results"][0]
    assert first["policy"] == "vgpu-guard" and first["rule"] == "vgpu-memory-unit"
    assert first["result"] == "fail"
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
    assert code == 0 and {r["result"] for r in report["results"]} == {"warn", "pass"}  # pass: the mutation
