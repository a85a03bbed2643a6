"""Upgrading from the release before issue 44: its GPULedgers (one JSON object per entry and per
GPU, under its typed CRD) are read as they are, kept whole, and rewritten as text by the controller.

The ledgers are made as that release made them: written through its CRD (the double validates them
against it), then the CRD is replaced by this release's, as ``helm upgrade`` does, and a controller
of this release starts. The same on the real control plane and through the webhook's arbiter:
tests/e2e/test_ledger_migration.py.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tests.controller.allocation_testkit import Cluster, gpu_node, vgpu_pod
from tests.ledger_before_issue_44 import old_crd, old_encoded_ledger
from vgpu_guard.apidouble.store import Store
from vgpu_guard.controller.node_queue import Unwritable
from vgpu_guard.controller.node_reports import unwritable_remedy
from vgpu_guard.engine.ledger import NodeLedger, decode_ledger
from vgpu_guard.kube.resources import CRDS, LEDGERS, NODES

Obj = dict[str, Any]


def install_crd(store: Store, crd: Obj) -> None:
    """Replace the GPULedger CRD (an upgrade, or a downgrade to the old one)."""
    current = store.get(CRDS, crd["metadata"]["name"])
    crd = copy.deepcopy(crd)
    crd["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    store.replace(CRDS, crd)


def writes(registry: CollectorRegistry) -> float:
    value = registry.get_sample_value(
        "vgpu_guard_ledger_writes_total", {"writer": "controller", "result": "written"}
    )
    return value or 0.0


async def old_release_cluster() -> tuple[Cluster, Obj]:
    """Two nodes of two 24 GiB cards; Volcano bound a pod on each before the upgrade, held in
    ledgers the old release wrote. Returns the cluster under this release's CRD, and this
    release's CRD object."""
    cluster = Cluster([gpu_node("gpu-a", 2), gpu_node("gpu-b", 2)])
    cluster.bound_with_assignment("full-a", node="gpu-a", ids="GPU-gpu-a-0,NVIDIA,24576,0:", memory=24576)
    cluster.bound_with_assignment("half-b", node="gpu-b", ids="GPU-gpu-b-0,NVIDIA,12288,0:", memory=12288)
    await cluster.converge(cluster.replica())  # the entries, as adoption makes them
    new_crd = cluster.store.get(CRDS, "gpuledgers.vgpu-guard.io")
    install_crd(cluster.store, old_crd())  # the old release's CRD: it validates what follows
    view = cluster.view()
    for name, ledger in cluster.ledgers().items():
        old = old_encoded_ledger(ledger, view.nodes[name])
        old["metadata"]["resourceVersion"] = cluster.store.get(LEDGERS, name)["metadata"]["resourceVersion"]
        cluster.store.replace(LEDGERS, old)
    install_crd(cluster.store, {k: v for k, v in new_crd.items() if k != "status"})  # helm upgrade
    return cluster, new_crd


def stored_as_text(obj: Obj) -> bool:
    spec = obj["spec"]
    return all(isinstance(e, str) for e in spec.get("allocations") or ()) and all(
        isinstance(g, str) for g in spec["summary"]["perGPU"]
    )


async def test_old_ledgers_are_read_whole_and_rewritten_as_text() -> None:
    cluster, _ = await old_release_cluster()
    before = cluster.ledgers()
    assert all(decode_ledger(o).legacy for o in cluster.store.list(LEDGERS).items)
    assert not any(stored_as_text(o) for o in cluster.store.list(LEDGERS).items)

    registry = CollectorRegistry()
    controller = cluster.replica(identity="new", registry=registry)
    # Read as held: the full card takes nothing, the pod goes to the other card of its node.
    cluster.create_pod(vgpu_pod("next", memory=16384, node_selector={"kubernetes.io/hostname": "gpu-a"}))
    await cluster.converge(controller)

    after = cluster.ledgers()
    [grant] = after["gpu-a"].allocations[cluster.pod("next")["metadata"]["uid"]].grants()
    assert grant.uuid == "GPU-gpu-a-1"
    assert set(after["gpu-a"].allocations) == {
        *before["gpu-a"].allocations,
        cluster.pod("next")["metadata"]["uid"],
    }
    assert after["gpu-b"].allocations == before["gpu-b"].allocations  # rewritten, its entries unchanged
    for obj in cluster.store.list(LEDGERS).items:
        assert stored_as_text(obj), obj
        assert not decode_ledger(obj).legacy
    assert writes(registry) == 2  # gpu-a's placement (in the new encoding), gpu-b's rewrite
    await cluster.converge(controller)
    assert writes(registry) == 2  # nothing left to rewrite
    assert cluster.violations() == []


async def test_an_old_ledger_written_again_by_an_old_replica_is_rewritten_at_the_next_pass() -> None:
    """Mid-upgrade an old replica may write its encoding again over a node this release rewrote:
    the pods of that ledger change, and the next pass rewrites it (no 60 s wait for the scan)."""
    cluster, _ = await old_release_cluster()
    registry = CollectorRegistry()
    controller = cluster.replica(identity="new", registry=registry)
    await cluster.converge(controller)
    assert all(stored_as_text(o) for o in cluster.store.list(LEDGERS).items)
    done = writes(registry)

    stored = cluster.store.get(LEDGERS, "gpu-b")
    old = old_encoded_ledger(decode_ledger(stored), cluster.view().nodes["gpu-b"])
    old["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
    old["spec"]["allocations"][0]["committed"] = False  # the old replica's own change to it
    cluster.store.replace(LEDGERS, old)
    await cluster.converge(controller)
    rewritten = cluster.store.get(LEDGERS, "gpu-b")
    assert stored_as_text(rewritten)
    assert decode_ledger(rewritten).allocations == decode_ledger(old).allocations  # its change kept
    assert writes(registry) == done + 1


async def test_a_cluster_whose_crd_was_not_upgraded_refuses_the_new_encoding_and_loses_nothing() -> None:
    """The CRD is part of the chart (templates/crds.yaml), so ``helm upgrade`` replaces it before
    the pods; with ``crds.install=false`` and an old CRD left in place, the API server refuses this
    release's writes (422): the node is held and told why, its ledger stays as the old release left
    it, and nothing is placed there on a ledger that was not written."""
    cluster, _ = await old_release_cluster()
    install_crd(cluster.store, old_crd())
    before = {o["metadata"]["name"]: o for o in cluster.store.list(LEDGERS).items}
    controller = cluster.replica(identity="new")
    cluster.create_pod(vgpu_pod("next", memory=16384, node_selector={"kubernetes.io/hostname": "gpu-a"}))
    await cluster.converge(controller)

    assert "next" not in cluster.bound()
    assert {o["metadata"]["name"]: o for o in cluster.store.list(LEDGERS).items} == before
    [event, *_] = [e for e in cluster.events("LedgerWriteFailed") if e["involvedObject"]["name"] == "gpu-a"]
    assert "spec.allocations[0] in body must be of type object" in event["message"], event
    assert event["message"].endswith(
        "; the CRD gpuledgers.vgpu-guard.io in the cluster is older than this vgpu-guard (its ledger "
        "entries are one line of text each): apply this release's CRD (the chart's templates/crds.yaml, "
        "or manifests/crds/ where CRDs are managed apart from the chart); no new vGPU pod is placed on "
        "this node until a write succeeds (retried with backoff), and every other node places and binds "
        "as before"
    ), event
    assert "volcano.sh/node-vgpu-register" not in event["message"], event  # not the node's values


async def test_an_old_ledger_with_no_entry_left_is_rewritten_at_the_first_pass() -> None:
    """No pod of its node changes, so only the ledgers' own changes can find it: every ledger is
    new to a controller that starts, and this one is rewritten then."""
    cluster, new_crd = await old_release_cluster()
    install_crd(cluster.store, old_crd())
    cluster.store.create(NODES, gpu_node("gpu-c", 1))
    cluster.store.create(LEDGERS, old_encoded_ledger(NodeLedger(node="gpu-c"), cluster.view().nodes["gpu-c"]))
    install_crd(cluster.store, {k: v for k, v in new_crd.items() if k != "status"})
    assert decode_ledger(cluster.store.get(LEDGERS, "gpu-c")).legacy
    await cluster.converge(cluster.replica(identity="new", registry=CollectorRegistry()))
    stored = cluster.store.get(LEDGERS, "gpu-c")
    assert stored_as_text(stored) and not decode_ledger(stored).legacy


@pytest.mark.parametrize(
    ("error", "names_the_crd"),
    [
        ('GPULedger.vgpu-guard.io "gpu-a" is invalid: spec.allocations[0]: Invalid value: "string": '
         'spec.allocations[0] in body must be of type object: "string"', True),
        ('GPULedger.vgpu-guard.io "gpu-a" is invalid: spec.summary.perGPU[3]: Invalid value: "string": '
         'spec.summary.perGPU[3] in body must be of type object: "string"', True),
        ('GPULedger.vgpu-guard.io "gpu-a" is invalid: spec.summary.totalMemoryMiB: Invalid value: '
         "9223372036854775808: spec.summary.totalMemoryMiB in body should be less than or equal to "
         "9223372036854775807", False),
    ],
)  # fmt: skip
def test_a_schema_refusal_names_the_old_crd_only_when_it_is_the_old_crds(
    error: str, names_the_crd: bool
) -> None:
    """Only the old CRD's "must be of type object" on an entry or GPU line points at the CRD; any
    other 422 keeps pointing at the values the node and its pods wrote."""
    remedy = unwritable_remedy(Unwritable(error=error, reason="invalid", failures=1, retry_at=0.0))
    assert ("is older than this vgpu-guard" in remedy) is names_the_crd, remedy
    assert ("volcano.sh/node-vgpu-register" in remedy) is not names_the_crd, remedy
