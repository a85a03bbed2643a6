"""The race machine's observer, which judges every ledger version the store writes, must itself
catch an overcommitted version: the safety runs' "0 overcommitted GPUs" rests on it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.controller.allocation_race import RaceMachine
from vgpu_guard.engine.ledger import Allocation, ContainerGrant, DeviceGrant, NodeLedger, encode_ledger
from vgpu_guard.kube.resources import LEDGERS, NODES


def ledger(node: str, *memories: int) -> dict[str, Any]:
    """A ledger with one entry per memory, all on the node's first card."""
    allocations = {
        f"u{i}": Allocation(
            pod_uid=f"u{i}",
            namespace="default",
            name=f"p{i}",
            queue="default",
            containers=(ContainerGrant(0, "c", (DeviceGrant(f"GPU-{node}-0", memory, 10),)),),
            committed=True,
        )
        for i, memory in enumerate(memories)
    }
    obj = encode_ledger(NodeLedger(node=node, allocations=allocations))
    return {"apiVersion": "vgpu-guard.io/v1alpha1", "kind": "GPULedger", **obj}


def write(machine: RaceMachine, obj: dict[str, Any]) -> None:
    machine.cluster.store.create(LEDGERS, obj)
    machine.observer.check()  # the watch's wakeup may already have run it: then nothing is left


def test_a_version_within_the_card_is_counted_and_passes() -> None:
    machine = RaceMachine()
    seen = machine.observer.seen
    write(machine, ledger("b", 8192, 8192))  # node b: two 16 GiB cards
    assert machine.observer.seen == seen + 1


def test_an_overcommitted_version_fails_the_run() -> None:
    machine = RaceMachine()
    with pytest.raises(AssertionError, match="GPU-b-0"):
        write(machine, ledger("b", 12288, 12288))


def test_a_version_for_a_node_that_is_gone_is_not_judged() -> None:
    machine = RaceMachine()
    machine.cluster.store.delete(NODES, "b")
    seen = machine.observer.seen
    write(machine, ledger("b", 12288, 12288))
    assert machine.observer.seen == seen + 1
