"""The webhook's audit line of a denial says why: each violation's rule, action, path and message,
bounded in size (the first few, and how many more)."""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
import pytest

from tests.builders import pod
from tests.webhook.conftest import admission_review
from tests.webhook.test_https import post
from vgpu_guard.engine.decision import AdmissionDecision
from vgpu_guard.engine.violations import Violation
from vgpu_guard.webhook.audit_fields import AUDITED_VIOLATIONS, MESSAGE_LIMIT, violation_fields
from vgpu_guard.webhook.server import RunningWebhook

MEM, NUM = "volcano.sh/vgpu-memory", "volcano.sh/vgpu-number"


def _audit_entry(caplog: pytest.LogCaptureFixture) -> dict[str, Any]:
    records = [r for r in caplog.records if r.name == "vgpu_guard.audit"]
    assert len(records) == 1
    entry: dict[str, Any] = records[0].audit  # type: ignore[attr-defined]
    return entry


async def test_a_denials_audit_line_carries_each_violations_path_and_message(
    http: aiohttp.ClientSession, webhook: RunningWebhook, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="vgpu_guard.audit")
    await post(http, webhook, "/validate/pods", admission_review(pod({NUM: 1, MEM: "12Gi"})))
    entry = _audit_entry(caplog)
    assert entry["allowed"] is False and entry["rules"] == ["vgpu-memory-unit"]
    assert entry["violations"] == [
        {
            "rule": "vgpu-memory-unit",
            "action": "enforce",
            "path": "spec.containers[0].resources.limits[volcano.sh/vgpu-memory]",
            "message": "12Gi has a unit suffix but vgpu-memory counts MiB (12Gi would mean 12884901888 MiB); "
            "write 12288",
        }
    ]
    assert entry["violations_omitted"] == 0


async def test_an_allowed_decision_has_the_same_keys_empty(
    http: aiohttp.ClientSession, webhook: RunningWebhook, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="vgpu_guard.audit")
    await post(http, webhook, "/validate/pods", admission_review(pod({NUM: 1, MEM: 100})))
    entry = _audit_entry(caplog)
    assert entry["allowed"] is True
    assert entry["violations"] == [] and entry["violations_omitted"] == 0


def test_many_violations_are_bounded_and_counted() -> None:
    many = tuple(Violation("vgpu-cores-range", f"spec.containers[{i}]", "x" * 5000) for i in range(40))
    fields = violation_fields(
        AdmissionDecision(allowed=False, code=403, rules=("vgpu-cores-range",), violations=many)
    )
    assert len(fields["violations"]) == AUDITED_VIOLATIONS
    assert fields["violations_omitted"] == 40 - AUDITED_VIOLATIONS
    assert [v["path"] for v in fields["violations"]] == [
        f"spec.containers[{i}]" for i in range(AUDITED_VIOLATIONS)
    ]
    assert all(len(v["message"]) <= MESSAGE_LIMIT for v in fields["violations"])


def test_a_denial_without_violations_keeps_its_message() -> None:
    decision = AdmissionDecision(
        allowed=False,
        code=503,
        message="[pod-assignment] vgpu-guard could not reserve the GPU assignment (timeout); retry in a few seconds",
        rules=("pod-assignment",),
    )
    assert violation_fields(decision) == {
        "violations": [
            {
                "rule": "pod-assignment",
                "action": "enforce",
                "path": "",
                "message": "vgpu-guard could not reserve the GPU assignment (timeout); retry in a few seconds",
            }
        ],
        "violations_omitted": 0,
    }
