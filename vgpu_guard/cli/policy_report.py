"""``-o policyreport``: the admission results as ``wgpolicyk8s.io/v1alpha2`` reports, as Kyverno writes them.

What Kyverno's reports carry and Policy Reporter reads: one policy per concern (our rule families,
engine/rules/families.py) with its ``category`` and ``severity``, a ``timestamp`` per result, and
results only for the objects a policy judged. So:

- an object the webhook does not judge (a Node, a PriorityClass, a pod without vGPU) has no
  result at all: 33 ``pass`` rows for Nodes drowned the three that mattered (issue 38);
- a judged object gets a ``fail`` (denial or audit finding) or ``warn`` per violation, and a
  ``pass`` for each family that applies to it and found nothing, as Kyverno reports a matched
  rule that passed; a decision that is no rule's (an object too large to judge) is an ``error``;
- mutations are not results: Kyverno reports validation, and a defaulted field is not a finding;
- one PolicyReport per namespace and a ClusterPolicyReport for cluster-scoped objects, named after
  the input (``vgpu-guard-review-examples-denials-pods``) so reports of different inputs applied to
  one cluster do not overwrite each other.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from vgpu_guard.cli.admission_entries import CLUSTER_SCOPED
from vgpu_guard.cli.report import rule_results
from vgpu_guard.engine.admission import ReviewResult
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.gang import gang_of, ib_enabled
from vgpu_guard.engine.rules.families import FAMILIES, Family, family_of
from vgpu_guard.engine.rules.workloads import pod_templates
from vgpu_guard.engine.untrusted import as_mapping
from vgpu_guard.engine.vgpu_request import requests_vgpu
from vgpu_guard.engine.volcano_job import is_volcano_job

__all__ = ["SOURCE", "policy_reports", "report_name", "report_time"]

# The engine that wrote the report (``source`` of every result), as Kyverno writes "kyverno".
SOURCE = "vgpu-guard"
_NAME_LIMIT = 63
# PolicyReport result per action: a recorded (audit) finding is a failure the report keeps.
_RESULT = {"deny": "fail", "warn": "warn", "audit": "fail"}
# The families of a pod and of the workloads that make pods, when they request vGPU.
_VGPU = ("vgpu-request-values", "vgpu-fleet-capacity", "vgpu-isolation", "gpu-assignment-integrity")
_FAMILY = {f.policy: f for f in FAMILIES}
_ERROR = Family("vgpu-guard-admission", "Admission", "medium", "objects the webhook can judge", frozenset())


def report_name(command: str, inputs: Sequence[str]) -> str:
    """``vgpu-guard-<command>-<the inputs as a DNS label>``, at most 63 characters: a long or
    several inputs end with a hash of them all, so two inputs never share a report."""
    slug = re.sub(r"\.(yaml|yml|json)\b", "", " ".join(inputs).lower())
    slug = re.sub(r"[^a-z0-9]+", "-", slug).strip("-") or "stdin"
    name = f"{SOURCE}-{command}-{slug}"
    if len(name) <= _NAME_LIMIT:
        return name
    digest = hashlib.sha256("\0".join(inputs).encode()).hexdigest()[:8]
    return f"{name[: _NAME_LIMIT - 9].rstrip('-')}-{digest}"


def report_time() -> int:
    """Now, in unix seconds; ``SOURCE_DATE_EPOCH`` when set (reproducible reports in CI)."""
    fixed = os.environ.get("SOURCE_DATE_EPOCH", "")
    return int(fixed) if fixed.isdigit() else int(time.time())


def _templates(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [obj] if obj.get("kind") == "Pod" else [t for _, t in pod_templates(obj)]


def _families(result: ReviewResult, config: GuardConfig) -> list[Family]:
    """The families that judge the object (none: the object gets no result)."""
    obj = result.object
    if obj.get("kind") == "Queue":
        return [_FAMILY["volcano-queue-guarantees"]]
    templates = _templates(obj)
    vgpu = any(requests_vgpu(as_mapping(t.get("spec")), config.nvidia) for t in templates)
    gang = ib_enabled(config) and (is_volcano_job(obj) or any(gang_of(t) for t in templates))
    fired = {f for v in result.decision.violations if (f := family_of(v.rule)) is not None}
    names = [*(_VGPU if vgpu else ()), *(("ib-gang-placement",) if gang else ())]
    return sorted({*(_FAMILY[n] for n in names), *fired}, key=FAMILIES.index)


def _resource(source: str, obj: Mapping[str, Any]) -> dict[str, str]:
    meta = as_mapping(obj.get("metadata"))
    kind = str(obj.get("kind") or "")
    ref = {"apiVersion": str(obj.get("apiVersion") or ""), "kind": kind}
    ref["name"] = str(meta.get("name") or meta.get("generateName") or "")
    if kind not in CLUSTER_SCOPED:
        ref["namespace"] = str(meta.get("namespace") or "default")
    return ref


def _result(family: Family, rule: str, outcome: str, message: str, **properties: str) -> dict[str, Any]:
    return {
        "policy": family.policy,
        "rule": rule,
        "category": family.category,
        "severity": family.severity,
        "result": outcome,
        "message": message,
        "scored": True,
        "source": SOURCE,
        "properties": properties,
    }


def _object_results(source: str, result: ReviewResult, config: GuardConfig) -> list[dict[str, Any]]:
    """The rows of one object: its findings, then a pass per family that found nothing."""
    decision = result.decision
    if not decision.allowed and not decision.violations:
        rule = decision.rules[0] if decision.rules else "admission"
        return [_result(_ERROR, rule, "error", decision.message, input=source)]
    rows = []
    for r in rule_results([(source, result)]):
        family = family_of(r["rule"])
        if family is not None and r["action"] in _RESULT:
            message = f"{r['path']}: {r['message']}"
            props = {"action": r["action"], "path": r["path"], "input": source}
            rows.append(_result(family, r["rule"], _RESULT[r["action"]], message, **props))
    fired = {row["policy"] for row in rows}
    for family in _families(result, config):
        if family.policy not in fired:
            rows.append(_result(family, family.policy, "pass", f"passed: {family.description}", input=source))
    return rows


def policy_reports(
    reviewed: Iterable[tuple[str, ReviewResult]], *, config: GuardConfig, name: str, now: int
) -> list[dict[str, Any]]:
    """The reports of ``reviewed`` ((source, result) pairs): one per namespace, one for the cluster."""
    by_scope: dict[str, list[dict[str, Any]]] = {}
    stamp = {"seconds": now, "nanos": 0}
    for source, result in reviewed:
        resource = _resource(source, result.object)
        rows = _object_results(source, result, config)
        by_scope.setdefault(resource.get("namespace", ""), []).extend(
            {**row, "timestamp": stamp, "resources": [resource]} for row in rows
        )
    return [_report(namespace, results, name) for namespace, results in sorted(by_scope.items()) if results]


def _report(namespace: str, results: list[dict[str, Any]], name: str) -> dict[str, Any]:
    counts = {
        k: sum(1 for r in results if r["result"] == k) for k in ("pass", "fail", "warn", "error", "skip")
    }
    metadata: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/managed-by": SOURCE}}
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": "wgpolicyk8s.io/v1alpha2",
        "kind": "PolicyReport" if namespace else "ClusterPolicyReport",
        "metadata": metadata,
        "summary": counts,
        "results": results,
    }
