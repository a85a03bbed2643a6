"""``admission_sequence``: kube-apiserver's order around our two webhook calls, in one copy.

Each test drives the sequence with a scripted ``decide_phase`` that records what each call was
given: what the API server adds (defaulting, the order, the joined warnings, a denial's end) is
the sequence's, whatever the calls decide."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests.builders import pod
from vgpu_guard.engine.admission import Phase, admission_sequence, request_for
from vgpu_guard.engine.decision import AdmissionDecision, AdmissionRequest
from vgpu_guard.engine.synchronous import run_without_suspending
from vgpu_guard.engine.violations import WARNINGS_TOTAL_LIMIT

PLACEMENT = {"kind": "GangPlacement", "metadata": {"name": "train", "namespace": "ml"}}
MUTATED = {"kind": "Pod", "metadata": {"name": "gpu-pod"}, "spec": {"schedulerName": "volcano"}}


class Calls:
    """A ``decide_phase`` answering each phase as scripted, and the (phase, object) of each call."""

    def __init__(self, mutate: AdmissionDecision, validate: AdmissionDecision) -> None:
        self.answers = {"mutate": mutate, "validate": validate}
        self.made: list[tuple[Phase, Mapping[str, Any] | None]] = []

    async def __call__(self, request: AdmissionRequest, phase: Phase) -> AdmissionDecision:
        self.made.append((phase, request.object))
        return self.answers[phase]


def test_defaults_then_mutate_then_validate_the_mutated_object() -> None:
    calls = Calls(
        AdmissionDecision(allowed=True, object=MUTATED, patch=({"op": "add"},), warnings=("m",)),
        AdmissionDecision(allowed=True, object=MUTATED, warnings=("v",)),
    )
    limits_only = pod({"volcano.sh/vgpu-number": 1})
    result = run_without_suspending(admission_sequence(request_for(limits_only, username="u"), calls))
    (mutate_phase, defaulted), (validate_phase, validated) = calls.made
    assert (mutate_phase, validate_phase) == ("mutate", "validate")
    # kube-apiserver's defaulting came first: requests copied from limits.
    assert defaulted is not None
    assert defaulted["spec"]["containers"][0]["resources"]["requests"] == {"volcano.sh/vgpu-number": 1}
    assert validated == MUTATED
    assert (result.object, result.patch, result.warnings) == (MUTATED, ({"op": "add"},), ("m", "v"))


def test_a_mutating_denial_ends_it_without_a_validating_call() -> None:
    denied = AdmissionDecision(allowed=False, code=403, message="[ib-cluster] no room", warnings=("w",))
    calls = Calls(denied, AdmissionDecision(allowed=True))
    result = run_without_suspending(admission_sequence(request_for(pod(), username="u"), calls))
    assert [phase for phase, _ in calls.made] == ["mutate"]
    assert (result.decision, result.patch, result.warnings, result.persist) == (denied, (), ("w",), ())
    # No mutated object: the one the call was given (defaulted) is reported.
    assert result.object == calls.made[0][1]


def test_what_the_mutating_call_recorded_is_kept_when_validation_denies() -> None:
    """In a cluster the mutating call created the GangPlacement before the validating call."""
    recorded = AdmissionDecision(allowed=True, object=MUTATED, persist=(PLACEMENT,))
    refused = AdmissionDecision(allowed=False, code=403, message="[rule] no")
    result = run_without_suspending(
        admission_sequence(request_for(pod(), username="u"), Calls(recorded, refused))
    )
    assert result.decision == refused and result.persist == (PLACEMENT,)


def test_the_joined_warnings_are_clipped_to_the_api_servers_budget() -> None:
    many = tuple(f"{i:04d} " + "x" * 100 for i in range(30))
    calls = Calls(
        AdmissionDecision(allowed=True, object=MUTATED, warnings=many),
        AdmissionDecision(allowed=True, object=MUTATED, warnings=many),
    )
    result = run_without_suspending(admission_sequence(request_for(pod(), username="u"), calls))
    assert result.warnings == many + many[: len(result.warnings) - len(many)]
    assert len(many) < len(result.warnings) < 2 * len(many)
    assert sum(map(len, result.warnings)) <= WARNINGS_TOTAL_LIMIT
