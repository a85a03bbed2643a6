"""Where an assignment is committed (issue 43): every Binding door, nothing held that Volcano does not hold.

Both backends, the webhook as a Volcano user runs it (``scheduling.routing`` off), writes made as
Volcano's scheduler (tests/e2e/volcano.py) with the write sequences of vgpu_guard/volcano/binder.py.
One node of two 24 GiB cards of its own per story. What is checked: the API server's answers, the
pods as stored (the device plugin's truth) and the node's GPULedger.

- the legacy ``bindings`` door is arbitrated like ``pods/binding``;
- Volcano 1.10-1.15: an assignment PATCHed in a session that is then discarded (a gang that is not
  ready; ``Release`` is a no-op, so the annotations stay on the Pending pods) holds nothing, so a
  solo pod Volcano places on that card binds in its first session; and when such a pod is bound
  sessions later with its stale annotation after the card filled, its Binding is refused;
- a stale second Binding of a pod already bound reserves nothing (the API server refuses it with
  409), so a waiting pod binds at once;
- ``devices-to-allocate`` differing from ``vgpu-ids-new`` is refused (the plugin hands out the first).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
import pytest_asyncio

from tests.e2e.conftest import Env, gpu_pod
from tests.e2e.harness import GpuNode, until
from tests.e2e.test_arbiter import A10, CARD, notes, used_per_gpu, volcano_mode
from tests.e2e.volcano import Binder, Device, encode
from vgpu_guard.engine.assignment import assignment_annotations
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.errors import KubeError, NotFound
from vgpu_guard.kube.resources import BINDINGS, LEDGERS, NODES, PODS
from vgpu_guard.volcano.binder import allocate, bind, parse_version

pytestmark = pytest.mark.asyncio(loop_scope="session")

__all__ = ["volcano_mode"]  # the fixture, used by name

Obj = dict[str, Any]
POOL = "commit"
NODE = GpuNode(
    "e2e-commit-0", POOL, tuple((f"GPU-e2e-commit-0-{c}", CARD, A10, "hami-core") for c in range(2))
)
G0, G1 = NODE.gpus[0][0], NODE.gpus[1][0]
V115 = parse_version("1.15")
NOW = 1_800_000_000


@pytest_asyncio.fixture(loop_scope="session")
async def commit_node(env: Env) -> AsyncIterator[None]:
    """The story's node (two 24 GiB cards), gone with its ledger afterwards."""
    try:
        await env.api.create(NODES, NODE.node())
        await env.api.patch(NODES, NODE.name, NODE.status(datetime.now(UTC)), subresource="status")
        yield
    finally:
        with contextlib.suppress(NotFound):
            await env.api.delete(NODES, NODE.name)
        with contextlib.suppress(NotFound):
            await env.api.delete(LEDGERS, NODE.name)


async def pods_of(env: Env, names: Sequence[str], memory: int) -> list[Obj]:
    return [(await env.create(PODS, gpu_pod(name, memory, pool=POOL)))[0] for name in names]


async def held(env: Env) -> dict[str, list[str]]:
    """The story's entries in the node's ledger: pod name -> the GPUs it holds."""
    ledger = await env.ledger(NODE.name)
    entries = (ledger or {}).get("spec", {}).get("allocations") or []
    return {
        e["name"]: sorted(d["uuid"] for c in e.get("containers") or [] for d in c.get("devices") or [])
        for e in entries
        if e["namespace"] == env.ns
    }


async def refused(call: Any) -> KubeError:
    with pytest.raises(KubeError) as error:
        await call
    return error.value


def full_card(env: Env, gpu: str, asked: int, holders: str, pod: str) -> str:
    return (
        f"GPU {gpu} on node {NODE.name} has 0 MiB free of {CARD} MiB, {asked} MiB asked (held by "
        f"{holders}); the assignment of pod {env.ns}/{pod} is refused before it lands, and Volcano decides "
        "again on its next session"
    )


def legacy_binding(pod: Obj, devices: Sequence[Device]) -> Obj:
    """A Binding for ``POST namespaces/NS/bindings``, carrying what Volcano >= 1.16 carries."""
    meta = pod["metadata"]
    annotations = assignment_annotations(NODE.name, encode(devices), NOW)
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": meta["name"], "uid": meta["uid"], "annotations": annotations},
        "target": {"apiVersion": "v1", "kind": "Node", "name": NODE.name},
    }


async def test_the_bindings_door_is_arbitrated_like_pods_binding(
    env: Env, volcano_mode: AioClusterClient, commit_node: None
) -> None:
    """An allocation writer (the admin, in system:masters) overflowing a card through the legacy
    bindings resource is refused naming the GPU; a Binding that fits is reserved through it."""
    full, over, fits = await pods_of(env, ["full", "over", "fits"], 12288)
    binder = Binder(volcano_mode, "1.16")
    await binder.bind(full, NODE.name, [Device(G0, CARD)])
    error = await refused(
        env.api.create(BINDINGS, legacy_binding(over, [Device(G0, 12288)]), namespace=env.ns)
    )
    assert error.code == 403
    assert full_card(env, G0, 12288, f"{env.ns}/full", "over") in error.message
    await env.api.create(BINDINGS, legacy_binding(fits, [Device(G1, 12288)]), namespace=env.ns)
    stored = {p["metadata"]["name"]: p for p in await env.pods()}
    assert not stored["over"]["spec"].get("nodeName")
    assert stored["fits"]["spec"]["nodeName"] == NODE.name
    assert await held(env) == {"full": [G0], "fits": [G1]}
    assert used_per_gpu(list(stored.values())) == {G0: CARD, G1: 12288}


async def test_a_discarded_1_15_gang_holds_nothing_and_a_solo_pod_binds_in_its_first_session(
    env: Env, volcano_mode: AioClusterClient, commit_node: None
) -> None:
    """A gang of 3 x 16 GiB on two 24 GiB cards never becomes ready: each session Volcano 1.15
    PATCHes two members' assignments, discards the statement, and Release leaves them on the Pending
    pods. Its cache counts nothing for them, so it places a solo 16 GiB pod on card 0 in its first
    session: that Binding must land (it was refused every session while the PATCH reserved)."""
    gang = await pods_of(env, ["gang-0", "gang-1", "gang-2"], 16384)
    (solo,) = await pods_of(env, ["solo"], 16384)
    # Session 1: two members fit in Volcano's view, the third does not; the statement is discarded.
    await allocate(
        volcano_mode, gang[0], node=NODE.name, ids=encode([Device(G0, 16384)]), version=V115, now=NOW
    )
    await allocate(
        volcano_mode, gang[1], node=NODE.name, ids=encode([Device(G1, 16384)]), version=V115, now=NOW
    )
    # ... and the solo pod onto card 0, which Volcano's cache counts as empty.
    solo_task = await allocate(
        volcano_mode, solo, node=NODE.name, ids=encode([Device(G0, 16384)]), version=V115, now=NOW
    )
    await bind(volcano_mode, solo_task, NODE.name)
    # Session 2: Volcano now counts the solo pod; gang-0 is PATCHed onto card 1, and discarded again.
    await allocate(
        volcano_mode, gang[0], node=NODE.name, ids=encode([Device(G1, 16384)]), version=V115, now=NOW + 1
    )
    stored = {p["metadata"]["name"]: p for p in await env.pods()}
    assert stored["solo"]["spec"]["nodeName"] == NODE.name
    assert all(not stored[m]["spec"].get("nodeName") for m in ("gang-0", "gang-1", "gang-2"))
    assert "volcano.sh/vgpu-ids-new" in notes(stored["gang-0"])  # left on the Pending pod, as Volcano does
    assert await held(env) == {"solo": [G0]}


async def test_a_1_15_assignment_discarded_then_bound_after_its_card_filled_is_refused(
    env: Env, volcano_mode: AioClusterClient, commit_node: None
) -> None:
    """Session 1 PATCHes ``late`` onto card 0 and is discarded; ``early`` takes card 0 (PATCH and
    Binding). Sessions later Volcano re-PATCHes ``late`` with the same annotation (no change: the
    webhook's entries do not even see it on 1.28+) and binds it plainly: the Binding commits the
    stored assignment, which no longer fits, and is refused. 0 overcommit."""
    late, early = await pods_of(env, ["late", "early"], CARD)
    ids = encode([Device(G0, CARD)])
    await allocate(volcano_mode, late, node=NODE.name, ids=ids, version=V115, now=NOW)
    task = await allocate(volcano_mode, early, node=NODE.name, ids=ids, version=V115, now=NOW + 1)
    await bind(volcano_mode, task, NODE.name)
    again = await allocate(volcano_mode, late, node=NODE.name, ids=ids, version=V115, now=NOW)
    error = await refused(bind(volcano_mode, again, NODE.name))
    assert error.code == 403
    assert full_card(env, G0, CARD, f"{env.ns}/early", "late") in error.message
    stored = {p["metadata"]["name"]: p for p in await env.pods()}
    assert not stored["late"]["spec"].get("nodeName")
    assert used_per_gpu(list(stored.values())) == {G0: CARD}
    assert await held(env) == {"early": [G0]}


async def test_stale_second_bindings_of_bound_pods_reserve_nothing_and_a_waiting_pod_binds_at_once(
    env: Env, volcano_mode: AioClusterClient, commit_node: None
) -> None:
    """20 Bindings of two pods already bound, naming card 1 (a binder on a stale cache): the API
    server refuses each (the pod is assigned); the ledger must not hold card 1 for them, so the
    24 GiB pod waiting for it binds at once (it was refused 147 times in 150 s)."""
    first, second, waiting = await pods_of(env, ["first", "second", "waiting"], 12288)
    binder = Binder(volcano_mode, "1.16")
    for pod in (first, second):
        await binder.bind(pod, NODE.name, [Device(G0, 12288)])
    for i in range(20):
        error = await refused(binder.bind((first, second)[i % 2], NODE.name, [Device(G1, 12288)]))
        assert error.code == 409, error.message
    assert await held(env) == {"first": [G0], "second": [G0]}
    await binder.bind(waiting, NODE.name, [Device(G1, CARD)])
    stored = {p["metadata"]["name"]: p for p in await env.pods()}
    assert stored["waiting"]["spec"]["nodeName"] == NODE.name
    assert used_per_gpu(list(stored.values())) == {G0: CARD, G1: CARD}


async def test_devices_to_allocate_that_differs_from_vgpu_ids_new_is_refused(
    env: Env, volcano_mode: AioClusterClient, commit_node: None
) -> None:
    """The device plugin hands out devices-to-allocate, Volcano counts vgpu-ids-new: a Binding whose
    two differ would make the ledger hold one and the pod get the other. Refused, naming both."""
    (pod,) = await pods_of(env, ["split"], 1024)
    meta = pod["metadata"]
    small, large = encode([Device(G0, 1024)]), encode([Device(G0, 9216)])
    annotations = {**assignment_annotations(NODE.name, small, NOW), "volcano.sh/devices-to-allocate": large}
    error = await refused(
        volcano_mode.bind(env.ns, meta["name"], node=NODE.name, annotations=annotations, uid=meta["uid"])
    )
    assert error.code == 403
    assert (
        f"[vgpu-assignment-capacity] metadata.annotations[volcano.sh/devices-to-allocate]: {large!r} differs "
        f"from volcano.sh/vgpu-ids-new {small!r} on the Binding; the device plugin hands out "
        "volcano.sh/devices-to-allocate while Volcano counts volcano.sh/vgpu-ids-new, so the Binding of pod "
        f"{env.ns}/split is refused; write the same value in both"
    ) in error.message
    assert not (await env.pod("split"))["spec"].get("nodeName")
    assert await held(env) == {}


async def test_a_choice_refused_session_after_session_gets_an_event_naming_what_holds_the_gpu(
    env: Env, volcano_mode: AioClusterClient, commit_node: None
) -> None:
    """Volcano retries a refused choice every session (a stale cache here). At the fifth refusal
    within two minutes the pod is told, once, what holds the GPU and whether Volcano counts it (it
    does: its cache is catching up). The Event is the webhook's own write, under the chart's RBAC."""
    holder, waiting = await pods_of(env, ["holder", "waiting"], CARD)
    binder = Binder(volcano_mode, "1.16")
    await binder.bind(holder, NODE.name, [Device(G0, CARD)])
    for _ in range(6):
        error = await refused(binder.bind(waiting, NODE.name, [Device(G0, CARD)]))
        assert error.code == 403

    async def stuck() -> list[Obj] | None:
        found = [e for e in await env.events("waiting") if e.get("reason") == "GPUAssignmentStuck"]
        return found or None

    events = await until("GPUAssignmentStuck on waiting", stuck)
    assert len(events) == 1 and events[0]["type"] == "Warning"
    assert events[0]["message"] == (
        f"vgpu-guard refused the GPU assignment of pod {env.ns}/waiting on node {NODE.name} 5 times within "
        f"120 s; held by {G0}: {env.ns}/holder {CARD} MiB (bound; Volcano counts it). Volcano counts every "
        "holder: its cache is catching up and the next sessions choose again"
    )
