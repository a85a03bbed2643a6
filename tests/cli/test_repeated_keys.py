"""A key given twice in one YAML mapping: read as kubectl applies it (the last value), and said."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vgpu_guard.cli.app import run
from vgpu_guard.cli.documents import parse_documents

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: twice
spec:
  containers:
  - name: c
    image: busybox
    image: nginx
    resources:
      limits:
        memory: 1Gi
      limits:
        memory: 2Gi
"""


def test_the_last_value_is_read_and_each_repeat_is_named_with_both_lines() -> None:
    [document] = parse_documents(POD, "pod.yaml")
    container = document.object["spec"]["containers"][0]
    assert container["image"] == "nginx" and container["resources"]["limits"] == {"memory": "2Gi"}
    assert document.warnings == (
        'line 9: key "image" is given twice in one mapping (first on line 8); the last value is used, '
        "as kubectl applies it",
        'line 13: key "limits" is given twice in one mapping (first on line 11); the last value is '
        "used, as kubectl applies it",
    )


@pytest.mark.parametrize(
    "text",
    [
        # The same key in two mappings, and a merge key overridden by its mapping: both YAML's rules.
        "apiVersion: v1\nkind: Pod\nmetadata: {name: a, labels: {name: a}}\n",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"
        "data:\n  base: &b {k: v}\n  use:\n    <<: *b\n    k: w\n",
    ],
    ids=["two-mappings", "merge-key"],
)
def test_yaml_that_repeats_no_key_warns_of_nothing(text: str) -> None:
    [document] = parse_documents(text, "ok.yaml")
    assert document.warnings == ()


def test_a_repeat_under_an_alias_is_named_once() -> None:
    text = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"
        "data:\n  one: &shared {k: v, k: w}\n  two: *shared\n  three: *shared\n"
    )
    [document] = parse_documents(text, "aliases.yaml")
    assert len(document.warnings) == 1 and 'key "k"' in document.warnings[0]


def test_a_list_carries_the_warnings_on_its_first_object() -> None:
    text = (
        "apiVersion: v1\nkind: List\nitems:\n"
        "- {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}\n"
        "- {apiVersion: v1, kind: ConfigMap, metadata: {name: b, name: c}}\n"
    )
    first, second = parse_documents(text, "list.yaml")
    assert second.object["metadata"]["name"] == "c"
    assert [len(first.warnings), len(second.warnings)] == [1, 0]
    assert first.warnings[0].startswith('line 5: key "name" is given twice')


@pytest.mark.parametrize("command", ["review", "simulate"])
def test_the_commands_warn_on_stderr_and_keep_stdout_the_report(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "pod.yaml"
    path.write_text(POD)
    assert run([command, "-f", str(path), "-o", "json"]) == 0
    out, err = capsys.readouterr()
    json.loads(out)  # the report alone
    assert f'warning: {path}#1: line 9: key "image" is given twice in one mapping (first on line 8)' in err
    assert err.count("warning: ") == 2
