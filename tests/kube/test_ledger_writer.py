"""The one ledger writer (kube/ledger_writer.py): coalesced reservations, conflicts, failures."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from importlib import resources

import pytest
import yaml
from prometheus_client import CollectorRegistry

from tests.apidouble_support.faults import FaultPlan, unavailable_error
from tests.builders import default_config, gpu_node, pod, view_of
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.apidouble.store import Store
from vgpu_guard.engine.arbiter import Refused, Reserved, WrittenAssignment, arbitrate
from vgpu_guard.engine.ledger import LedgerError, NodeLedger, decode_ledger
from vgpu_guard.engine.pod_request import pod_request
from vgpu_guard.kube.informer import Informer, InformerEvent
from vgpu_guard.kube.ledger_writer import (
    OWN_WRITE_TTL_SECONDS,
    Decide,
    LedgerWriteMetrics,
    LedgerWriter,
    WriteFailed,
)
from vgpu_guard.kube.resources import CRDS, LEDGERS

NVIDIA = default_config().nvidia
NODE = view_of([gpu_node("gpu-0", count=8)]).nodes["gpu-0"]


def api(faults: FaultPlan | None = None) -> MemoryClusterClient:
    store = Store()
    text = resources.files("vgpu_guard").joinpath("data/crds/gpuledgers.vgpu-guard.io.yaml").read_text()
    store.create(CRDS, yaml.safe_load(text))
    return MemoryClusterClient(store, faults=faults)


def decision(name: str, card: int, memory: int) -> Decide:
    obj = pod({"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": memory}, name=name)
    obj["metadata"]["uid"] = f"uid-{name}"
    wanted = pod_request(obj, NVIDIA)
    assert wanted is not None
    written = WrittenAssignment("gpu-0", f"GPU-gpu-0-{card},NVIDIA,{memory},0:;", "x", "Binding")

    def decide(ledger: NodeLedger) -> Reserved | Refused:
        return arbitrate(written, wanted, ledger=ledger, node=NODE, queue="q", now=1, nvidia=NVIDIA)

    return decide


def writer(client: MemoryClusterClient, registry: CollectorRegistry | None = None) -> LedgerWriter:
    metrics = LedgerWriteMetrics.for_registry(registry or CollectorRegistry())
    return LedgerWriter(client, memory_factor=1, writer="arbiter", metrics=metrics)


async def stored(client: MemoryClusterClient) -> NodeLedger:
    return decode_ledger(await client.get(LEDGERS, "gpu-0"))


async def test_a_64_pod_gang_on_one_node_is_one_batch_not_a_conflict_chain() -> None:
    """Volcano binds a session at once: 64 bindings for 8 cards of 8 x 3 GiB each, concurrently.
    All 64 wait before the node's batch starts: they are decided together on one ledger version
    and written in one write, with no conflict."""
    client, registry = api(), CollectorRegistry()
    ledgers = writer(client, registry)
    empty = NodeLedger("gpu-0")
    outcomes = await asyncio.gather(
        *(
            ledgers.reserve("gpu-0", decision(f"w{i}", i % 8, 3072), cached=empty, info=NODE)
            for i in range(64)
        )
    )
    assert all(isinstance(o, Reserved) for o in outcomes)
    assert len((await stored(client)).allocations) == 64
    writes = registry.get_sample_value(
        "vgpu_guard_ledger_writes_total", {"writer": "arbiter", "result": "written"}
    )
    assert writes == 1
    assert (
        registry.get_sample_value(
            "vgpu_guard_ledger_writes_total", {"writer": "arbiter", "result": "conflict"}
        )
        is None
    )
    assert registry.get_sample_value("vgpu_guard_arbiter_batch_requests_count") == 1
    assert registry.get_sample_value("vgpu_guard_arbiter_batch_requests_sum") == 64


async def test_within_a_batch_each_request_sees_the_ones_before_it() -> None:
    client = api()
    ledgers = writer(client)
    empty = NodeLedger("gpu-0")
    outcomes = await asyncio.gather(
        *(ledgers.reserve("gpu-0", decision(f"w{i}", 7, 12288), cached=empty, info=NODE) for i in range(3))
    )
    assert [type(o).__name__ for o in outcomes] == ["Reserved", "Reserved", "Refused"]
    assert sorted(a.name for a in (await stored(client)).allocations.values()) == ["w0", "w1"]


async def test_a_stale_cache_meets_a_conflict_and_decides_again_on_the_stored_ledger() -> None:
    """Another replica filled the card after our cache was read: our write conflicts, the ledger is
    read again, and the assignment is refused on what is stored."""
    client = api()
    other = writer(client)
    assert isinstance(
        await other.reserve("gpu-0", decision("a", 7, 24576), cached=NodeLedger("gpu-0"), info=NODE), Reserved
    )
    registry = CollectorRegistry()
    ours = writer(client, registry)
    stale = decode_ledger(await client.get(LEDGERS, "gpu-0"))
    await other.reserve("gpu-0", decision("b", 6, 24576), cached=stale, info=NODE)
    outcome = await ours.reserve("gpu-0", decision("c", 6, 1024), cached=stale, info=NODE)
    assert isinstance(outcome, Refused)
    assert (
        registry.get_sample_value(
            "vgpu_guard_ledger_writes_total", {"writer": "arbiter", "result": "conflict"}
        )
        == 1
    )
    assert registry.get_sample_value("vgpu_guard_arbiter_write_attempts_sum") == 2


async def test_a_failed_write_answers_every_waiting_request_with_the_reason() -> None:
    faults = FaultPlan()
    faults.add(verb="create", resource=LEDGERS, error=unavailable_error())
    ledgers = writer(api(faults))
    with pytest.raises(WriteFailed, match=r"^writing GPULedger gpu-0 failed: "):
        await ledgers.reserve("gpu-0", decision("a", 0, 1024), cached=NodeLedger("gpu-0"), info=NODE)
    # The node's next request starts afresh.
    assert isinstance(
        await ledgers.reserve("gpu-0", decision("b", 0, 1024), cached=NodeLedger("gpu-0"), info=NODE),
        Reserved,
    )


async def test_a_written_ledger_is_remembered_at_the_servers_version_without_decoding_the_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 35's CPU per binding: the server's answer to a write is the ledger sent, so the writer
    remembers what it sent at the answer's resourceVersion; decoding the answer validated every
    entry once more per write. The next reservation decides on the write without a read."""
    client = api()
    ledgers = writer(client)

    def no_decode(obj: object) -> NodeLedger:
        raise LedgerError("the writer decoded the server's answer")

    monkeypatch.setattr("vgpu_guard.kube.ledger_writer.decode_ledger", no_decode)
    first = await ledgers.reserve("gpu-0", decision("a", 0, 1024), cached=NodeLedger("gpu-0"), info=NODE)
    assert isinstance(first, Reserved) and first.ledger is not None
    stored_now = await client.get(LEDGERS, "gpu-0")
    remembered = ledgers.newest(NodeLedger("gpu-0"))
    assert remembered == replace(first.ledger, resource_version=stored_now["metadata"]["resourceVersion"])
    second = await ledgers.reserve("gpu-0", decision("b", 0, 1024), cached=NodeLedger("gpu-0"), info=NODE)
    assert isinstance(second, Reserved)
    monkeypatch.undo()
    assert sorted(a.name for a in (await stored(client)).allocations.values()) == ["a", "b"]


async def test_a_deleted_ledger_is_not_brought_back_by_our_own_last_write_of_it() -> None:
    """The node is removed with its ledger and comes back under the same name (a replaced
    machine): its cache shows no ledger, and our remembered write of the old one must not stand
    in for it, or its cards would be refused for holders long gone. The ledger informer's DELETE
    (the very event, from an informer on the store) makes our write history; a full card is then
    reserved on the new, empty ledger."""
    client = api()
    ledgers = writer(client)
    informer = Informer(client, LEDGERS)
    informer.add_handler(ledgers.observe)
    following = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.wait_synced(), 5)
        empty = NodeLedger("gpu-0")
        assert isinstance(
            await ledgers.reserve("gpu-0", decision("old", 7, 24576), cached=empty, info=NODE), Reserved
        )
        assert ledgers.newest(empty).allocations  # the cache has not caught up: our write stands in
        await client.delete(LEDGERS, "gpu-0")
        for _ in range(100):
            if ("", "gpu-0") not in informer.items and not ledgers.newest(empty).allocations:
                break
            await asyncio.sleep(0.01)
        assert ledgers.newest(empty) is empty
        outcome = await ledgers.reserve("gpu-0", decision("new", 7, 24576), cached=empty, info=NODE)
        assert isinstance(outcome, Reserved), outcome
        assert [a.name for a in (await stored(client)).allocations.values()] == ["new"]
    finally:
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)


def test_a_delete_older_than_our_write_keeps_it() -> None:
    """A DELETE of an earlier ledger of that name that arrives after our create (a lagging watch)
    says nothing about ours: our write keeps standing in until the cache shows it."""
    ledgers = writer(api())
    ours = NodeLedger("gpu-0", resource_version="20")
    ledgers._remember(ours)  # what a successful write leaves (tested above through the API)
    ledgers.observe(InformerEvent("DELETED", {"metadata": {"name": "gpu-0", "resourceVersion": "12"}}))
    assert ledgers.newest(NodeLedger("gpu-0")) is ours
    ledgers.observe(InformerEvent("MODIFIED", {"metadata": {"name": "gpu-0", "resourceVersion": "30"}}))
    assert ledgers.newest(NodeLedger("gpu-0")) is ours  # only a DELETE makes it history
    ledgers.observe(InformerEvent("DELETED", {"metadata": {"name": "gpu-0", "resourceVersion": "21"}}))
    assert ledgers.newest(NodeLedger("gpu-0")) == NodeLedger("gpu-0")


def test_our_write_stands_in_for_the_cache_for_a_while_only() -> None:
    """A DELETE the informer reports at the gone object's last cached version (its relist after a
    410) is older than our write and forgets nothing: the write stops standing in for the cache
    after OWN_WRITE_TTL_SECONDS anyway (a cache that is really still behind costs a 409 then)."""
    now = [0.0]
    ledgers = LedgerWriter(api(), memory_factor=1, writer="arbiter", clock=lambda: now[0])
    ours = NodeLedger("gpu-0", resource_version="20")
    ledgers._remember(ours)
    ledgers.observe(InformerEvent("DELETED", {"metadata": {"name": "gpu-0", "resourceVersion": "12"}}))
    now[0] = OWN_WRITE_TTL_SECONDS
    assert ledgers.newest(NodeLedger("gpu-0")) is ours
    now[0] = OWN_WRITE_TTL_SECONDS + 0.5
    assert ledgers.newest(NodeLedger("gpu-0")) == NodeLedger("gpu-0")
