"""Queue guarantees beyond capacity, end to end through ``vgpu-guard review``: the files in
examples/queue-guarantees as users run them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vgpu_guard.cli.app import run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "queue-guarantees"
BATCH_DENIED = (
    "[queue-guarantee-capacity] spec.guarantee.resource.cpu: 36 would bring guaranteed cpu to 68 but "
    "cluster capacity is 64 (8 Ready nodes); lower it to at most 32 or add nodes"
)


def test_review_denies_the_queue_past_capacity(capsys: pytest.CaptureFixture[str]) -> None:
    queues, cluster = EXAMPLES / "queues.yaml", EXAMPLES / "cluster.yaml"
    code = run(["review", "-f", str(queues), "--cluster", str(cluster)])
    out = capsys.readouterr().out
    assert code == 1
    assert out.splitlines() == [
        f"Reviewed 4 object(s) against cluster file {cluster}.",
        "",
        f"allowed Queue training  [{queues}#1]",
        f"allowed Queue inference  [{queues}#2]",
        f"allowed Queue notebooks  [{queues}#3]",
        f"DENIED  Queue batch  [{queues}#4]",
        f"    {BATCH_DENIED}",
        "",
        "3 allowed, 1 denied.",
    ]


def test_review_json_carries_the_same_decision(capsys: pytest.CaptureFixture[str]) -> None:
    code = run(
        [
            "review",
            "-f",
            str(EXAMPLES / "queues.yaml"),
            "--cluster",
            str(EXAMPLES / "cluster.yaml"),
            "-o",
            "json",
        ]
    )
    results = json.loads(capsys.readouterr().out)["objects"]
    assert code == 1
    assert [(r["name"], r["allowed"], r["code"], r["message"]) for r in results] == [
        ("training", True, 200, ""),
        ("inference", True, 200, ""),
        ("notebooks", True, 200, ""),
        ("batch", False, 403, BATCH_DENIED),
    ]
