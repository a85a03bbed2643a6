"""What holds a refused pod's GPUs, and whether Volcano counts it (engine/stuck_refusal.py, issue 43)."""

from __future__ import annotations

from vgpu_guard.engine.ledger import Allocation, ContainerGrant, DeviceGrant, NodeLedger
from vgpu_guard.engine.stuck_refusal import holders_of, stuck_message

GPU = "GPU-gpu-0-0"
HOLD = 90


def entry(
    name: str, *containers: int, admitted: bool = False, committed: bool = False, at: int = 0
) -> Allocation:
    grants = tuple(
        ContainerGrant(i, f"c{i}", (DeviceGrant(GPU, memory, 0),)) for i, memory in enumerate(containers)
    )
    return Allocation(
        f"uid-{name}", "ml", name, "default", grants, reserved_at=at, admitted=admitted, committed=committed
    )


def ledger(*entries: Allocation) -> NodeLedger:
    return NodeLedger("gpu-0", {e.pod_uid: e for e in entries})


def test_a_bound_pod_volcano_counts_means_volcano_is_catching_up() -> None:
    holders = holders_of(ledger(entry("bound", 24576)), [GPU], unbound=lambda _e: False, hold_seconds=HOLD)
    assert [(h.pod, h.memory, h.volcano_sees) for h in holders] == [("ml/bound", 24576, True)]
    message = stuck_message("ml/web", "gpu-0", 5, holders, window=120)
    assert message == (
        "vgpu-guard refused the GPU assignment of pod ml/web on node gpu-0 5 times within 120 s; held by "
        f"{GPU}: ml/bound 24576 MiB (bound; Volcano counts it). Volcano counts every holder: its cache is "
        "catching up and the next sessions choose again"
    )


def test_holders_volcano_does_not_count_are_named_with_why() -> None:
    held = ledger(
        entry("unlanded", 8192, admitted=True, committed=True, at=1_800_000_000),
        entry("ours", 4096, committed=True),
        entry("shared", 4096, 4096),
        entry("me", 1024),
    )
    holders = holders_of(
        held, [GPU], unbound=lambda e: e.name in ("unlanded", "ours"), hold_seconds=HOLD, exclude_uid="uid-me"
    )
    assert [(h.pod, h.why, h.volcano_sees) for h in holders] == [
        ("ml/ours", "vgpu-guard's controller is binding it (routing on)", False),
        ("ml/shared", "2 of its containers share the card; Volcano counts the pod's use once", False),
        ("ml/unlanded", "a Binding that has not landed, held until 2027-01-15T08:01:30Z", False),
    ]
    message = stuck_message("ml/me", "gpu-0", 5, holders, window=120)
    assert message.endswith(
        "Volcano does not count the holders marked so and keeps choosing these GPUs: the pod binds once they "
        "go (a Binding's hold ends by itself; shared cards when their pod ends), or on another GPU"
    )
    assert "ml/me" not in message.split("held by", 1)[1]


def test_a_refusal_whose_gpu_was_freed_since_says_so() -> None:
    message = stuck_message("ml/web", "gpu-0", 5, [], window=120)
    assert "held by nothing now (freed since the last refusal)" in message
