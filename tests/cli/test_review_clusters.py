"""``review`` judges what ``simulate`` and the webhook judge, against the cluster each file describes.

Issue 38: ``review -f examples/simulate/ib-gang.yaml`` admitted all 9 objects (simulate refused
the 8 pods of ``pretrain``), ``review -f examples/ -R`` pooled every file's Nodes into one cluster
(so Queue ``batch``, denied in its own story, came out allowed) and listed every Node as an
allowed object.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vgpu_guard.cli.app import run

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
IB_GANG = EXAMPLES / "simulate" / "ib-gang.yaml"
PRETRAIN_DENIED = (
    "[ib-cluster] spec.minAvailable: gang default/pretrain needs 8 members in one IB cluster but none can "
    "hold them (ib-a has room for 4 (4 eligible nodes, 98304 MiB GPU memory free); ib-b has room for 2 (2 "
    "eligible nodes, 49152 MiB GPU memory free)); lower minMember, free capacity in one cluster, or add nodes"
)


@pytest.fixture
def as_simulated(tmp_path: Path) -> str:
    """The settings ``simulate`` turns on by default (routing, IB clusters from the example label)."""
    path = tmp_path / "config.yaml"
    path.write_text("scheduling: {routing: true}\ntopology: {ibClusterLabel: vgpu-guard.io/ib-cluster}\n")
    return str(path)


def as_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = run([*argv, "-o", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_review_denies_the_gang_no_ib_cluster_holds_as_simulate_does(
    capsys: pytest.CaptureFixture[str], as_simulated: str
) -> None:
    code, out = as_json(capsys, "review", "-f", str(IB_GANG), "--config", as_simulated)
    assert code == 1
    assert [(o["kind"], o["name"], o["allowed"]) for o in out["objects"]] == [
        ("Job", "pretrain", False),
        ("Job", "finetune", True),
        ("Job", "allreduce", True),
    ]
    assert out["objects"][0]["message"] == PRETRAIN_DENIED
    assert out["summary"]["objects"] == 3


@pytest.mark.parametrize("example", sorted(p.name for p in (EXAMPLES / "simulate").glob("*.yaml")))
def test_review_and_simulate_deny_the_same_objects_of_each_example(
    capsys: pytest.CaptureFixture[str], as_simulated: str, example: str
) -> None:
    path = str(EXAMPLES / "simulate" / example)
    _, reviewed = as_json(capsys, "review", "-f", path, "--config", as_simulated)
    _, simulated = as_json(capsys, "simulate", "-f", path)
    # The objects of the file, not the pods simulate's stand-in controllers made ("#7 (Job ...)").
    applied = [a for a in simulated["admission"] if not a["source"].endswith(")")]
    assert [(o["kind"], o["name"], o["allowed"], o["message"]) for o in reviewed["objects"]] == [
        (a["kind"], a["name"], a["allowed"], a["message"]) for a in applied
    ]


def test_nodes_and_running_pods_are_the_cluster_not_results(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = as_json(capsys, "review", "-f", str(EXAMPLES / "simulate" / "overcommit.yaml"))
    assert code == 1
    assert [(o["kind"], o["name"], o["allowed"]) for o in out["objects"]] == [
        ("Deployment", "web", True),
        ("Deployment", "web-typo", False),
    ]
    assert {r["kind"] for r in out["results"]} == {"Deployment"}


def test_each_file_of_a_directory_is_judged_against_its_own_cluster(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out = as_json(capsys, "review", "-f", str(EXAMPLES), "-R")
    assert code == 1
    assert (
        out["cluster"]
        == "each file's own (--cluster FILE or --kubeconfig PATH judges every file against one)"
    )
    batch = [o for o in out["objects"] if o["name"] == "batch"]
    assert [(o["source"].rpartition("/")[2], o["allowed"]) for o in batch] == [
        ("queues.yaml#4", True),  # its cluster is cluster.yaml, a file of its own: --cluster
        ("queue-guarantees.yaml#8", False),  # its own story: 48 cpu, 32 guaranteed before it
    ]
    assert "Node" not in {o["kind"] for o in out["objects"]}
    by_file = {o["source"].partition("#")[0]: o["cluster"] for o in out["objects"]}
    assert by_file[str(EXAMPLES / "simulate" / "queue-guarantees.yaml")] == "the file's own Nodes (4)"
    assert by_file[str(EXAMPLES / "denials" / "pods.yaml")].startswith("built-in example cluster")


def test_the_text_names_each_files_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["review", "-f", str(EXAMPLES / "queue-guarantees"), "-f", str(IB_GANG)]) == 0
    text = capsys.readouterr().out.replace(str(ROOT) + "/", "")
    assert text.splitlines()[:3] == [
        "Reviewed 7 object(s) in 3 files, each against its own cluster "
        "(--cluster FILE or --kubeconfig PATH judges every file against one).",
        "",
        "examples/queue-guarantees/cluster.yaml: nothing to judge (8 Nodes: cluster state; "
        "pass the file as --cluster FILE to judge others against it)",
    ]
    assert (
        "examples/queue-guarantees/queues.yaml: 4 object(s) against built-in example cluster "
        "(the file brings no Nodes; --cluster FILE or --kubeconfig PATH for yours)" in text
    )
    assert "examples/simulate/ib-gang.yaml: 3 object(s) against the file's own Nodes (6)" in text
    assert text.endswith("7 allowed, 0 denied.\n")


def test_one_cluster_for_every_file_when_one_is_given(capsys: pytest.CaptureFixture[str]) -> None:
    cluster = str(EXAMPLES / "queue-guarantees" / "cluster.yaml")
    code, out = as_json(capsys, "review", "-f", str(EXAMPLES / "queue-guarantees"), "--cluster", cluster)
    assert code == 1
    assert out["cluster"] == f"cluster file {cluster}"
    assert [(o["name"], o["allowed"]) for o in out["objects"]] == [
        ("training", True),
        ("inference", True),
        ("notebooks", True),
        ("batch", False),
    ]
