"""The PodGroup status written for a gang our controller schedules (routing mode)."""

from __future__ import annotations

from vgpu_guard.engine.podgroup_status import READY_REASON, GangState, podgroup_status

NOW, LATER = "2026-11-28T19:00:00Z", "2026-11-28T19:05:00Z"


def test_a_gang_that_cannot_start_says_why_in_volcanos_words_and_keeps_inqueue() -> None:
    status = podgroup_status(
        {"phase": "Inqueue"},
        GangState(min_member=3, bound=0, pending=3, why="only 2 of 3 members can run"),
        now=NOW,
        transition_id="t1",
    )
    assert status == {
        "phase": "Inqueue",
        "conditions": [
            {
                "type": "Unschedulable",
                "status": "True",
                "reason": "NotEnoughResources",
                "message": "3/3 tasks in gang unschedulable: only 2 of 3 members can run",
                "lastTransitionTime": NOW,
                "transitionID": "t1",
            }
        ],
    }


def test_no_phase_yet_becomes_pending_and_a_running_phase_is_not_kept_while_waiting() -> None:
    waiting = GangState(min_member=2, bound=1, pending=1, why="no room")
    assert podgroup_status(None, waiting, now=NOW, transition_id="t")["phase"] == "Pending"  # type: ignore[index]
    assert podgroup_status({"phase": "Running"}, waiting, now=NOW, transition_id="t")["phase"] == "Pending"  # type: ignore[index]


def test_the_same_reason_is_not_written_twice_and_a_new_message_keeps_the_transition() -> None:
    state = GangState(min_member=2, bound=0, pending=2, why="no room")
    first = podgroup_status({}, state, now=NOW, transition_id="t1")
    assert first is not None
    assert podgroup_status(first, state, now=LATER, transition_id="t2") is None
    changed = podgroup_status(first, GangState(2, 0, 2, why="other"), now=LATER, transition_id="t2")
    assert changed is not None
    [condition] = changed["conditions"]
    assert (condition["lastTransitionTime"], condition["transitionID"]) == (NOW, "t1")


def test_minmember_bound_is_running_and_scheduled_and_drops_the_old_reason() -> None:
    waiting = podgroup_status({}, GangState(2, 0, 2, why="no room"), now=NOW, transition_id="t1")
    running = podgroup_status(
        waiting, GangState(min_member=2, bound=2, pending=0), now=LATER, transition_id="t2"
    )
    assert running is not None
    assert running["phase"] == "Running"
    assert [(c["type"], c["reason"]) for c in running["conditions"]] == [("Scheduled", READY_REASON)]
    assert podgroup_status(running, GangState(2, 2, 0), now=LATER, transition_id="t3") is None


def test_a_placed_gang_still_binding_is_left_alone() -> None:
    assert podgroup_status({"phase": "Inqueue"}, GangState(3, 1, 2), now=NOW, transition_id="t") is None


def test_conditions_of_other_types_are_kept() -> None:
    current = {"conditions": [{"type": "Evicted", "status": "True"}, "junk"]}
    status = podgroup_status(current, GangState(1, 0, 1, why="x"), now=NOW, transition_id="t")
    assert status is not None
    assert [c["type"] for c in status["conditions"]] == ["Evicted", "Unschedulable"]
