"""Upgrading from the release before issue 44, on both backends: GPULedgers it wrote (one JSON object
per entry and per GPU) are taken by this release's CRD as they are, read whole by the webhook's
arbiter and by the controller, and rewritten as text (issue 44 item 3).

The old ledgers are written directly, as that release's ``encode_ledger`` wrote them
(tests/ledger_before_issue_44.py), while the controller is stopped, so nothing of this release
touches them before the story looks. The switch of CRD itself (the old typed schema replaced under
stored objects) is tests/controller/test_ledger_migration.py's, on the double; here the installed
CRD is this release's, as after ``helm upgrade``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from tests.e2e.conftest import CONTROLLER_0, Env, entries_of, gpu_pod, story_nodes
from tests.e2e.harness import GpuNode, until
from tests.e2e.test_arbiter import A10, CARD, volcano_mode
from tests.e2e.volcano import Binder, Device
from tests.ledger_before_issue_44 import old_encoded_ledger
from vgpu_guard.engine.ledger import decode_ledger
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.errors import KubeError
from vgpu_guard.kube.resources import LEDGERS, PODS

pytestmark = pytest.mark.asyncio(loop_scope="session")

__all__ = ["volcano_mode"]  # the fixture, used by name

Obj = dict[str, Any]
POOL = "migration"
NODES = [
    GpuNode(
        f"e2e-migrate-{i}",
        POOL,
        tuple((f"GPU-e2e-migrate-{i}-{c}", CARD, A10, "hami-core") for c in range(2)),
    )
    for i in range(2)
]
A, B = NODES
A0, A1, B0 = A.gpus[0][0], A.gpus[1][0], B.gpus[0][0]


@pytest_asyncio.fixture(loop_scope="session")
async def migration_nodes(env: Env) -> AsyncIterator[None]:
    async with story_nodes(env, *NODES):
        yield


def is_text(ledger: Obj | None) -> bool:
    return ledger is not None and all(isinstance(e, str) for e in ledger["spec"]["allocations"])


async def write_as_the_old_release(env: Env, node: str) -> Obj:
    """The node's ledger PUT back in the old encoding (its entries unchanged); what was stored."""
    stored = await env.ledger(node)
    assert stored is not None
    old = old_encoded_ledger(decode_ledger(stored))
    old["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
    written = await env.api.replace(LEDGERS, old)
    assert written["spec"]["allocations"] == old["spec"]["allocations"]  # kept as sent, not pruned
    return written


async def test_old_ledgers_are_read_by_the_arbiter_and_the_controller_and_rewritten_as_text(
    env: Env, volcano_mode: AioClusterClient, migration_nodes: None
) -> None:
    pods = {
        name: (await env.create(PODS, gpu_pod(name, memory, pool=POOL)))[0]
        for name, memory in (("full-a", CARD), ("half-b", 12288), ("over", 12288), ("fits", 12288))
    }
    binder = Binder(volcano_mode, "1.16")
    await binder.bind(pods["full-a"], A.name, [Device(A0, CARD)])
    await binder.bind(pods["half-b"], B.name, [Device(B0, 12288)])
    controller = env.guard.processes[CONTROLLER_0]
    await controller.stop()  # nothing of this release rewrites the old ledgers until it restarts

    old_a = await write_as_the_old_release(env, A.name)
    old_b = await write_as_the_old_release(env, B.name)
    assert not is_text(old_a) and not is_text(old_b)
    entries_b = {e.pod_uid: e for e in entries_of(old_b)}
    assert [e.name for e in entries_b.values()] == ["half-b"]

    # The arbiter counts the old entry: card 0 of A is full, card 1 takes the pod.
    with pytest.raises(KubeError) as refused:
        await binder.bind(pods["over"], A.name, [Device(A0, 12288)])
    assert f"GPU {A0} on node {A.name} has 0 MiB free of {CARD} MiB" in refused.value.message
    assert f"held by {env.ns}/full-a" in refused.value.message
    await binder.bind(pods["fits"], A.name, [Device(A1, 12288)])
    rewritten_a = await env.ledger(A.name)
    assert is_text(rewritten_a)
    assert sorted(e.name for e in entries_of(rewritten_a)) == ["fits", "full-a"]
    assert not is_text(await env.ledger(B.name))  # no write there yet

    # The controller, started again, rewrites B's ledger with its entries unchanged.
    await env.guard.ensure("controller", CONTROLLER_0)

    async def b_rewritten() -> Obj | None:
        ledger = await env.ledger(B.name)
        return ledger if is_text(ledger) else None

    rewritten_b = await until(f"{B.name}'s ledger rewritten as text", b_rewritten)
    assert {e.pod_uid: e for e in entries_of(rewritten_b)} == entries_b
    assert all(isinstance(g, str) for g in rewritten_b["spec"]["summary"]["perGPU"])
    stored = {p["metadata"]["name"]: p for p in await env.pods()}
    assert {n: p["spec"].get("nodeName") for n, p in stored.items()} == {
        "full-a": A.name,
        "half-b": B.name,
        "over": None,
        "fits": A.name,
    }
