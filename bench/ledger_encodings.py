"""Encodings of a GPULedger that ``arbiter_bench.py --ledger-puts --put-encodings`` prices (issue 44 item 3).

Each candidate is a CRD (the one shipped before issue 44, its schema changed) and the body a writer
PUTs for a ledger in that encoding. The candidates are served side by side on one API server under
a group of their own, so one run prices them all against the same kind of ConfigMap:

* ``typed``: the GPULedger as shipped before issue 44 (tests/ledger_before_issue_44.py): every
  entry, container and device, and every GPU of the summary, typed schema nodes;
* ``preserve``: the same bytes, ``allocations`` items and ``summary.perGPU`` items under
  ``x-kubernetes-preserve-unknown-fields`` (the server checks each is an object, nothing inside);
* ``strings-entries``: each entry one line of text (engine/ledger.py ``encode_entry``), ``type:
  string`` items; the summary typed as before (each GPU an object of 10 fields);
* ``spec-preserve``: the typed bytes, the whole ``spec`` preserved: what a custom resource of
  those bytes costs with no schema below ``spec``;
* ``one-string``: this release's lines, all entries in one string (newline-separated), all GPUs in
  another: the fewest JSON values the same text can be;
* ``floor``: this release's CRD with one short entry and no summary, whatever the ledger (the
  entry alternates between two pods, so no PUT is a no-op): what any GPULedger write costs at least;
* ``product`` (arbiter_bench.py): what ships, the GPULedger CRD and ``encode_ledger`` (entries and
  GPUs one line of text each, untyped items).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.ledger_before_issue_44 import encode_ledger as old_encode_ledger
from tests.ledger_before_issue_44 import old_crd
from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.ledger import NodeLedger, encode_entry, encode_ledger
from vgpu_guard.engine.ledger_summary import ledger_summary, summary_fields
from vgpu_guard.kube.resources import Resource

Obj = dict[str, Any]
GROUP = "bench.vgpu-guard.io"
PRESERVED: Obj = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
SHIPPED: Obj = yaml.safe_load(
    (
        Path(__file__).resolve().parents[1] / "vgpu_guard" / "data" / "crds" / "gpuledgers.vgpu-guard.io.yaml"
    ).read_text()
)


def _spec(crd: Obj) -> Obj:
    spec: Obj = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return spec


def _typed(crd: Obj) -> Obj:
    return crd


def _shipped(crd: Obj) -> Obj:
    """This release's schema, whatever ``crd`` was."""
    crd["spec"]["versions"][0]["schema"] = copy.deepcopy(SHIPPED["spec"]["versions"][0]["schema"])
    return crd


def _preserve(crd: Obj) -> Obj:
    spec = _spec(crd)
    spec["properties"]["allocations"]["items"] = dict(PRESERVED, description="One pod's reservation.")
    spec["properties"]["summary"]["properties"]["perGPU"]["items"] = dict(PRESERVED, description="One GPU.")
    return crd


def _strings_entries(crd: Obj) -> Obj:
    _spec(crd)["properties"]["allocations"]["items"] = {"type": "string"}
    return crd


def _spec_preserve(crd: Obj) -> Obj:
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["properties"]["spec"] = dict(PRESERVED, description="Anything.")
    return crd


def _typed_body(ledger: NodeLedger, node: NodeInfo | None) -> Obj:
    return old_encode_ledger(ledger, summary_fields(ledger, node))


def _strings_entries_body(ledger: NodeLedger, node: NodeInfo | None) -> Obj:
    body = _typed_body(ledger, node)
    allocations = sorted(ledger.allocations.values(), key=lambda a: (a.namespace, a.name, a.pod_uid))
    body["spec"]["allocations"] = [encode_entry(a) for a in allocations]
    return body


def _one_string(crd: Obj) -> Obj:
    crd = _shipped(crd)
    spec = _spec(crd)
    spec["properties"]["allocations"] = {"type": "string", "description": "One line a pod."}
    spec["properties"]["summary"]["properties"]["perGPU"] = {"type": "string", "description": "A line a GPU."}
    return crd


def _one_string_body(ledger: NodeLedger, node: NodeInfo | None) -> Obj:
    body = encode_ledger(ledger, ledger_summary(ledger, node))
    spec = body["spec"]
    spec["allocations"] = "\n".join(spec["allocations"])
    spec["summary"]["perGPU"] = "\n".join(spec["summary"]["perGPU"])
    return body


def _floor_body(ledger: NodeLedger, node: NodeInfo | None) -> Obj:
    flip = len(ledger.allocations) % 2
    body = encode_ledger(NodeLedger(ledger.node))
    body["spec"]["allocations"] = [f"a/b podUID=u{flip} reservedAt=0"]
    return body


@dataclass(frozen=True)
class Candidate:
    name: str
    kind: str
    crd: Callable[[Obj], Obj]
    body: Callable[[NodeLedger, NodeInfo | None], Obj]

    @property
    def resource(self) -> Resource:
        return Resource(GROUP, "v1alpha1", self.kind.lower() + "s", self.kind, namespaced=False)

    def definition(self) -> Obj:
        crd = self.crd(copy.deepcopy(old_crd()))
        names = crd["spec"]["names"]
        names.update(kind=self.kind, listKind=self.kind + "List", plural=self.resource.plural,
                     singular=self.kind.lower(), shortNames=[])  # fmt: skip
        names.pop("categories", None)
        crd["spec"]["group"] = GROUP
        crd["metadata"]["name"] = f"{self.resource.plural}.{GROUP}"
        return crd

    def encode(self, ledger: NodeLedger, node: NodeInfo | None) -> Obj:
        body = self.body(ledger, node)
        body["apiVersion"] = f"{GROUP}/v1alpha1"
        body["kind"] = self.kind
        return body


CANDIDATES = {
    c.name: c
    for c in (
        Candidate("typed", "LedgerTyped", _typed, _typed_body),
        Candidate("preserve", "LedgerPreserve", _preserve, _typed_body),
        Candidate("strings-entries", "LedgerStringsEntries", _strings_entries, _strings_entries_body),
        Candidate("spec-preserve", "LedgerSpecPreserve", _spec_preserve, _typed_body),
        Candidate("one-string", "LedgerOneString", _one_string, _one_string_body),
        Candidate("floor", "LedgerFloor", _shipped, _floor_body),
    )
}
