"""A re-applied pod file keeps what CREATE normalised (issue 38: ``kubectl apply`` twice failed).

kubectl's three-way patch sends back every field of the file the server changed; pod spec is
immutable. The UPDATE mutation puts back the stored value wherever normalising the file gives it,
and leaves every other change alone.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.builders import A100_40, config_with, default_config, gpu_node, pod, view_of
from vgpu_guard.engine.admission import decide, request_for, review_object
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig

NUM, MEM = "volcano.sh/vgpu-number", "volcano.sh/vgpu-memory"
VIEW = view_of([gpu_node("a100", count=8, memory=40960, card_type=A100_40, mode="mig", split=7)])


def created(obj: dict[str, Any], config: GuardConfig) -> dict[str, Any]:
    result = review_object(request_for(obj, username="alice"), VIEW, config)
    assert result.decision.allowed
    return dict(result.object)


def reapplied(
    live: dict[str, Any], file_spec: dict[str, Any], config: GuardConfig, view: ClusterView = VIEW
) -> Any:
    """The UPDATE kubectl's patch makes: the live pod with the file's spec fields put back."""
    sent = copy.deepcopy(live)
    sent["spec"] = copy.deepcopy(file_spec)
    request = request_for(sent, username="alice", operation="UPDATE", old=live)
    return decide(request, view, config, phase="mutate")


def test_an_unchanged_mig_file_reapplied_keeps_the_rounded_memory_and_the_route() -> None:
    config = config_with(scheduling={"routing": True})
    file = pod({NUM: 1, MEM: 3000}, annotations={"volcano.sh/vgpu-mode": "mig"}, schedulerName="volcano")
    live = created(file, config)
    assert live["spec"]["containers"][0]["resources"]["limits"][MEM] == "5120"
    decision = reapplied(live, file["spec"], config)
    assert decision.allowed and decision.warnings == ()
    assert decision.object["spec"] == live["spec"]
    # (requests too: this offline request skips the API server's defaulting, which copies limits)
    assert {op["path"] for op in decision.patch} == {
        "/spec/containers/0/resources/limits/volcano.sh~1vgpu-memory",
        "/spec/containers/0/resources/requests",
        "/spec/schedulerName",
    }


def test_a_real_change_is_left_as_written() -> None:
    config = default_config()
    file = pod({NUM: 1, MEM: 3000}, annotations={"volcano.sh/vgpu-mode": "mig"})
    live = created(file, config)
    changed = copy.deepcopy(file["spec"])
    changed["containers"][0]["image"] = "cuda:13"
    decision = reapplied(live, changed, config)
    assert decision.object["spec"]["containers"][0]["image"] == "cuda:13"
    assert decision.object["spec"]["containers"][0]["resources"]["limits"][MEM] == "5120"


def test_what_normalising_would_now_decide_differently_is_not_applied() -> None:
    """The stored pod was rounded on a fleet that has changed since: nothing is put back that the
    stored pod does not hold, so the update goes to the API server as written."""
    config = default_config()
    file = pod({NUM: 1, MEM: 3000}, annotations={"volcano.sh/vgpu-mode": "mig"})
    live = created(file, config)
    live["spec"]["containers"][0]["resources"]["limits"][MEM] = "10240"  # rounded on another card type
    live["spec"]["containers"][0]["resources"]["requests"][MEM] = "10240"
    decision = reapplied(live, file["spec"], config)
    assert decision.patch == ()
    assert decision.object["spec"]["containers"][0]["resources"]["limits"][MEM] == 3000


def test_an_update_that_changes_no_spec_is_untouched() -> None:
    config = default_config()
    live = created(pod({NUM: 1, MEM: 3000}, annotations={"volcano.sh/vgpu-mode": "mig"}), config)
    decision = reapplied(live, live["spec"], config)
    assert decision.patch == () and decision.allowed
