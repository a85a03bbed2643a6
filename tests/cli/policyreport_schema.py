"""The ``wgpolicyk8s.io/v1alpha2`` PolicyReport schema, vendored for the ``-o policyreport`` tests.

Trimmed from the openAPIV3Schema of kubernetes-sigs/wg-policy-prototypes
policy-report/crd/v1alpha2/wgpolicyk8s.io_clusterpolicyreports.yaml (commit 037274b4aefe); the
namespaced PolicyReport CRD has the same schema. Kept: the fields we emit and their types and
enums; dropped: descriptions, ``resourceSelector``, ``scopeSelector``. Added:
``additionalProperties: false`` on results, resources and summary (the API server would silently
prune unknown fields; the test should see them instead) and ``apiVersion``/``kind`` consts.
"""

from __future__ import annotations

from typing import Any

_REFERENCE: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        k: {"type": "string"}
        for k in ("apiVersion", "fieldPath", "kind", "name", "namespace", "resourceVersion", "uid")
    },
}

POLICY_REPORT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["apiVersion", "kind", "metadata"],
    "properties": {
        "apiVersion": {"const": "wgpolicyk8s.io/v1alpha2"},
        "kind": {"enum": ["PolicyReport", "ClusterPolicyReport"]},
        "metadata": {"type": "object"},
        "scope": _REFERENCE,
        "results": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["policy"],
                "additionalProperties": False,
                "properties": {
                    "category": {"type": "string"},
                    "message": {"type": "string"},
                    "policy": {"type": "string"},
                    "properties": {"type": "object", "additionalProperties": {"type": "string"}},
                    "resources": {"type": "array", "items": _REFERENCE},
                    "result": {"enum": ["pass", "fail", "warn", "error", "skip"]},
                    "rule": {"type": "string"},
                    "scored": {"type": "boolean"},
                    "severity": {"enum": ["high", "low", "medium"]},
                    "source": {"type": "string"},
                    "timestamp": {
                        "type": "object",
                        "required": ["nanos", "seconds"],
                        "additionalProperties": False,
                        "properties": {"nanos": {"type": "integer"}, "seconds": {"type": "integer"}},
                    },
                },
            },
        },
        "summary": {
            "type": "object",
            "additionalProperties": False,
            "properties": {k: {"type": "integer"} for k in ("error", "fail", "pass", "skip", "warn")},
        },
    },
}
