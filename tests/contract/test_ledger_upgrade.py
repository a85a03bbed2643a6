"""Issue 44: the GPULedger CRD of this release under ledgers the release before wrote.

``helm upgrade`` replaces the CRD (templates/crds.yaml) while the old ledgers stay in etcd, and
during the rolling upgrade old replicas go on writing their encoding. kube-apiserver prunes what
a schema does not declare on every read from etcd as well as on writes, so the new schema must
keep both encodings as they are: its entry and per-GPU items are untyped
(``x-kubernetes-preserve-unknown-fields``). The probe installs the old CRD (renamed into the
contract group), stores an old ledger, replaces the CRD by this release's, and reads it back, then
writes this release's encoding and the old one again. Both sides must answer alike.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.contract.conftest import Contract, Side
from tests.contract.crds import CRDS, GROUP, installed
from tests.contract.test_ledger_bounds import _renamed_crd
from tests.ledger_before_issue_44 import OLD_CRD, old_encoded_ledger
from vgpu_guard.engine.ledger import (
    Allocation,
    ContainerGrant,
    DeviceGrant,
    MigSlot,
    NodeLedger,
    encode_ledger,
)
from vgpu_guard.engine.ledger_summary import ledger_summary

pytestmark = pytest.mark.asyncio(loop_scope="session")

Obj = dict[str, Any]
PLURAL, KIND = "ledgerupgrades", "LedgerUpgrade"
BASE = f"/apis/{GROUP}/v1alpha1/{PLURAL}"
LEDGER = NodeLedger(
    "n",
    {
        "u1": Allocation(
            "u1",
            "team-a",
            "web-0",
            "default",
            (ContainerGrant(0, "web", (DeviceGrant("GPU-0", 12288, 0),)),),
            1,
        ),
        "u2": Allocation(
            "u2",
            "team-b",
            "mig-0",
            "",
            (ContainerGrant(1, "", (DeviceGrant("GPU-1", 5120, 0, MigSlot("g1", "1g.5gb", 0, 0, 1)),)),),
            2,
            committed=True,
        ),
    },
)


def _probe_body(obj: Obj) -> Obj:
    body = copy.deepcopy(obj)
    body["apiVersion"], body["kind"] = f"{GROUP}/v1alpha1", KIND
    body["metadata"] = {"name": "n"}
    return body


def _kept(reply_body: Any) -> Any:
    return reply_body.get("spec") if isinstance(reply_body, dict) else reply_body


async def test_the_new_crd_keeps_old_ledgers_as_stored_and_takes_both_encodings(contract: Contract) -> None:
    old = _probe_body(old_encoded_ledger(LEDGER))
    new = _probe_body(encode_ledger(LEDGER, ledger_summary(LEDGER, None)))
    old_crd = _renamed_crd(str(OLD_CRD.relative_to(OLD_CRD.parents[3])), PLURAL, KIND)
    new_crd = _renamed_crd("manifests/crds/gpuledgers.vgpu-guard.io.yaml", PLURAL, KIND)

    async def probe(side: Side) -> Any:
        seen: dict[str, Any] = {}
        async with installed(side, old_crd) as name:
            created = await side.admin.post(BASE, old)
            seen["old release writes its ledger"] = [created.status, _kept(created.body) == old["spec"]]
            refused = await side.admin.post(BASE, {**new, "metadata": {"name": "m"}})
            seen["the old CRD refuses the new encoding"] = refused.status
            current = await side.admin.get(f"{CRDS}/{name}")
            upgrade = {
                **new_crd,
                "metadata": {
                    **new_crd["metadata"],
                    "resourceVersion": current.body["metadata"]["resourceVersion"],
                },
            }
            replaced = await side.admin.put(f"{CRDS}/{name}", upgrade)
            assert replaced.status == 200, replaced.body
            await _served_with(side, new_crd)
            read = await side.admin.get(f"{BASE}/n")
            seen["after the upgrade the old ledger reads as stored"] = _kept(read.body) == old["spec"]
            rewrite = {
                **new,
                "metadata": {"name": "n", "resourceVersion": read.body["metadata"]["resourceVersion"]},
            }
            written = await side.admin.put(f"{BASE}/n", rewrite)
            seen["this release's encoding is taken as sent"] = [
                written.status,
                _kept(written.body) == new["spec"],
            ]
            again = {
                **old,
                "metadata": {"name": "n", "resourceVersion": written.body["metadata"]["resourceVersion"]},
            }
            rewritten = await side.admin.put(f"{BASE}/n", again)
            seen["an old replica's write is taken too"] = [
                rewritten.status,
                _kept(rewritten.body) == old["spec"],
            ]
        return seen

    observed = await contract.agree(probe)
    assert observed["real"] == {
        "old release writes its ledger": [201, True],
        "the old CRD refuses the new encoding": 422,
        "after the upgrade the old ledger reads as stored": True,
        "this release's encoding is taken as sent": [200, True],
        "an old replica's write is taken too": [200, True],
    }


async def _served_with(side: Side, crd: Obj) -> None:
    """Until the server answers with the replaced schema (kube-apiserver swaps its handler for the
    CRD a moment after the update): a string entry is taken."""
    import asyncio

    probe = {"apiVersion": f"{GROUP}/v1alpha1", "kind": KIND, "metadata": {"name": "probe"},
             "spec": {"nodeName": "probe", "allocations": ["a/b podUID=u reservedAt=0"]}}  # fmt: skip
    for _ in range(200):
        reply = await side.admin.post(BASE, probe, dryRun="All")
        if reply.status == 201:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{side.name}: the replaced CRD {crd['metadata']['name']} never took a string entry")


async def test_a_schema_that_types_the_items_would_empty_every_stored_entry(contract: Contract) -> None:
    """Why the entries are untyped rather than ``type: string``: with string items, the old
    ledgers' objects, which the new schema does not declare, read back pruned to ``{}`` from the
    moment the CRD is replaced, no write needed (the real server prunes on every read from etcd;
    the double does the same when a CRD changes)."""
    old = _probe_body(old_encoded_ledger(LEDGER))
    old_crd = _renamed_crd(str(OLD_CRD.relative_to(OLD_CRD.parents[3])), PLURAL, KIND)
    typed = copy.deepcopy(old_crd)
    typed["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "allocations"
    ]["items"] = {"type": "string"}

    async def probe(side: Side) -> Any:
        async with installed(side, old_crd) as name:
            assert (await side.admin.post(BASE, old)).status == 201
            current = await side.admin.get(f"{CRDS}/{name}")
            meta = {**typed["metadata"], "resourceVersion": current.body["metadata"]["resourceVersion"]}
            assert (await side.admin.put(f"{CRDS}/{name}", {**typed, "metadata": meta})).status == 200
            await _served_with(side, typed)
            return (await side.admin.get(f"{BASE}/n")).body["spec"]["allocations"]

    observed = await contract.agree(probe)
    assert observed["real"] == [{}, {}]
