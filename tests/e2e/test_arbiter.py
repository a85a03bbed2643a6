"""The ledger arbiter end to end (issue 35): Volcano schedules, every assignment it writes is arbitrated.

Both backends, the webhook process in the mode a Volcano user runs (``scheduling.routing`` off:
vGPU pods keep ``schedulerName: volcano``), and a test binder that writes exactly what Volcano
writes (tests/e2e/volcano.py: the annotated Binding of >= 1.16, the patch-then-bind of 1.10-1.15)
from a deliberately stale view. What is checked comes from the pods' own ``vgpu-ids-new``, not
from our ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from tests.e2e.conftest import WEBHOOK_0, Env, entries_of, gpu_pod, story_nodes
from tests.e2e.harness import EVENTS_V1, GpuNode, until
from tests.e2e.volcano import Binder, Device, Version, volcano_client
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.errors import KubeError, NotFound
from vgpu_guard.kube.resources import LEDGERS, PODS

pytestmark = pytest.mark.asyncio(loop_scope="session")

Obj = dict[str, Any]
VOLCANO_MODE = "e2e-webhook-volcano"
CARD = 24576
A10 = "NVIDIA-NVIDIA A10"


@pytest_asyncio.fixture(loop_scope="session")
async def volcano_mode(env: Env) -> AsyncIterator[AioClusterClient]:
    """The webhook as a Volcano user runs it (routing off), and a client that is Volcano's scheduler."""
    await env.guard.processes[WEBHOOK_0].stop()
    await env.guard.ensure("webhook", VOLCANO_MODE, {"VGPU_GUARD__SCHEDULING__ROUTING": "false"})
    async with volcano_client(env.backend, env.api) as volcano:
        yield volcano


def notes(pod: Obj) -> dict[str, str]:
    return dict(pod["metadata"].get("annotations") or {})


def used_per_gpu(pods: list[Obj]) -> dict[str, int]:
    """MiB per GPU as the bound pods' own ``vgpu-ids-new`` claim them (the device plugin's truth)."""
    used: dict[str, int] = defaultdict(int)
    for pod in pods:
        if not pod["spec"].get("nodeName"):
            continue
        for record in notes(pod).get("volcano.sh/vgpu-ids-new", "").replace(";", ":").split(":"):
            if record.strip():
                uuid, _, memory, _ = record.split(",")
                used[uuid] += int(memory)
    return dict(used)


async def create_pods(env: Env, names: list[str], memory: int, pool: str) -> list[Obj]:
    created = []
    for name in names:
        pod, _ = await env.create(PODS, gpu_pod(name, memory, pool=pool))
        assert pod["spec"]["schedulerName"] == "volcano"  # routing off: Volcano keeps its pods
        created.append(pod)
    return created


@pytest.mark.parametrize("version", ["1.16", "1.15"])
async def test_seed_000_volcano_places_three_12gib_pods_on_one_24gib_card_the_third_is_refused(
    env: Env, volcano_mode: AioClusterClient, version: Version
) -> None:
    """#3616's stale cache: Volcano puts three 12 GiB pods on the last free 24 GiB card in one session
    (bindings sent concurrently). Two land; the third Binding is denied before it binds the pod,
    with the card's numbers and holders, and the pod stays Pending for Volcano's next session."""
    names = ["web-0", "web-1", "web-2"]
    pods = await create_pods(env, names, 12288, "seed-000")
    binder = Binder(volcano_mode, version)
    device = [Device("GPU-e2e-a10-0-0", 12288)]
    outcomes = await asyncio.gather(
        *(binder.bind(p, "e2e-a10-0", device) for p in pods), return_exceptions=True
    )
    refused = [(n, o) for n, o in zip(names, outcomes, strict=True) if isinstance(o, BaseException)]
    assert len(refused) == 1, outcomes
    ((loser, error),) = refused
    winners = sorted(n for n in names if n != loser)
    assert isinstance(error, KubeError) and error.code == 403
    holders = ", ".join(f"{env.ns}/{n}" for n in winners)
    # On 1.28+ the arbiter's own fail-closed entry answers an annotated Binding; before, and for
    # 1.10-1.15's plain Binding (it commits the assignment stored on the pod), the allocation entry.
    annotated = env.guard.match_conditions and version == "1.16"
    webhook = "pod-assignments.vgpu-guard.io" if annotated else "pod-allocations.vgpu-guard.io"
    assert error.message == (
        f'admission webhook "{webhook}" denied the request: [vgpu-assignment-capacity] '
        "metadata.annotations[volcano.sh/vgpu-ids-new]: GPU GPU-e2e-a10-0-0 on node e2e-a10-0 has 0 MiB free "
        f"of {CARD} MiB, 12288 MiB asked (held by {holders}); the assignment of pod {env.ns}/{loser} is "
        "refused before it lands, and Volcano decides again on its next session"
    )
    # Volcano's next session, on fresh data: no card has room, so it binds nothing and the pod waits.
    stored = {p["metadata"]["name"]: p for p in await env.pods()}
    assert used_per_gpu(list(stored.values())) == {"GPU-e2e-a10-0-0": CARD}
    assert not stored[loser]["spec"].get("nodeName")
    # 1.10-1.15: the PATCH was only checked (it fit alone) and stays on the Pending pod, as
    # Volcano leaves it; the Binding is where the card was found full.
    assert ("volcano.sh/vgpu-ids-new" in notes(stored[loser])) == (version == "1.15")
    assert {n for n, p in stored.items() if p["spec"].get("nodeName") == "e2e-a10-0"} == set(winners)
    ledger = await env.ledger("e2e-a10-0")
    assert ledger is not None
    entries = {a.name: a for a in entries_of(ledger) if a.namespace == env.ns}
    assert sorted(entries) == winners
    assert all(e.admitted for e in entries.values())


# -- many assignments at once, from two stale binders --------------------------------------------
POOL = "arbiter"
ARBITER_NODES = [
    GpuNode(f"e2e-arb-{i}", POOL, tuple((f"GPU-e2e-arb-{i}-{c}", CARD, A10, "hami-core") for c in range(2)))
    for i in range(20)
]
MEMORY = (4096, 8192, 12288)
PODS_EACH = 500  # placed by both binders: 1,000 assignments


async def place_all(binder: Binder, pods: list[Obj], rng: random.Random) -> tuple[int, int]:
    """Every pod to a random card of a random node, believing every card empty (a stale cache),
    16 bindings in flight at a time as a session's go out. Returns (bound, refused)."""
    gate = asyncio.Semaphore(16)
    plan = [(pod, rng.choice(ARBITER_NODES), rng.randrange(2)) for pod in rng.sample(pods, len(pods))]

    async def one(pod: Obj, node: GpuNode, card: int) -> bool:
        memory = int(pod["spec"]["containers"][0]["resources"]["limits"]["volcano.sh/vgpu-memory"])
        async with gate:
            try:
                await binder.bind(pod, node.name, [Device(node.gpus[card][0], memory)])
            except KubeError:
                return False  # denied by the arbiter, or the pod was bound by the other binder
            return True

    done = await asyncio.gather(*(one(*step) for step in plan))
    return sum(done), len(done) - sum(done)


async def test_1000_concurrent_assignments_from_two_stale_binders_never_overcommit(
    env: Env, volcano_mode: AioClusterClient
) -> None:
    """Two Volcano binders (>= 1.16 and 1.10-1.15 sequences) place the same 500 pods at once on 20
    nodes from stale views: 1,000 assignments. No GPU ends over its memory by what the bound pods'
    own annotations claim, and once the controller has caught up no ledger entry is left for a pod
    that is not bound to that entry's node."""
    rng = random.Random(35)
    async with story_nodes(env, *ARBITER_NODES):
        await asyncio.sleep(1)  # the webhook's node cache (a refusal for an unknown node is safe anyway)
        pods = []
        for i in range(PODS_EACH):
            pod, _ = await env.create(PODS, gpu_pod(f"p{i:03}", rng.choice(MEMORY), pool=POOL))
            pods.append(pod)
        new, old = Binder(volcano_mode, "1.16"), Binder(volcano_mode, "1.15")
        results = await asyncio.gather(
            place_all(new, pods, random.Random(1)), place_all(old, pods, random.Random(2))
        )
        stored = await env.pods()
        bound = [p for p in stored if p["spec"].get("nodeName")]
        over = {uuid: mib for uuid, mib in used_per_gpu(stored).items() if mib > CARD}
        print(f"binders (bound, refused): {results}; pods bound: {len(bound)}")
        assert over == {}
        assert len(bound) >= 40, "every card holds at least one pod"
        for pod in bound:
            ids = notes(pod)["volcano.sh/vgpu-ids-new"]
            assert ids.startswith(f"GPU-{pod['spec']['nodeName']}-"), (pod["metadata"]["name"], ids)
        placed = {p["metadata"]["uid"]: p["spec"]["nodeName"] for p in bound}

        async def leftovers() -> bool:
            stray = []
            for spec in ARBITER_NODES:
                ledger = await env.ledger(spec.name)
                for entry in entries_of(ledger):
                    if placed.get(entry.pod_uid) != spec.name:
                        stray.append((spec.name, entry.name))
            return not stray

        await until("no ledger entry for a pod not bound to its node", leftovers, within=60.0)


# -- outages (issue 35 item 4) --------------------------------------------------------------------
async def test_an_outage_pauses_vgpu_binds_on_1_28_and_is_caught_afterwards_before(
    env: Env, volcano_mode: AioClusterClient
) -> None:
    """With the webhook process gone. With matchConditions (1.28+) the arbiter's entry fails closed:
    Volcano's assignment is refused with the API server's error and the pod waits, while every other
    write to the pod goes through. Before 1.28 (no matchConditions, one fail-open entry) the
    assignments pass: three 12 GiB pods land on the 24 GiB card, and the controller adopts them and
    reports the overcommit on the Node (GPUOvercommitted), as docs/install.md says."""
    pods = await create_pods(env, ["web-0", "web-1", "web-2"], 12288, "seed-000")
    assert await env.guard.processes[VOLCANO_MODE].stop() == 0
    binder = Binder(volcano_mode, "1.16")
    device = [Device("GPU-e2e-a10-0-0", 12288)]
    if env.guard.match_conditions:
        with pytest.raises(KubeError) as error:
            await binder.bind(pods[0], "e2e-a10-0", device)
        assert error.value.code == 500
        assert error.value.message.startswith(
            'Internal error occurred: failed calling webhook "pod-assignments.vgpu-guard.io": '
        )
        assert not (await env.pod("web-0"))["spec"].get("nodeName")
        # Writes that carry no assignment never reach the arbiter's entry.
        await env.api.patch(PODS, "web-0", {"metadata": {"labels": {"team": "a"}}}, namespace=env.ns)
        return
    for pod in pods:
        await binder.bind(pod, "e2e-a10-0", device)

    found = "GPU GPU-e2e-a10-0-0 on node e2e-a10-0: 36864 MiB reserved > 24576 MiB capacity"

    async def reported() -> bool:
        return any(
            e.get("reason") == "GPUOvercommitted"
            and (e.get("involvedObject") or {}).get("name") == "e2e-a10-0"
            and found in e.get("message", "")
            for e in (await env.api.list(EVENTS_V1, namespace="default")).items
        )

    await until("the controller reports the overcommit on the node", reported, within=60.0)
    assert used_per_gpu(await env.pods()) == {"GPU-e2e-a10-0-0": 36864}


# -- a 64-pod gang bound at once ------------------------------------------------------------------
def _sample(metrics: str, name: str, labels: str = "") -> float:
    """One sample of the Prometheus text exposition (0 when the series is absent)."""
    for line in metrics.splitlines():
        if line.startswith(f"{name}{labels} ") or (not labels and line.startswith(f"{name} ")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_a_64_pod_gang_bound_at_once_onto_8_nodes_all_binds(
    env: Env, volcano_mode: AioClusterClient
) -> None:
    """Volcano binds a gang's session at once: 64 bindings onto 8 two-card nodes (4 x 6 GiB per card,
    exactly full). Every pod binds; the coalescing keeps ledger writes and attempts per binding low
    (printed for docs/benchmarks.md: conflicts come from the controller's writes meeting ours)."""
    process = env.guard.processes[VOLCANO_MODE]
    written = '{result="written",writer="arbiter"}'
    conflict = '{result="conflict",writer="arbiter"}'
    async with story_nodes(env, *ARBITER_NODES):
        await asyncio.sleep(1)  # the webhook's node cache
        pods = [(await env.create(PODS, gpu_pod(f"g{i:02}", 6144, pool=POOL)))[0] for i in range(64)]
        before = await process.metrics()
        binder = Binder(volcano_mode, "1.16")
        nodes = ARBITER_NODES[:8]
        await asyncio.gather(
            *(
                binder.bind(pod, nodes[i // 8].name, [Device(nodes[i // 8].gpus[i % 2][0], 6144)])
                for i, pod in enumerate(pods)
            )
        )
        after = await process.metrics()
    bound = [p for p in await env.pods() if p["spec"].get("nodeName")]
    assert len(bound) == 64
    assert used_per_gpu(bound) == {spec.gpus[c][0]: CARD for spec in nodes for c in range(2)}
    writes = _sample(after, "vgpu_guard_ledger_writes_total", written) - _sample(
        before, "vgpu_guard_ledger_writes_total", written
    )
    conflicts = _sample(after, "vgpu_guard_ledger_writes_total", conflict) - _sample(
        before, "vgpu_guard_ledger_writes_total", conflict
    )
    attempts = _sample(after, "vgpu_guard_arbiter_write_attempts_sum") - _sample(
        before, "vgpu_guard_arbiter_write_attempts_sum"
    )
    answered = _sample(after, "vgpu_guard_arbiter_write_attempts_count") - _sample(
        before, "vgpu_guard_arbiter_write_attempts_count"
    )
    print(
        f"64-pod gang: {writes:.0f} ledger writes, {conflicts:.0f} conflicts, "
        f"{attempts / answered:.2f} decisions per binding"
    )
    assert answered == 64
    assert 8 <= writes < 64, "coalesced: fewer writes than bindings, at least one per node"
    assert attempts / answered < 2


async def test_a_ledger_deleted_after_the_arbiters_write_is_not_held_against_the_next_binding(
    env: Env, volcano_mode: AioClusterClient
) -> None:
    """A node's machine is replaced: its pods end, its GPULedger is deleted with it, and a machine
    of the same name takes pods again. The arbiter wrote that ledger; its own copy of the write
    must not stand in for the deleted ledger, or the card would be refused for a pod long gone for
    as long as nobody else creates the ledger. A Binding of the whole card answered 503 while the
    webhook's cache still holds the ledger (its write meets 404: Volcano retries) is fine; a
    refusal naming the gone pod is the bug. The card is reserved on a new ledger."""
    old, new = await create_pods(env, ["old", "new"], CARD, "seed-000")
    binder = Binder(volcano_mode, "1.16")
    card = [Device("GPU-e2e-a10-0-0", CARD)]
    await binder.bind(old, "e2e-a10-0", card)
    await env.api.delete(PODS, "old", namespace=env.ns, grace_period_seconds=0)

    async def released() -> bool:
        return not [a for a in entries_of(await env.ledger("e2e-a10-0")) if a.namespace == env.ns]

    await until("the controller releases old's entry", released)
    with contextlib.suppress(NotFound):
        await env.api.delete(LEDGERS, "e2e-a10-0")

    async def bound() -> bool:
        try:
            await binder.bind(new, "e2e-a10-0", card)
        except KubeError as e:
            assert e.code == 503, e.message  # a 403 here names the gone pod: its write held the card
            return False
        return True

    await until("new's Binding is reserved", bound)
    ledger = await env.ledger("e2e-a10-0")
    assert [a.name for a in entries_of(ledger) if a.namespace == env.ns] == ["new"]
