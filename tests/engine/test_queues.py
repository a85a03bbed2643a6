"""Queue guarantees against cluster capacity (issue 3, seed 001): golden messages, exact arithmetic.

Every decision goes through ``engine.admission.decide`` (the webhook's call) or the ``review`` CLI,
so what is tested here is what users see.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import config_with, default_config
from vgpu_guard.engine.admission import decide
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.decision import AdmissionDecision, AdmissionRequest
from vgpu_guard.engine.rules.queues_validate import QueueTree, audit_queues, cluster_capacity

SEED_001 = (
    "[queue-guarantee-capacity] spec.guarantee.resource.cpu: 36 would bring guaranteed cpu to 68 but "
    "cluster capacity is 64 (8 Ready nodes); lower it to at most 32 or add nodes"
)


def node(
    name: str,
    *,
    cpu: str = "8",
    memory: str = "32Gi",
    ready: bool = True,
    unschedulable: bool = False,
    labels: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110", **(extra or {})},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def queue(
    name: str,
    guarantee: Mapping[str, object] | None = None,
    *,
    capability: Mapping[str, object] | None = None,
    deserved: Mapping[str, object] | None = None,
    parent: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"weight": 1}
    if guarantee is not None:
        spec["guarantee"] = {"resource": dict(guarantee)}
    if capability is not None:
        spec["capability"] = dict(capability)
    if deserved is not None:
        spec["deserved"] = dict(deserved)
    if parent is not None:
        spec["parent"] = parent
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


def eight_nodes(**kwargs: Any) -> list[dict[str, Any]]:
    return [node(f"worker-{i}", **kwargs) for i in range(8)]


def view_of(
    *objects: Mapping[str, Any], synced: bool = True, config: GuardConfig | None = None
) -> ClusterView:
    return ClusterView.from_objects(list(objects), config or default_config(), synced=synced)


def admit(
    obj: Mapping[str, Any],
    view: ClusterView,
    *,
    old: Mapping[str, Any] | None = None,
    config: GuardConfig | None = None,
) -> AdmissionDecision:
    request = AdmissionRequest(
        kind="Queue",
        group="scheduling.volcano.sh",
        resource="queues",
        operation="UPDATE" if old is not None else "CREATE",
        object=obj,
        old_object=old,
        name=str(obj["metadata"]["name"]),
    )
    return decide(request, view, config or default_config(), phase="validate")


# --- the seed-001 numbers and the boundary --------------------------------------------------------


def test_seed_001_last_queue_is_denied_with_the_exact_numbers() -> None:
    view = view_of(
        *eight_nodes(), queue("a", {"cpu": "16"}), queue("b", {"cpu": "8"}), queue("c", {"cpu": "8"})
    )
    decision = admit(queue("d", {"cpu": "36"}), view)
    assert (decision.allowed, decision.code, decision.message) == (False, 403, SEED_001)
    assert decision.rules == ("queue-guarantee-capacity",)


def test_sum_exactly_at_capacity_is_allowed() -> None:
    # 64 of 64 is past the 90 % warn fraction: admitted with a warning, never denied.
    view = view_of(*eight_nodes(), queue("a", {"cpu": "32"}))
    decision = admit(queue("d", {"cpu": "32"}), view)
    assert decision.allowed
    assert decision.warnings == (
        "[queue-guarantee-capacity] spec.guarantee.resource.cpu: queues would guarantee 64 of 64 (100%, warning "
        "level 90%)",
    )


def test_one_millicore_over_is_denied() -> None:
    view = view_of(*eight_nodes(), queue("a", {"cpu": "32"}))
    decision = admit(queue("d", {"cpu": "32001m"}), view)
    assert decision.message == (
        "[queue-guarantee-capacity] spec.guarantee.resource.cpu: 32001m would bring guaranteed cpu to 64001m but "
        "cluster capacity is 64 (8 Ready nodes); lower it to at most 32 or add nodes"
    )


def test_millicores_and_cores_are_the_same_amount() -> None:
    # 32000m + 32 = 64: allowed, and the totals print as cores.
    view = view_of(*eight_nodes(), queue("a", {"cpu": "32000m"}))
    assert admit(queue("d", {"cpu": "32"}), view).allowed
    over = admit(queue("d", {"cpu": "32500m"}), view)
    assert over.message == (
        "[queue-guarantee-capacity] spec.guarantee.resource.cpu: 32500m would bring guaranteed cpu to 64500m but "
        "cluster capacity is 64 (8 Ready nodes); lower it to at most 32 or add nodes"
    )


def test_binary_memory_and_bytes_are_the_same_amount() -> None:
    # 8 x 32Gi = 256Gi; 192Gi written in bytes plus 64Gi fits exactly, one byte more does not.
    view = view_of(*eight_nodes(), queue("a", {"memory": str(192 * 2**30)}))
    assert admit(queue("d", {"memory": "64Gi"}), view).allowed
    over = admit(queue("d", {"memory": str(64 * 2**30 + 1)}), view)
    assert over.message == (
        "[queue-guarantee-capacity] spec.guarantee.resource.memory: 68719476737 would bring guaranteed memory "
        "to 274877906945 but cluster capacity is 256Gi (8 Ready nodes); lower it to at most 64Gi or add nodes"
    )


def test_others_already_over_capacity_says_so() -> None:
    view = view_of(*eight_nodes(), queue("a", {"cpu": "70"}))
    assert admit(queue("d", {"cpu": "1"}), view).message == (
        "[queue-guarantee-capacity] spec.guarantee.resource.cpu: 1 would bring guaranteed cpu to 71 but cluster "
        "capacity is 64 (8 Ready nodes) and the other queues already guarantee 70; remove this guarantee, lower "
        "the other queues' guarantees or add nodes"
    )


# --- UPDATE never double-counts -------------------------------------------------------------------


def test_update_replaces_the_stored_version() -> None:
    stored = queue("a", {"cpu": "40"})
    view = view_of(*eight_nodes(), stored, queue("b", {"cpu": "20"}))
    # 44 + 20 = 64: fits only if the old 40 is not counted too.
    assert admit(queue("a", {"cpu": "44"}), view, old=stored).allowed
    denied = admit(queue("a", {"cpu": "45"}), view, old=stored)
    assert denied.message == (
        "[queue-guarantee-capacity] spec.guarantee.resource.cpu: 45 would bring guaranteed cpu to 65 but cluster "
        "capacity is 64 (8 Ready nodes); lower it to at most 44 or add nodes"
    )


def test_update_that_does_not_raise_an_over_commit_is_admitted_with_a_warning() -> None:
    # Capacity shrank under the queues: users can still edit them (the audit reports the state).
    stored = queue("a", {"cpu": "40"})
    view = view_of(*eight_nodes(), stored, queue("b", {"cpu": "30"}))
    decision = admit(queue("a", {"cpu": "38"}), view, old=stored)
    assert decision.allowed
    assert decision.warnings == (
        "[queue-guarantee-capacity] spec.guarantee.resource.cpu: queues guarantee 68 of capacity 64; lower "
        "them or add nodes",
    )
    assert not admit(queue("a", {"cpu": "41"}), view, old=stored).allowed


def test_create_of_a_name_the_view_already_holds_replaces_it() -> None:
    view = view_of(*eight_nodes(), queue("a", {"cpu": "60"}))
    assert admit(queue("a", {"cpu": "50"}), view).allowed


# --- which nodes count ----------------------------------------------------------------------------


def test_not_ready_and_cordoned_nodes_are_excluded() -> None:
    objects = [*eight_nodes()[:6], node("down", ready=False), node("cordoned", unschedulable=True)]
    view = view_of(*objects, queue("a", {"cpu": "16"}))
    assert admit(queue("d", {"cpu": "36"}), view).message == (
        "[queue-guarantee-capacity] spec.guarantee.resource.cpu: 36 would bring guaranteed cpu to 52 but cluster "
        "capacity is 48 (6 Ready nodes); lower it to at most 32 or add nodes"
    )


def test_node_selector_and_reserve_shape_capacity() -> None:
    config = config_with(queues={"nodeSelector": {"pool": "volcano"}, "reserve": {"cpu": "4"}})
    objects = [node(f"v{i}", labels={"pool": "volcano"}) for i in range(8)] + [node("other", cpu="64")]
    view = view_of(*objects, config=config)
    decision = admit(queue("d", {"cpu": "61"}), view, config=config)
    assert decision.message == (
        "[queue-guarantee-capacity] spec.guarantee.resource.cpu: 61 would bring guaranteed cpu to 61 but cluster "
        "capacity is 60 (8 Ready nodes, less 4 reserved); lower it to at most 60 or add nodes"
    )


def test_one_node_is_singular() -> None:
    view = view_of(node("only"))
    assert admit(queue("d", {"cpu": "9"}), view).message.endswith(
        "capacity is 8 (1 Ready node); lower it to at most 8 or add nodes"
    )


# --- extended resources ---------------------------------------------------------------------------


def test_extended_resources_count_and_missing_ones_have_zero_capacity() -> None:
    objects = [
        node(f"g{i}", extra={"nvidia.com/gpu": "8", "volcano.sh/vgpu-memory": "196608"}) for i in range(2)
    ]
    view = view_of(*objects, node("cpu-only"), queue("a", {"nvidia.com/gpu": "10"}))
    assert admit(queue("d", {"nvidia.com/gpu": "7"}), view).message == (
        "[queue-guarantee-capacity] spec.guarantee.resource.nvidia.com/gpu: 7 would bring guaranteed nvidia.com/gpu "
        "to 17 but cluster capacity is 16 (2 Ready nodes); lower it to at most 6 or add nodes"
    )
    assert admit(queue("d", {"volcano.sh/vgpu-memory": "393216"}), view).allowed
    assert admit(queue("d", {"example.com/fpga": "1"}), view).message == (
        "[queue-guarantee-capacity] spec.guarantee.resource.example.com/fpga: 1 would bring guaranteed "
        "example.com/fpga to 1 but cluster capacity is 0 (no Ready node has example.com/fpga); lower it to at "
        "most 0 or add nodes"
    )


# --- the warn fraction ----------------------------------------------------------------------------


def test_warn_fraction_is_exact_and_configurable() -> None:
    view = view_of(*eight_nodes())
    # 90 % of 64 is 57.6: 57600m is at the threshold (no warning), one millicore more warns.
    assert admit(queue("d", {"cpu": "57600m"}), view).warnings == ()
    assert admit(queue("d", {"cpu": "57601m"}), view).warnings == (
        "[queue-guarantee-capacity] spec.guarantee.resource.cpu: queues would guarantee 57601m of 64 (90%, warning "
        "level 90%)",
    )
    config = config_with(queues={"warnFraction": 0.5})
    assert admit(queue("d", {"cpu": "33"}), view, config=config).warnings == (
        "[queue-guarantee-capacity] spec.guarantee.resource.cpu: queues would guarantee 33 of 64 (51%, warning "
        "level 50%)",
    )


# --- actions --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "allowed", "warnings", "audit"),
    [
        ("enforce", False, (), ()),
        # Clipped to 120 characters in the explanation, keeping the remedy whole.
        (
            "warn",
            True,
            (
                "[queue-guarantee-capacity] spec.guarantee.resource.cpu: 36 would bring guaranteed…; "
                "lower it to at most 32 or add nodes",
            ),
            (),
        ),
        ("audit", True, (), (SEED_001,)),
    ],
)
def test_actions(action: str, allowed: bool, warnings: tuple[str, ...], audit: tuple[str, ...]) -> None:
    config = config_with(admission={"rules": {"queue-guarantee-capacity": action}})
    view = view_of(
        *eight_nodes(), queue("a", {"cpu": "16"}), queue("b", {"cpu": "8"}), queue("c", {"cpu": "8"})
    )
    decision = admit(queue("d", {"cpu": "36"}), view, config=config)
    assert (decision.allowed, decision.warnings, decision.audit) == (allowed, warnings, audit)
    assert decision.rules == ("queue-guarantee-capacity",)


# --- per-queue fields -----------------------------------------------------------------------------


def test_guarantee_above_capability_and_deserved_out_of_range() -> None:
    view = view_of(*eight_nodes())
    decision = admit(
        queue("d", {"cpu": "16"}, capability={"cpu": "12"}, deserved={"cpu": "8", "memory": "64Gi"}),
        view,
    )
    assert decision.message.splitlines() == [
        "[queue-guarantee-capability] spec.guarantee.resource.cpu: 16 exceeds spec.capability.cpu 12; lower the "
        "guarantee to at most 12 or raise the capability",
        "[queue-deserved-range] spec.deserved.cpu: 8 is below spec.guarantee.resource.cpu 16; set deserved to at "
        "least 16",
    ]
    assert admit(
        queue("d", {"cpu": "4"}, capability={"cpu": "12"}, deserved={"cpu": "13"}), view
    ).message == (
        "[queue-deserved-range] spec.deserved.cpu: 13 is above spec.capability.cpu 12; set deserved to at most 12"
    )


def test_unparseable_and_negative_quantities_name_the_field() -> None:
    view = view_of(*eight_nodes())
    decision = admit(
        queue("d", {"cpu": "lots", "memory": "-1Gi"}, capability={"nvidia.com/gpu": "1.2.3"}), view
    )
    assert decision.message.splitlines() == [
        "[queue-quantity] spec.guarantee.resource.cpu: 'lots' is not a quantity (expected e.g. 12, 500m, 64Gi, 1e3); "
        "write e.g. 32, 500m or 64Gi",
        "[queue-quantity] spec.guarantee.resource.memory: -1Gi must not be negative; write 0 or more",
        "[queue-quantity] spec.capability.nvidia.com/gpu: '1.2.3' is not a quantity (expected e.g. 12, 500m, 64Gi, "
        "1e3); write e.g. 32, 500m or 64Gi",
    ]


# --- hierarchy ------------------------------------------------------------------------------------


def test_children_are_carved_out_of_the_parent_not_added_to_the_cluster() -> None:
    view = view_of(
        *eight_nodes(), queue("team", {"cpu": "48"}), queue("team-a", {"cpu": "24"}, parent="team")
    )
    # 24 + 24 = 48 fits the parent and adds nothing to the cluster's 48.
    assert admit(queue("team-b", {"cpu": "24"}, parent="team"), view).allowed
    tree = QueueTree.from_queues(
        view.with_admitted(queue("team-b", {"cpu": "24"}, parent="team")).queues.values()
    )
    assert tree.total("cpu") == 48


def test_children_over_the_parent_guarantee_are_denied() -> None:
    view = view_of(
        *eight_nodes(), queue("team", {"cpu": "16"}), queue("team-a", {"cpu": "10"}, parent="team")
    )
    assert admit(queue("team-b", {"cpu": "8"}, parent="team"), view).message == (
        "[queue-hierarchy] spec.guarantee.resource.cpu: 8 would bring the guaranteed cpu of queue team's children "
        "to 18 but team guarantees 16; lower it to at most 6 or raise team's guarantee"
    )


def test_a_parent_without_a_guarantee_counts_as_zero() -> None:
    view = view_of(*eight_nodes(), queue("team"))
    assert admit(queue("team-a", {"cpu": "1"}, parent="team"), view).message == (
        "[queue-hierarchy] spec.guarantee.resource.cpu: 1 would bring the guaranteed cpu of queue team's children "
        "to 1 but team guarantees no cpu; lower it to at most 0 or raise team's guarantee"
    )


def test_root_parent_is_top_level() -> None:
    view = view_of(*eight_nodes(), queue("root"), queue("a", {"cpu": "32"}, parent="root"))
    assert admit(queue("b", {"cpu": "32"}, parent="root"), view).allowed
    assert admit(queue("b", {"cpu": "33"}, parent="root"), view).rules == ("queue-guarantee-capacity",)


def test_lowering_a_parent_below_its_children_is_denied() -> None:
    stored = queue("team", {"cpu": "16"})
    view = view_of(
        *eight_nodes(),
        stored,
        queue("x", {"cpu": "10"}, parent="team"),
        queue("y", {"cpu": "6"}, parent="team"),
    )
    assert admit(queue("team", {"cpu": "12"}), view, old=stored).message == (
        "[queue-hierarchy] spec.guarantee.resource.cpu: 12 is less than its children's guarantees 16 (x, y); "
        "raise it to at least 16 or lower the children's guarantees first"
    )


def test_parent_must_exist_and_not_be_a_cycle() -> None:
    view = view_of(*eight_nodes(), queue("a", parent="b"), queue("b"))
    assert admit(queue("c", {"cpu": "1"}, parent="nope"), view).message == (
        "[queue-hierarchy] spec.parent: nope does not exist; create queue nope first or fix spec.parent"
    )
    assert admit(queue("b", parent="a"), view, old=queue("b")).message == (
        "[queue-hierarchy] spec.parent: a is a descendant of this queue; choose a parent outside its subtree"
    )
    assert admit(queue("c", parent="c"), view).message == (
        "[queue-hierarchy] spec.parent: c is this queue; a queue cannot be its own parent"
    )


# --- an unsynced cache ----------------------------------------------------------------------------


def test_unsynced_view_answers_a_retriable_error() -> None:
    decision = admit(queue("d", {"cpu": "1"}), view_of(synced=False))
    assert (decision.allowed, decision.code) == (False, 503)
    assert decision.message == (
        "[cluster-state-unknown] vgpu-guard has not finished reading nodes and queues from the API server and will "
        "not decide on a partial view; retry in a few seconds"
    )


def test_unsynced_view_still_reports_the_queues_own_errors() -> None:
    decision = admit(queue("d", {"cpu": "8"}, capability={"cpu": "4"}), view_of(synced=False))
    assert (decision.allowed, decision.code) == (False, 403)
    assert decision.rules == ("queue-guarantee-capability",)


# --- the audit's view of the same numbers ---------------------------------------------------------


def test_audit_flags_every_queue_guaranteeing_an_over_committed_resource() -> None:
    objects = [*eight_nodes()[:7], node("worker-7", ready=False)]
    view = view_of(
        *objects, queue("a", {"cpu": "32"}), queue("b", {"cpu": "32", "memory": "1Gi"}), queue("c")
    )
    audit = audit_queues(view, default_config())
    assert audit.resources["cpu"].ratio == Fraction(64, 56)
    assert sorted(audit.findings) == ["a", "b"]
    assert [v.render() for v in audit.findings["a"]] == [
        "[queue-guarantee-capacity] spec.guarantee.resource.cpu: 32 is part of 64 guaranteed cpu but cluster "
        "capacity is 56 (7 Ready nodes); the queues must give up 8 or nodes be added"
    ]
    assert cluster_capacity(view, default_config())["memory"].amount == 7 * 32 * 2**30


# --- property: whatever order queues arrive in, admitted guarantees never exceed capacity ---------

_MILLIS = st.integers(min_value=0, max_value=40_000).map(lambda m: f"{m}m")


@settings(max_examples=150, deadline=None)
@given(
    guarantees=st.lists(
        st.tuples(st.sampled_from("abcdef"), _MILLIS, st.sampled_from(["", "", "a", "b"])), max_size=10
    ),
    ready=st.integers(min_value=0, max_value=8),
)
def test_admitted_queues_never_exceed_capacity(guarantees: list[tuple[str, str, str]], ready: int) -> None:
    view = view_of(*[node(f"worker-{i}", ready=i < ready) for i in range(8)])
    for name, cpu, parent in guarantees:
        obj = queue(name, {"cpu": cpu}, parent=parent or None)
        old = view.queues.get(name)
        decision = admit(obj, view, old=old)
        if decision.allowed:
            view = view.with_admitted(obj)
        tree = QueueTree.from_queues(view.queues.values())
        assert tree.total("cpu") <= 8 * ready
        for parent_name in {p for _, _, p in guarantees if p and p in view.queues}:
            assert tree.children_sum(parent_name, "cpu") <= tree.own(parent_name, "cpu")
