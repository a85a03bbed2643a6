"""The text output glitches of issue 23, each pinned: every test here fails on the old output."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from vgpu_guard.cli.app import run
from vgpu_guard.cli.documents import read_documents
from vgpu_guard.cli.scenario import default_scenario

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
DENIALS = EXAMPLES / "denials" / "pods.yaml"


def text(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    run(list(argv))
    return capsys.readouterr().out


def test_a_denied_jobs_pods_row_says_why_before_the_warnings(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A Job the admin may create (trustedUsers) whose pods its controller may not: the pods' row
    says why, and carries no notes about mutations of pods that are never created."""
    template = {
        "metadata": {"annotations": {"volcano.sh/vgpu-node": "gpu-0"}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"volcano.sh/vgpu-number": 1}}}]},
    }
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "migrated"},
        "spec": {"minAvailable": 2, "tasks": [{"name": "w", "replicas": 2, "template": template}]},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    (tmp_path / "config.yaml").write_text("admission: {trustedUsers: [kubernetes-admin]}\n")
    out = text(
        capsys, "simulate", "-f", str(tmp_path / "job.yaml"), "--config", str(tmp_path / "config.yaml"), "-v"
    )
    lines = out.splitlines()
    row = next(i for i, line in enumerate(lines) if "pods of Job default/migrated" in line)
    assert lines[row].lstrip().startswith("DENIED")
    assert lines[row + 1].startswith(
        "        [allocation-annotations] metadata.annotations[volcano.sh/vgpu-node]: "
    )
    # No notes about changes to pods that are never created (issue 38 item 8): the reason alone.
    assert not lines[row + 2].lstrip().startswith("warning: ")


def test_every_line_of_a_multi_line_denial_is_indented_under_its_row(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    containers = [
        {"name": n, "image": "x", "resources": {"limits": {"volcano.sh/vgpu-cores": "150"}}}
        for n in ("a", "b")
    ]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "two-bad"},
        "spec": {"containers": containers},
    }
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(pod))
    review = [
        line for line in text(capsys, "review", "-f", str(path)).splitlines() if "[vgpu-cores-range]" in line
    ]
    assert len(review) == 2 and all(line.startswith("    [vgpu-cores-range] ") for line in review)
    # -v: under the ADMISSION row and the Rejected pod's row in PODS, each line of the denial indented;
    # without -v: under the object named in "Why denied" and "Why not bound" (issue 38).
    for flags, first in (["-v"], "      denied by admission: [vgpu-multi-container] "), ([], None):
        out = text(capsys, "simulate", "-f", str(path), *flags)
        denial = [line for line in out.splitlines() if "[vgpu-cores-range]" in line]
        assert len(denial) == 4, out
        assert all(
            line.startswith(("        [vgpu-cores-range] ", "      [vgpu-cores-range] ")) for line in denial
        ), out
        assert first is None or first in out
    assert "    default/two-bad: [vgpu-multi-container] " in out
    assert "    default/two-bad: denied by admission: [vgpu-multi-container] " in out


def test_a_file_of_nodes_is_a_cluster_not_a_list_of_verdicts(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 38: every Node was listed as an allowed object (issue 23: as "default/<node>")."""
    out = text(capsys, "review", "-f", str(EXAMPLES / "queue-guarantees" / "cluster.yaml"))
    assert out == (
        "Nothing to judge: the input is cluster state (8 Nodes); pass it as --cluster FILE to judge other "
        "files against it.\n\n0 allowed, 0 denied.\n"
    )


def test_stdin_is_stdin_in_the_text(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(DENIALS.read_text()))
    out = text(capsys, "review", "-f", "-")
    assert "[stdin#1]" in out and "[-#1]" not in out


def test_review_and_simulate_spell_the_verdict_alike(capsys: pytest.CaptureFixture[str]) -> None:
    out = text(capsys, "review", "-f", str(EXAMPLES / "mig" / "pods.yaml"))
    assert "ALLOWED" not in out and "allowed Pod default/guide-hami-pod  [" in out
    denied = text(capsys, "review", "-f", str(DENIALS))
    assert "DENIED  Pod default/memory-in-gib  [" in denied


def test_one_pass_is_singular(capsys: pytest.CaptureFixture[str]) -> None:
    out = text(capsys, "simulate", "-f", str(EXAMPLES / "simulate" / "queue-guarantees.yaml"))
    assert "settled in 1 pass." in out and "1 passes" not in out


def test_the_built_in_scenarios_sources_are_files_users_can_open() -> None:
    # Not "default.yaml#9" (a package file): the example file and document each object comes from.
    documents = default_scenario().documents
    assert documents[0].source == "examples/simulate/overcommit.yaml#1"
    for document in documents:
        path, _, index = document.source.rpartition("#")
        assert not path.startswith("default.yaml")
        same = [d for d in read_documents(str(ROOT / path)) if d.source.endswith(f"#{index}")]
        assert [d.object for d in same] == [document.object], document.source
