"""The arbiter's decision (engine/arbiter.py) on what each write commits (engine/assignment_writes.py):
seed 000 at the moment Volcano binds, golden messages, and the order of issue 43 (a Binding
reserves, a PATCH of an unbound pod only checks, a PATCH of a bound pod replaces, holds are bounded)."""

from __future__ import annotations

from typing import Any

from tests.builders import default_config, gpu_node, pod, view_of
from vgpu_guard.engine.arbiter import LANDING_SECONDS, Holds, Refused, Reserved, arbitrate
from vgpu_guard.engine.assignment_writes import WrittenAssignment, binding_assignment, update_assignment
from vgpu_guard.engine.ledger import Allocation, ContainerGrant, DeviceGrant, NodeLedger
from vgpu_guard.engine.pod_request import PodRequest, pod_request
from vgpu_guard.engine.violations import Violation

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


DTA = "volcano.sh/devices-to-allocate"
NODE_KEY = "volcano.sh/vgpu-node"


def binding(raw: str, node: str = "gpu-0") -> WrittenAssignment:
    """Volcano >= 1.16's Binding: the whole assignment on it (device_info.go, DefaultBinder.Bind)."""
    notes = {IDS: raw, DTA: raw, NODE_KEY: node}
    written = binding_assignment(
        {"metadata": {"annotations": notes}, "target": {"kind": "Node", "name": node}},
        None,
        pod_key="default/web",
    )
    assert isinstance(written, WrittenAssignment)
    return written


def decide(
    written: WrittenAssignment,
    wanted: PodRequest,
    ledger: NodeLedger,
    *,
    holds: Holds | None = None,
    now: int = NOW,
) -> Reserved | Refused:
    extra = {"holds": holds} if holds is not None else {}
    return arbitrate(
        written, wanted, ledger=ledger, node=NODE, queue="default", now=now, nvidia=NVIDIA, **extra
    )


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


def test_a_second_binding_of_an_unbound_pod_holds_both_until_it_is_bound() -> None:
    """Either Binding may land (two binders, a lost answer): both stay held, the larger per device,
    until the pod is bound and the controller replaces the entry with what it got."""
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


def test_a_retried_binding_of_the_same_assignment_writes_nothing_and_keeps_its_hold() -> None:
    first = decide(binding("GPU-gpu-0-6,NVIDIA,12288,0:;"), request("web"), NodeLedger("gpu-0"))
    assert isinstance(first, Reserved) and first.ledger is not None
    again = decide(binding("GPU-gpu-0-6,NVIDIA,12288,0:;"), request("web"), first.ledger, now=NOW + 10)
    assert again == Reserved(first.entry, None)
    assert first.entry.reserved_at == NOW


def update(old: dict[str, Any], new: dict[str, Any]) -> WrittenAssignment | list[Violation] | None:
    return update_assignment(new, old, pod_key="default/web")


def test_which_writes_carry_an_assignment() -> None:
    bare = pod(name="web")
    volcano = pod(name="web", annotations={IDS: "GPU-a,NVIDIA,1,0:;", NODE_KEY: "gpu-0"})
    assert update(bare, volcano) == WrittenAssignment(
        "gpu-0", "GPU-a,NVIDIA,1,0:;", IDS, "pod update", "propose"
    )
    # The device plugin confirming (bind-phase) or consuming devices-to-allocate writes none.
    confirmed = pod(name="web", annotations={IDS: "GPU-a,NVIDIA,1,0:;", "volcano.sh/bind-phase": "success"})
    assert update(volcano, confirmed) is None
    # Removing it (Volcano 1.10-1.15 discarding a statement) reserves nothing.
    assert update(volcano, bare) is None
    # A plain Binding of a pod that carries none commits none.
    assert binding_assignment({"target": {"name": "gpu-0"}}, bare, pod_key="default/web") is None


def test_a_plain_binding_commits_the_assignment_stored_on_the_pod() -> None:
    """Volcano 1.10-1.15: PATCH, then a plain Binding; what the pod is bound with is what it stores."""
    raw = "GPU-gpu-0-7,NVIDIA,12288,0:;"
    stored = pod(name="web", annotations={IDS: raw, DTA: raw, NODE_KEY: "gpu-0"})
    written = binding_assignment({"target": {"name": "gpu-0"}}, stored, pod_key="default/web")
    assert written == WrittenAssignment("gpu-0", raw, IDS, "Binding", "bind")


def test_an_assignment_the_device_plugin_would_read_otherwise_is_refused() -> None:
    """devices-to-allocate is what the plugin hands out, vgpu-ids-new what Volcano counts: they must
    agree, and vgpu-node must name the node bound to (the plugin on another node ignores it)."""
    split = pod(name="web", annotations={IDS: "GPU-a,NVIDIA,1024,0:;", DTA: "GPU-a,NVIDIA,9216,0:;"})
    refused = binding_assignment({"target": {"name": "gpu-0"}}, split, pod_key="default/web")
    assert isinstance(refused, list)
    assert [v.render() for v in refused] == [
        "[vgpu-assignment-capacity] metadata.annotations[volcano.sh/devices-to-allocate]: "
        "'GPU-a,NVIDIA,9216,0:;' differs from volcano.sh/vgpu-ids-new 'GPU-a,NVIDIA,1024,0:;' on the pod; the "
        "device plugin hands out volcano.sh/devices-to-allocate while Volcano counts volcano.sh/vgpu-ids-new, "
        "so the Binding of pod default/web is refused; write the same value in both"
    ]
    assert isinstance(update(pod(name="web"), split), list)
    elsewhere = pod(name="web", annotations={IDS: "GPU-a,NVIDIA,1,0:;", NODE_KEY: "gpu-1"})
    wrong_node = binding_assignment({"target": {"name": "gpu-0"}}, elsewhere, pod_key="default/web")
    assert isinstance(wrong_node, list) and wrong_node[0].path == f"metadata.annotations[{NODE_KEY}]"


def test_a_patch_of_an_unbound_pod_is_checked_and_reserves_nothing() -> None:
    """Volcano 1.10-1.15 may discard the session that wrote it (Release is a no-op): a gang that
    cannot start must hold nothing. It must still fit what the ledger holds now."""
    raw = "GPU-gpu-0-7,NVIDIA,12288,0:;"
    proposed = update(pod(name="web"), pod(name="web", annotations={IDS: raw, NODE_KEY: "gpu-0"}))
    assert isinstance(proposed, WrittenAssignment) and proposed.effect == "propose"
    outcome = decide(proposed, request("web"), seed_000_ledger())
    assert isinstance(outcome, Reserved) and outcome.ledger is None
    over = "GPU-gpu-0-6,NVIDIA,12288,0:;"
    refused = update(pod(name="web"), pod(name="web", annotations={IDS: over, NODE_KEY: "gpu-0"}))
    assert isinstance(refused, WrittenAssignment)
    assert isinstance(decide(refused, request("web"), seed_000_ledger()), Refused)


def test_a_bound_pods_changed_assignment_replaces_its_entry() -> None:
    """Entries are replaced, never only raised: the pod is handed what it now says."""
    mine = held("web", "GPU-gpu-0-7", 12288)
    ledger = NodeLedger("gpu-0", {mine.pod_uid: mine}, resource_version="3")
    on_node = pod(name="web", nodeName="gpu-0", annotations={IDS: "GPU-gpu-0-7,NVIDIA,12288,0:;"})
    lowered = pod(name="web", nodeName="gpu-0", annotations={IDS: "GPU-gpu-0-7,NVIDIA,1024,0:;"})
    written = update(on_node, lowered)
    assert isinstance(written, WrittenAssignment) and written.effect == "change"
    outcome = decide(written, request("web"), ledger)
    assert isinstance(outcome, Reserved) and outcome.ledger is not None
    assert [g.memory for g in outcome.ledger.allocations[mine.pod_uid].grants()] == [1024]
    moved = pod(name="web", nodeName="gpu-0", annotations={IDS: "GPU-gpu-0-6,NVIDIA,12288,0:;"})
    written = update(on_node, moved)
    assert isinstance(written, WrittenAssignment)
    outcome = decide(written, request("web"), ledger)
    assert isinstance(outcome, Reserved) and outcome.ledger is not None
    assert [g.uuid for g in outcome.ledger.allocations[mine.pod_uid].grants()] == ["GPU-gpu-0-6"]


HOLD = 90


def unbound_holds(*unbound: str) -> Holds:
    return Holds(seconds=HOLD, unbound=lambda entry: entry.name in unbound)


def test_a_pod_whose_bindings_never_land_is_refused_once_they_could_no_longer_land_in_its_hold() -> None:
    """Another webhook refuses every Binding we reserved: the retries of that pod may renew nothing
    after hold - LANDING_SECONDS, so the card is free for others at hold, however often it retries."""
    raw = "GPU-gpu-0-7,NVIDIA,12288,0:;"
    first = decide(binding(raw), request("web"), NodeLedger("gpu-0"), holds=unbound_holds("web"))
    assert isinstance(first, Reserved) and first.ledger is not None
    early = decide(binding(raw), request("web"), first.ledger, holds=unbound_holds("web"), now=NOW + 5)
    assert early == Reserved(first.entry, None)
    closing = NOW + HOLD - LANDING_SECONDS
    closed = decide(binding(raw), request("web"), first.ledger, holds=unbound_holds("web"), now=closing)
    assert isinstance(closed, Refused)
    assert "the hold ends in 65 s (arbiter.unboundReleaseSeconds 90)" in closed.violations[0].message
    # A bound pod's entry (the Binding landed) is never closed or lapsed.
    bound = decide(binding(raw), request("web"), first.ledger, holds=unbound_holds(), now=NOW + 10 * HOLD)
    assert bound == Reserved(first.entry, None)


def test_a_lapsed_hold_counts_for_nothing_and_goes_with_the_next_write() -> None:
    raw = "GPU-gpu-0-7,NVIDIA,24576,0:;"
    first = decide(binding(raw), request("stuck", 24576), NodeLedger("gpu-0"), holds=unbound_holds("stuck"))
    assert isinstance(first, Reserved) and first.ledger is not None
    waiting = decide(
        binding(raw), request("web", 24576), first.ledger, holds=unbound_holds("stuck"), now=NOW + 30
    )
    assert isinstance(waiting, Refused)
    later = decide(
        binding(raw), request("web", 24576), first.ledger, holds=unbound_holds("stuck"), now=NOW + HOLD
    )
    assert isinstance(later, Reserved) and later.ledger is not None
    assert [a.name for a in later.ledger.allocations.values()] == ["web"]
    assert [a.name for a in later.dropped] == ["stuck"]  # audited by the webhook as a release
    # The stuck pod's own retry after the lapse is refused while its lapsed entry stays (until the
    # controller releases it, RELEASE_HOLDS holds after it began): pods that waited go first.
    again = decide(
        binding(raw), request("stuck", 24576), first.ledger, holds=unbound_holds("stuck"), now=NOW + HOLD
    )
    assert isinstance(again, Refused)
    assert "pods waiting for these GPUs go first for 90 s more" in again.violations[0].message
    # Once released (gone from the ledger), its retry starts a new hold.
    fresh = decide(
        binding(raw),
        request("stuck", 24576),
        NodeLedger("gpu-0"),
        holds=unbound_holds("stuck"),
        now=NOW + 2 * HOLD,
    )
    assert isinstance(fresh, Reserved) and fresh.entry.reserved_at == NOW + 2 * HOLD
    # ... and so does one that comes after RELEASE_HOLDS holds, the entry still there.
    late = decide(
        binding(raw), request("stuck", 24576), first.ledger, holds=unbound_holds("stuck"), now=NOW + 2 * HOLD
    )
    assert isinstance(late, Reserved) and late.entry.reserved_at == NOW + 2 * HOLD


def test_a_holder_with_two_containers_on_the_card_is_named_once_and_says_volcano_counts_it_once() -> None:
    """Issue 43 item 5: Volcano 1.12.x and >= 1.15 count a pod's use of a card once; the ledger counts both
    containers (what the device plugin hands out). The refusal says why Volcano thinks it free."""
    pair = Allocation(
        "uid-pair",
        "default",
        "pair",
        "default",
        tuple(ContainerGrant(i, f"c{i}", (DeviceGrant("GPU-gpu-0-7", 8192, 0),)) for i in range(2)),
        committed=True,
    )
    ledger = NodeLedger("gpu-0", {pair.pod_uid: pair}, resource_version="3")
    refused = decide(binding("GPU-gpu-0-7,NVIDIA,16384,0:;"), request("big", 16384), ledger)
    assert isinstance(refused, Refused)
    assert (
        "(held by default/pair (2 containers, counted once by Volcano 1.12, >= 1.15))"
        in refused.violations[0].message
    )
