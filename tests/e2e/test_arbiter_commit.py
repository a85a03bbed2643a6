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
- ``devices-to-allocate`` differing from ``vgpu-ids-new`` is refused (the plugin hands out the first);
- a choice refused session after session gets an Event naming what holds the GPU;
- a Binding another webhook refuses after vgpu-guard reserved it holds the card at most
  ``arbiter.unboundReleaseSeconds`` while another pod waits, however often it is retried.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web

from tests.e2e.conftest import Env, entries_of, gpu_pod, story_nodes
from tests.e2e.harness import GpuNode, until
from tests.e2e.test_arbiter import A10, CARD, notes, used_per_gpu, volcano_mode
from tests.e2e.volcano import Binder, Device, encode
from vgpu_guard.certs import ServingSpec, generate_ca, issue_serving_certificate
from vgpu_guard.engine.assignment import assignment_annotations
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.errors import KubeError, NotFound
from vgpu_guard.kube.resources import BINDINGS, PODS, VALIDATING_WEBHOOKS
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
HOLD = 90  # arbiter.unboundReleaseSeconds as the chart installs it


@pytest_asyncio.fixture(loop_scope="session")
async def commit_node(env: Env) -> AsyncIterator[None]:
    """The story's node (two 24 GiB cards), gone with its ledger afterwards."""
    async with story_nodes(env, NODE):
        yield


async def pods_of(env: Env, names: Sequence[str], memory: int) -> list[Obj]:
    return [(await env.create(PODS, gpu_pod(name, memory, pool=POOL)))[0] for name in names]


async def held(env: Env) -> dict[str, list[str]]:
    """The story's entries in the node's ledger: pod name -> the GPUs it holds."""
    ledger = await env.ledger(NODE.name)
    return {e.name: sorted(d.uuid for d in e.grants()) for e in entries_of(ledger) if e.namespace == env.ns}


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


@contextlib.asynccontextmanager
async def refusing_webhook(env: Env, refused: str) -> AsyncIterator[None]:
    """Another validating webhook, as a cluster may run beside vgpu-guard (a quota or policy engine):
    it refuses every Binding of pod ``refused`` in the story's namespace. Validating webhooks run in
    parallel, so vgpu-guard reserves those Bindings and the API server then refuses them."""
    now = datetime.now(UTC)
    ca = generate_ca(now=now, validity=timedelta(hours=2))
    host = env.backend.webhook_host
    spec = ServingSpec(service="e2e-refuser", namespace=env.ns, ip_addresses=(host,))
    serving = issue_serving_certificate(ca, spec, now=now, validity=timedelta(hours=2))
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        cert.write_bytes(serving.cert_pem)
        key.write_bytes(serving.key_pem)
        tls.load_cert_chain(cert, key)

    async def review(request: web.Request) -> web.Response:
        body = await request.json()
        asked = body["request"]
        deny = asked.get("namespace") == env.ns and asked.get("name") == refused
        answer: Obj = {"uid": asked["uid"], "allowed": not deny}
        if deny:
            answer["status"] = {"code": 403, "message": "refused by the e2e refuser"}
        return web.json_response(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": answer}
        )

    app = web.Application()
    app.router.add_post("/refuse", review)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, host, 0, ssl_context=tls)
    await site.start()
    port = runner.addresses[0][1]
    name = f"e2e-refuser-{env.ns}"
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "refuser.e2e.vgpu-guard.io",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Ignore",
                "timeoutSeconds": 5,
                "clientConfig": {
                    "url": f"https://{host}:{port}/refuse",
                    "caBundle": base64.b64encode(ca.cert_pem).decode(),
                },
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods/binding"],
                        "operations": ["CREATE"],
                        "scope": "Namespaced",
                    }
                ],
            }
        ],
    }
    await env.api.create(VALIDATING_WEBHOOKS, config)
    try:
        yield
    finally:
        with contextlib.suppress(NotFound):
            await env.api.delete(VALIDATING_WEBHOOKS, name)
        await runner.cleanup()


async def test_a_binding_another_webhook_refuses_holds_its_gpu_at_most_the_hold_while_a_pod_waits(
    env: Env, volcano_mode: AioClusterClient, commit_node: None
) -> None:
    """Another webhook refuses every Binding of ``blocked``, which Volcano retries every session; the
    first was reserved by vgpu-guard before the refusal. ``waiting`` wants the same card, retried
    every session too. The card is held for ``blocked`` at most arbiter.unboundReleaseSeconds (90 s,
    the chart's default): ``waiting`` binds within 90 + 5 s of that first reservation, and
    ``blocked`` does not take the card back meanwhile."""
    blocked, waiting = await pods_of(env, ["blocked", "waiting"], CARD)
    binder = Binder(volcano_mode, "1.16")
    card = [Device(G0, CARD)]
    async with refusing_webhook(env, "blocked"):

        async def reserved_then_refused() -> bool:
            try:
                await binder.bind(blocked, NODE.name, card)
            except KubeError as e:
                return "refused by the e2e refuser" in e.message
            raise AssertionError("blocked was bound: the refuser is not in place")

        await until("the refuser answers blocked's Binding", reserved_then_refused)
        started = time.monotonic()
        assert await held(env) == {"blocked": [G0]}
        bound_after: float | None = None
        while bound_after is None and time.monotonic() - started < HOLD + 30:
            with contextlib.suppress(KubeError):
                await binder.bind(blocked, NODE.name, card)
            try:
                await binder.bind(waiting, NODE.name, card)
                bound_after = time.monotonic() - started
            except KubeError as e:
                assert e.code == 403, e.message
                await asyncio.sleep(1)
    assert bound_after is not None and bound_after <= HOLD + 5, bound_after
    stored = {p["metadata"]["name"]: p for p in await env.pods()}
    assert stored["waiting"]["spec"]["nodeName"] == NODE.name
    assert not stored["blocked"]["spec"].get("nodeName")
    assert await held(env) == {"waiting": [G0]}
