"""The arbiter's decision (engine/arbiter.py): seed 000 at the moment Volcano writes, golden messages."""

from __future__ import annotations

from typing import Any

from tests.builders import default_config, gpu_node, pod, view_of
from vgpu_guard.engine.arbiter import Refused, Reserved, WrittenAssignment, arbitrate, written_assignment
from vgpu_guard.engine.ledger import Allocation, ContainerGrant, DeviceGrant, NodeLedger
from vgpu_guard.engine.pod_request import PodRequest, pod_request

NVIDIA = default_config().nvidia
IDS = "volcano.sh/vgpu-ids-new"
NOW = 1_750_000_000


def request(name: str, memory: int = 12288, uid: str | None = None) -> PodRequest:
    obj = pod({"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": memory}, name=name)
    obj["metadata"]["uid"] = uid or f"uid-{name}"
    found = pod_request(obj, NVIDIA)
    assert found is not None
    return found


def held(name: str, uuid: str, memory: int) -> Allocation:
    grant = ContainerGrant(0, "cuda", (DeviceGrant(uuid, memory, 0),))
    return Allocation(f"uid-{name}", "default", name, "default", (grant,), committed=True)


def seed_000_ledger() -> NodeLedger:
    """gpu-0: 8 cards of 24 GiB, seven of them full."""
    full = [held(f"busy-{i}", f"GPU-gpu-0-{i}", 24576) for i in range(7)]
    return NodeLedger("gpu-0", {a.pod_uid: a for a in full}, resource_version="7")


NODE = view_of([gpu_node("gpu-0", count=8)]).nodes["gpu-0"]


def binding(raw: str, node: str = "gpu-0") -> WrittenAssignment:
    written = written_assignment(
        operation="CREATE",
        sub_resource="binding",
        obj={"metadata": {"annotations": {IDS: raw}}, "target": {"kind": "Node", "name": node}},
        old=None,
    )
    assert written is not None
    return written


def decide(written: WrittenAssignment, wanted: PodRequest, ledger: NodeLedger) -> Reserved | Refused:
    return arbitrate(written, wanted, ledger=ledger, node=NODE, queue="default", now=NOW, nvidia=NVIDIA)


def test_seed_000_the_third_12_gib_assignment_on_the_last_card_is_refused() -> None:
    ledger = seed_000_ledger()
    raw = "GPU-gpu-0-7,NVIDIA,12288,0:;"
    for name in ("web-0", "web-1"):
        outcome = decide(binding(raw), request(name), ledger)
        assert isinstance(outcome, Reserved) and outcome.ledger is not None
        assert outcome.entry.admitted and outcome.entry.reserved_at == NOW and not outcome.entry.adopted
        ledger = outcome.ledger
    third = decide(binding(raw), request("web-2"), ledger)
    assert isinstance(third, Refused)
    assert [v.render() for v in third.violations] == [
        "[vgpu-assignment-capacity] metadata.annotations[volcano.sh/vgpu-ids-new]: GPU GPU-gpu-0-7 on node "
        "gpu-0 has 0 MiB free of 24576 MiB, 12288 MiB asked (held by default/web-0, default/web-1); the "
        "assignment of pod default/web-2 is refused before it lands, and Volcano decides again on its next "
        "session"
    ]


def test_holders_are_named_in_order_whatever_order_their_writes_landed_in() -> None:
    ledger = seed_000_ledger()
    raw = "GPU-gpu-0-7,NVIDIA,12288,0:;"
    for name in ("web-b", "web-a"):  # Volcano's bindings race: the later name lands first
        outcome = decide(binding(raw), request(name), ledger)
        assert isinstance(outcome, Reserved) and outcome.ledger is not None
        ledger = outcome.ledger
    third = decide(binding(raw), request("web-c"), ledger)
    assert isinstance(third, Refused)
    assert "(held by default/web-a, default/web-b)" in third.violations[0].message


def test_a_device_the_node_does_not_register_is_refused() -> None:
    outcome = decide(binding("GPU-elsewhere,NVIDIA,1024,0:;"), request("web", 1024), NodeLedger("gpu-0"))
    assert isinstance(outcome, Refused)
    assert [v.message for v in outcome.violations] == [
        "GPU GPU-elsewhere on node gpu-0 is not registered on the node (8 GPUs are); the assignment of pod "
        "default/web is refused before it lands, and Volcano decides again on its next session"
    ]


def test_a_malformed_device_is_refused_naming_it() -> None:
    outcome = decide(binding("GPU-gpu-0-1,NVIDIA,lots,0:;"), request("web", 1024), NodeLedger("gpu-0"))
    assert isinstance(outcome, Refused)
    assert [v.message for v in outcome.violations] == [
        "container 1: device 'GPU-gpu-0-1,NVIDIA,lots,0' is not UUID,TYPE,memory,cores with integer memory and "
        "cores in the Binding of pod default/web; the device plugin would hand out something else than "
        "vgpu-guard can hold, so it is refused; Volcano decides again on its next session"
    ]


def test_a_node_without_vgpu_refuses_every_assignment() -> None:
    cpu = view_of([{"kind": "Node", "metadata": {"name": "cpu-0"}}]).nodes["cpu-0"]
    outcome = arbitrate(
        binding("GPU-x,NVIDIA,1024,0:;", node="cpu-0"),
        request("web", 1024),
        ledger=NodeLedger("cpu-0"),
        node=cpu,
        queue="default",
        now=NOW,
        nvidia=NVIDIA,
    )
    assert isinstance(outcome, Refused)
    assert outcome.violations[0].message.startswith("node cpu-0 registers no vGPU devices; ")


def test_the_controllers_own_committed_entry_passes_without_a_write() -> None:
    mine = held("web", "GPU-gpu-0-7", 12288)
    ledger = NodeLedger("gpu-0", {mine.pod_uid: mine}, resource_version="3")
    outcome = decide(binding("GPU-gpu-0-7,NVIDIA,12288,0:;"), request("web"), ledger)
    assert outcome == Reserved(mine, None)


def test_a_second_assignment_of_one_pod_holds_both_never_replaces() -> None:
    """The first may have reached the pod (two binders, a lost answer): both stay held."""
    first = decide(binding("GPU-gpu-0-6,NVIDIA,12288,0:;"), request("web"), NodeLedger("gpu-0"))
    assert isinstance(first, Reserved) and first.ledger is not None
    again = decide(binding("GPU-gpu-0-7,NVIDIA,12288,0:;"), request("web"), first.ledger)
    assert isinstance(again, Reserved) and again.ledger is not None
    held_now = [g.uuid for a in again.ledger.allocations.values() for g in a.grants()]
    assert held_now == ["GPU-gpu-0-6", "GPU-gpu-0-7"]
    # The union is judged like any gain: it cannot overflow a card either.
    full = decide(binding("GPU-gpu-0-6,NVIDIA,24576,0:;"), request("web"), again.ledger)
    assert isinstance(full, Reserved)
    over = decide(binding("GPU-gpu-0-6,NVIDIA,30000,0:;"), request("web"), again.ledger)
    assert isinstance(over, Refused)


def update(old: dict[str, Any], new: dict[str, Any]) -> WrittenAssignment | None:
    return written_assignment(operation="UPDATE", sub_resource="", obj=new, old=old)


def test_which_writes_carry_an_assignment() -> None:
    bare = pod(name="web")
    volcano = pod(name="web", annotations={IDS: "GPU-a,NVIDIA,1,0:;", "volcano.sh/vgpu-node": "gpu-0"})
    assert update(bare, volcano) == WrittenAssignment("gpu-0", "GPU-a,NVIDIA,1,0:;", IDS, "pod update")
    # The device plugin confirming (bind-phase) or consuming devices-to-allocate writes none.
    confirmed = pod(name="web", annotations={IDS: "GPU-a,NVIDIA,1,0:;", "volcano.sh/bind-phase": "success"})
    assert update(volcano, confirmed) is None
    # Removing it (Volcano 1.10-1.15 discarding a statement) reserves nothing.
    assert update(volcano, bare) is None
    plain = written_assignment(
        operation="CREATE", sub_resource="binding", obj={"target": {"name": "gpu-0"}}, old=None
    )
    assert plain is None


def test_a_bound_pods_changed_assignment_is_only_ever_raised() -> None:
    mine = held("web", "GPU-gpu-0-7", 12288)
    ledger = NodeLedger("gpu-0", {mine.pod_uid: mine}, resource_version="3")
    on_node = pod(name="web", nodeName="gpu-0", annotations={IDS: "GPU-gpu-0-7,NVIDIA,12288,0:;"})
    lowered = pod(name="web", nodeName="gpu-0", annotations={IDS: "GPU-gpu-0-7,NVIDIA,1024,0:;"})
    written = update(on_node, lowered)
    assert written is not None and written.node == "gpu-0"
    assert decide(written, request("web"), ledger) == Reserved(mine, None)
    raised = pod(name="web", nodeName="gpu-0", annotations={IDS: "GPU-gpu-0-7,NVIDIA,20480,0:;"})
    written = update(on_node, raised)
    assert written is not None
    outcome = decide(written, request("web"), ledger)
    assert isinstance(outcome, Reserved) and outcome.ledger is not None
    assert [g.memory for g in outcome.ledger.allocations[mine.pod_uid].grants()] == [20480]
