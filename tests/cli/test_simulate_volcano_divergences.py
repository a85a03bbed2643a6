"""Issue 43 item 7 in ``simulate``: the scenarios of examples/simulate/volcano/ run whole (Volcano's
model, the webhook's arbiter, vgpu-guard's controller), and what the pods end as.

Which assertions depend on the arbiter: (a) and (d) end Pending by Volcano's own decision,
whatever the arbiter does; (b) in v1.12.x and from v1.15.0 is the arbiter's refusal (the running pod adopted into
the ledger before Volcano's first session, as vgpu-guard runs before the scenario's pods arrive).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from vgpu_guard.cli.scenario import load_scenario
from vgpu_guard.cli.simulate_report import to_text
from vgpu_guard.cli.simulation import Mode, simulate
from vgpu_guard.engine.config import GuardConfig

SCENARIOS = Path(__file__).resolve().parents[2] / "examples" / "simulate" / "volcano"


def _run(name: str, release: str) -> dict[str, tuple[str, str | None]]:
    result = simulate(load_scenario([str(SCENARIOS / name)]), GuardConfig(), Mode(volcano_version=release))
    return {p.name: (p.phase, p.reason) for p in result.pods}


@pytest.mark.parametrize("release", ["1.15", "1.16"])
def test_a_gang_volcano_cannot_start_whole_stays_pending_with_gangs_reason(release: str) -> None:
    """(a) Every member Pending with gang.go's message; at 1.15 two of them also carry an
    assignment (tests/volcano/test_divergences.py), which the report does not show."""
    pods = _run("discarded-gang.yaml", release)
    assert {name: phase for name, (phase, _) in pods.items()} == dict.fromkeys(
        ("trio-0", "trio-1", "trio-2"), "Pending"
    )
    assert all(
        str(reason).startswith("1/3 tasks in gang unschedulable: gang default/trio")
        for _, reason in pods.values()
    )


def test_exclusive_cores_pending_in_volcanos_words() -> None:
    """(d) The 100-core pod waits for an unused card although both have 23 GiB free."""
    pods = _run("exclusive-cores.yaml", "1.16")
    assert pods["exclusive"] == (
        "Pending",
        "0/1 nodes are unavailable: 1 hami-vgpuDeviceSharing not enough gpu fitted on this node.",
    )


@pytest.mark.parametrize("release", ["1.11", "1.13", "1.14"])
def test_two_containers_on_one_card_volcano_counts_both(release: str) -> None:
    """(b) v1.10-v1.11 (AddResource) and v1.13-v1.14 (hami-core AddPod counts every call) count
    both containers and leave the 16 GiB pod Pending by Volcano's own decision."""
    pods = _run("two-containers-one-card.yaml", release)
    assert pods["big"][0] == "Pending"
    assert "vgpu-guard's arbiter" not in str(pods["big"][1])


@pytest.mark.parametrize("release", ["1.12", "1.15", "1.16"])
def test_two_containers_on_one_card_the_arbiter_refuses_naming_why(release: str) -> None:
    """(b) v1.12.x and from v1.15.0 Volcano counts the running pod's two containers on the card once
    and sends the 16 GiB pod there; the arbiter refuses it, and the refusal says the holder is
    counted once."""
    result = simulate(
        load_scenario([str(SCENARIOS / "two-containers-one-card.yaml")]),
        GuardConfig(),
        Mode(volcano_version=release),
    )
    big = next(p for p in result.pods if p.name == "big")
    assert big.phase == "Pending"
    assert "GPU GPU-pair-0-0 on node pair-0 has 8192 MiB free of 24576 MiB, 16384 MiB asked" in str(
        big.reason
    )
    assert "(held by default/pair (2 containers, counted once by Volcano 1.12, >= 1.15))" in str(big.reason)
    assert result.violations == ()


@pytest.mark.parametrize(("release", "reported"), [("1.15", True), ("1.15.1", False), ("1.16", False)])
def test_the_device_plugins_stale_pick_shows_in_simulate(release: str, reported: bool) -> None:
    """(e) Item 8: a discarded 1.10-1.15.0 gang leaves assignments the device plugin may hand to the
    pod bound to that node in the same session; the controller's DevicePluginStalePick is shown on
    both pods and the Node. 1.15.1 patches them away and >= 1.16 never writes them: nothing."""
    result = simulate(
        load_scenario([str(SCENARIOS / "stale-device-plugin-pick.yaml")]),
        GuardConfig(),
        Mode(volcano_version=release),
    )
    assert {p.name: p.phase for p in result.pods}["after"] == "Bound"
    stale = [w for w in result.warnings if ": DevicePluginStalePick: " in w]
    if not reported:
        assert stale == []
        return
    assert [w.split(": ", 1)[0] for w in stale] == ["Node pick-0", "Pod default/after", "Pod default/trio-1"]
    assert all("remove the assignment from pod default/trio-1" in w for w in stale)
    text = to_text(result)
    assert "VGPU-GUARD WARNINGS (the controller's Warning Events):" in text


def test_a_uuid_registered_twice_is_two_cards_to_volcano_and_none_to_the_arbiter() -> None:
    """(c) Volcano reads health "True" as healthy (ParseBool) and keeps a UUID listed twice as two
    cards, so its binpack sends both pods to the duplicated card; the arbiter holds that card to no
    assignment (the ledger counts by UUID and cannot tell which record is the card) and says why,
    naming both records, while the node's other card stays usable."""
    pods = _run("registration-parsing.yaml", "1.16")
    for name in ("first", "second"):
        phase, reason = pods[name]
        assert phase == "Pending"
        assert (
            "GPU GPU-dup-0-0 on node dup-0 is registered twice in volcano.sh/node-vgpu-register (records 1 and 2)"
            in str(reason)
        )
