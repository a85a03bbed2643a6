"""Issue 36: whatever our decoder reads, our encoder writes a custom resource the real server takes.

Eleven devices of 999999999999999999 MiB once summed past int64 and kube-apiserver refused every
write of that node's ledger. The property test (tests/engine/test_bounded_numbers.py) checks the
round trip against the API double's reading of the CRD; here the same int64-edge values go to the
real kube-apiserver, whose OpenAPI validation is the one that matters: the GPULedger CRD's own
schema, installed under a probe name (the real CRD is the e2e suite's), each ledger sent as a
server-side dry run. Every value the decoder reads must be accepted, on both sides.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import gpu_node, view_of
from tests.contract.conftest import Contract, Side
from tests.contract.crds import GROUP, installed
from tests.engine.test_bounded_numbers import INT64, ledger_object
from tests.engine.test_gang import cluster, member, podgroup, review
from vgpu_guard.engine.ledger import LedgerError, NodeLedger, decode_ledger, encode_ledger
from vgpu_guard.engine.ledger_summary import ledger_summary
from vgpu_guard.engine.untrusted import MAX_GPU_MEMORY_MIB, MAX_UNIX_SECONDS

pytestmark = pytest.mark.asyncio(loop_scope="session")

ROOT = Path(__file__).resolve().parents[2]
MEMORY = [0, 1, MAX_GPU_MEMORY_MIB, MAX_GPU_MEMORY_MIB + 1, 10**18 - 1, 2**32, INT64]
CORES = [0, 100, 101, INT64]
RESERVED = [0, MAX_UNIX_SECONDS, MAX_UNIX_SECONDS + 1, INT64]
COPIES = 64  # the entries one card holds at most (split counts up to 1024 are bounded elsewhere)


def _renamed_crd(path: str, plural: str, kind: str) -> dict[str, Any]:
    """One of our CRDs with its schema untouched, renamed into the contract group (the real one
    belongs to the e2e suite on the same server)."""
    real = yaml.safe_load((ROOT / path).read_text())
    spec = real["spec"]
    spec["group"] = GROUP
    spec["names"] = {"plural": plural, "singular": plural[:-1], "kind": kind, "listKind": f"{kind}List"}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": spec,
    }


def _ledgers() -> list[tuple[str, dict[str, Any]]]:
    """Each edge combination that decodes, as the controller would write it with 64 copies."""
    node = view_of([gpu_node("n", count=1)]).nodes["n"]
    out = []
    for memory, cores, reserved in itertools.product(MEMORY, CORES, RESERVED):
        try:
            one = decode_ledger(ledger_object(memory, cores, reserved))
        except LedgerError:
            continue  # unreadable: named, never summed
        [entry] = one.allocations.values()
        entries = {
            f"u{i}": type(entry)(f"u{i}", "default", f"p{i}", "", entry.containers, entry.reserved_at)
            for i in range(COPIES)
        }
        ledger = NodeLedger("n", entries)
        body = encode_ledger(ledger, ledger_summary(ledger, node, 1))
        body["apiVersion"], body["kind"] = f"{GROUP}/v1alpha1", "LedgerProbe"
        name = f"n-{memory}-{cores}-{reserved}".lower()
        body["metadata"] = {"name": name}
        body["spec"]["nodeName"] = name
        out.append((name, body))
    return out


async def test_every_ledger_our_encoder_writes_from_edge_values_is_accepted(contract: Contract) -> None:
    ledgers = _ledgers()
    assert len(ledgers) >= 10  # the bounds let the edge values that a GPU can have through

    async def probe(side: Side) -> Any:
        async with installed(
            side, _renamed_crd("manifests/crds/gpuledgers.vgpu-guard.io.yaml", "ledgerprobes", "LedgerProbe")
        ):
            base = f"/apis/{GROUP}/v1alpha1/ledgerprobes"
            refused = {}
            for name, body in ledgers:
                reply = await side.admin.post(base, body, dryRun="All")
                if reply.status != 201:
                    refused[name] = [
                        reply.status,
                        reply.body.get("message") if isinstance(reply.body, dict) else "",
                    ]
            return refused

    observed = await contract.agree(probe)
    assert observed["real"] == {}, observed["real"]


async def test_the_gang_placements_the_webhook_records_are_accepted(contract: Contract) -> None:
    """A gang of whole cards and a CPU-only gang (no vGPU mode: it once wrote mode "", which 1.20
    refuses) as the mutating webhook records them on their first member's admission."""
    bodies = []
    for group, limits in (("train", None), ("mpi", {"cpu": "32"})):
        result = review(member(group, limits=limits), cluster(podgroup(group, 2)))
        [body] = result.persist
        body = {**body, "apiVersion": f"{GROUP}/v1alpha1", "kind": "PlacementProbe"}
        body["metadata"] = {"name": group}
        bodies.append(body)

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        async with installed(
            side,
            _renamed_crd(
                "manifests/crds/gangplacements.vgpu-guard.io.yaml", "placementprobes", "PlacementProbe"
            ),
        ):
            base = f"/apis/{GROUP}/v1alpha1/namespaces/{ns}/placementprobes"
            replies = [await side.admin.post(base, body, dryRun="All") for body in bodies]
            return [[r.status, r.body.get("message") if isinstance(r.body, dict) else ""] for r in replies]

    observed = await contract.agree(probe)
    assert [status for status, _ in observed["real"]] == [201, 201], observed["real"]
