"""Issue 43 item 7 in ``simulate``: the scenarios of examples/simulate/volcano/ run whole (Volcano's
model, the webhook's arbiter, vgpu-guard's controller), and what the pods end as.

Which assertions depend on the arbiter: none of those here asserts a refusal. (a) and (d) end
Pending by Volcano's own decision, whatever the arbiter does. (b)'s arbiter refusal is not
asserted: see the test's docstring.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from vgpu_guard.cli.scenario import load_scenario
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


def test_two_containers_on_one_card_volcano_1_11_counts_both() -> None:
    """(b) at v1.11 Volcano counts both containers and leaves the 16 GiB pod Pending itself.

    From v1.12.0 Volcano sends it to the card (tests/volcano/test_divergences.py). That the arbiter
    then refuses it, naming GPU-pair-0-0, is NOT asserted: in simulate today it is admitted and the
    card ends 32768 / 24576 MiB, because the controller adopts the running pod ``pair`` into the
    ledger only after Volcano's first session, so the arbiter judges against an empty ledger."""
    pods = _run("two-containers-one-card.yaml", "1.11")
    assert pods["big"][0] == "Pending"
