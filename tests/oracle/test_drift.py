"""The oracle's drift check, without a control plane: what counts as a fleet node not as rendered.

kube-controller-manager writes a node's whole taint list (PatchNodeTaints, 1.20, no precondition)
when its unschedulable taint follows a cordon, and can so put back an earlier render's taints; a
scheduler's node cache can also still hold an earlier render. The runner must tell these from the
render, and must not take the cordon's own taint, a heartbeat or the API server's canonical
quantities for drift.
"""

from __future__ import annotations

import copy
from typing import Any, cast

from tests.oracle.cases import TWIN, NodeSpec, node_name, render_node
from tests.oracle.runner import UNSCHEDULABLE, Oracle, Rendered, differences, settle_action, zone_key
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.informer import InformerEvent

T1 = {"key": "oracle.vgpu-guard.io/t1", "value": "v1", "effect": "NoSchedule"}
CORDON_TAINT = {"key": UNSCHEDULABLE, "effect": "NoSchedule"}
NAME = node_name("s0-kube", 1)


def _render(spec: NodeSpec, *, version: int = 100) -> tuple[dict[str, Any], Rendered]:
    """The node as the API server answers the render (our last write at ``version``), and the render."""
    node, status = render_node(spec, fleet="s0-kube", side="kube", index=1, zone_key=zone_key(0), now="now")
    part = {"labels": node["metadata"]["labels"], **node["spec"]}
    allocatable = status["status"]["allocatable"]
    echoed = {**allocatable, TWIN: "1k"}  # the API server writes quantities in canonical form
    read = copy.deepcopy(node)
    read["metadata"]["resourceVersion"] = str(version)
    read["status"] = {**status["status"], "allocatable": echoed}
    return read, Rendered(part, allocatable, echoed, version)


def _spec(*, taints: list[dict[str, Any]] | None = None, cordoned: bool = False) -> NodeSpec:
    return NodeSpec(
        cpu="4", memory="8Gi", pods=4, storage="50Gi", zone="z1", taints=taints or [], cordoned=cordoned
    )


def _with_taints(node: dict[str, Any], taints: list[dict[str, Any]], version: int) -> dict[str, Any]:
    out = copy.deepcopy(node)
    out["spec"]["taints"] = taints
    out["metadata"]["resourceVersion"] = str(version)
    return out


def test_a_cordoned_node_with_kube_controller_managers_taint_is_as_rendered() -> None:
    node, want = _render(_spec(taints=[T1], cordoned=True))
    settled = _with_taints(node, [*node["spec"]["taints"], CORDON_TAINT], 101)
    assert differences(settled, want) == []
    assert settle_action(settled, want) == "ok"


def test_an_earlier_renders_taint_list_written_back_is_drift_to_write_over() -> None:
    # This render: no t1, cordoned. kube-controller-manager, adding the cordon's taint to the node
    # as its GET had it before the render, wrote back the earlier render's list (with t1).
    node, want = _render(_spec(cordoned=True))
    probe = node["spec"]["taints"][-1]
    overwritten = _with_taints(node, [T1, probe, CORDON_TAINT], 102)
    assert differences(overwritten, want) == ["taints"]
    assert settle_action(overwritten, want) == "write"
    # The same list, with the cordon's taint not (yet) added: still drift, not a wait.
    assert settle_action(_with_taints(node, [T1, probe], 102), want) == "write"


def test_the_cordons_taint_still_to_follow_is_waited_for() -> None:
    cordoned, want = _render(_spec(cordoned=True))
    assert differences(cordoned, want) == ["system taints none"]
    assert settle_action(cordoned, want) == "wait"
    uncordoned, want = _render(_spec())
    lingering = _with_taints(uncordoned, [*uncordoned["spec"]["taints"], CORDON_TAINT], 101)
    assert differences(lingering, want) == [f"system taints {UNSCHEDULABLE}"]
    assert settle_action(lingering, want) == "wait"


def test_a_cached_copy_older_than_our_write_is_waited_for_whatever_it_holds() -> None:
    node, want = _render(_spec(taints=[T1]))
    stale = _with_taints(node, node["spec"]["taints"][-1:], 99)  # the previous render, no t1
    assert differences(stale, want) == ["taints"]
    assert settle_action(stale, want) == "wait"
    assert settle_action(None, want) == "wait"


def test_labels_cordon_and_allocatable_other_than_rendered_are_drift() -> None:
    node, want = _render(_spec())
    other = copy.deepcopy(node)
    other["metadata"]["labels"][zone_key(0)] = "z2"
    other["spec"]["unschedulable"] = True
    other["status"]["allocatable"] = {**other["status"]["allocatable"], "memory": "2Gi"}
    assert differences(other, want) == ["labels", "cordon", "allocatable"]
    # The taints in another order are the same taints.
    reordered = _with_taints(node, list(reversed(node["spec"]["taints"])), 100)
    assert differences(reordered, want) == []


def test_the_runner_marks_a_slot_whose_node_drifts_after_it_settled() -> None:
    oracle = Oracle(cast(AioClusterClient, object()), slots=1)
    node, want = _render(_spec(taints=[T1]))
    oracle._rendered[NAME] = want
    heartbeat = copy.deepcopy(node)
    heartbeat["status"]["conditions"][0]["lastHeartbeatTime"] = "later"
    overwritten = _with_taints(node, node["spec"]["taints"][-1:], 103)

    oracle._node_changed(InformerEvent("MODIFIED", overwritten, node))  # before _settle: our own writes
    assert oracle._drifted == {}
    oracle._guarding = True
    oracle._node_changed(InformerEvent("MODIFIED", heartbeat, node))
    assert oracle._drifted == {}
    oracle._node_changed(InformerEvent("MODIFIED", overwritten, heartbeat))
    assert oracle._drifted == {0: NAME}
