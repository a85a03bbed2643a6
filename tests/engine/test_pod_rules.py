"""Pod admission rules: every denial's exact text (golden), every mutation and its warning."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import A100_40, config_with, default_config, gpu_node, mutate, pod, view_of
from vgpu_guard.engine.admission import ReviewResult, request_for, review_object
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig

NUM, MEM, CORES, PCT = (
    "volcano.sh/vgpu-number",
    "volcano.sh/vgpu-memory",
    "volcano.sh/vgpu-cores",
    "volcano.sh/vgpu-memory-percentage",
)
LIM = "spec.containers[0].resources.limits"


@pytest.fixture
def view() -> ClusterView:
    """4 x A30 (hami-core) and 8 x A100-40GB (mig)."""
    return view_of(
        [
            gpu_node("a30", count=4),
            gpu_node("a100", count=8, memory=40960, card_type=A100_40, mode="mig", split=7),
        ]
    )


def review(
    obj: dict[str, Any], view: ClusterView, config: GuardConfig | None = None, user: str = "alice"
) -> ReviewResult:
    return review_object(request_for(obj, username=user), view, config or default_config())


def denial(obj: dict[str, Any], view: ClusterView, config: GuardConfig | None = None) -> list[str]:
    result = review(obj, view, config)
    assert not result.decision.allowed, result.decision
    assert result.decision.code == 403
    return result.decision.message.splitlines()


# --- validation: one golden message per rule ---------------------------------------------------------

GOLDEN = [
    (
        {NUM: 1, MEM: "12Gi"},
        f"[vgpu-memory-unit] {LIM}[{MEM}]: 12Gi has a unit suffix but vgpu-memory counts MiB "
        "(12Gi would mean 12884901888 MiB); write 12288",
    ),
    (
        {NUM: 1, MEM: "12G"},
        f"[vgpu-memory-unit] {LIM}[{MEM}]: 12G has a unit suffix but vgpu-memory counts MiB "
        "(12G would mean 12000000000 MiB); write 11445",
    ),
    (
        {NUM: 1, CORES: 150},
        f"[vgpu-cores-range] {LIM}[{CORES}]: 150 is outside 0..100 (percent of one GPU); "
        "use 0..100, 100 = whole card",
    ),
    (
        {NUM: 1, CORES: -1},
        f"[vgpu-cores-range] {LIM}[{CORES}]: -1 is outside 0..100 (percent of one GPU); "
        "use 0..100, 100 = whole card",
    ),
    (
        {NUM: 1, PCT: 120},
        f"[vgpu-memory-percentage-range] {LIM}[{PCT}]: 120 is outside 0..100 "
        "(percent of one card's memory); use 0..100",
    ),
    (
        {NUM: 0, MEM: 100},
        f"[vgpu-number-range] {LIM}[{NUM}]: 0 must be at least 1; ask for 1 or more cards "
        "or remove the resource",
    ),
    (
        {NUM: 9, MEM: 100},
        f"[vgpu-number-range] {LIM}[{NUM}]: 9 is more cards than any node has "
        "(at most 8 on one node); ask for at most 8",
    ),
    (
        {NUM: 1, MEM: 40961},
        f"[vgpu-memory-too-large] {LIM}[{MEM}]: 40961 MiB is more than the largest card offers "
        "(40960 MiB); ask for at most 40960 per card, or more cards",
    ),
    (
        {NUM: "1500m", MEM: 100},
        f"[vgpu-integer] {LIM}[{NUM}]: 1500m is not a whole number; vGPU resources count "
        "whole units, write 2",
    ),
    (
        {NUM: 1.5, MEM: 100},
        f"[vgpu-integer] {LIM}[{NUM}]: 1.5 is not a whole number; vGPU resources count whole units, write 2",
    ),
    (
        {NUM: "two", MEM: 100},
        f"[vgpu-quantity] {LIM}[{NUM}]: 'two' is not a quantity (expected e.g. 12, 500m, "
        "64Gi, 1e3); write a whole number such as 1",
    ),
]


@pytest.mark.parametrize(("limits", "message"), GOLDEN)
def test_golden_denials(view: ClusterView, limits: dict[str, Any], message: str) -> None:
    assert denial(pod(limits), view) == [message]


def test_mig_memory_no_profile_fits(view: ClusterView) -> None:
    obj = pod({NUM: 1, MEM: 50000}, annotations={"volcano.sh/vgpu-mode": "mig"})
    assert denial(obj, view) == [
        f"[mig-no-profile] {LIM}[{MEM}]: 50000 MiB fits no MIG profile (largest: 7g.40gb with 40960 MiB on "
        "NVIDIA A100-SXM4-40GB); ask for at most 40960 or use hami-core"
    ]


def test_mode_no_node_offers() -> None:
    view = view_of([gpu_node("a30")])
    obj = pod({NUM: 1, MEM: 1000}, annotations={"volcano.sh/vgpu-mode": "mig"})
    assert denial(obj, view) == [
        "[vgpu-mode-unavailable] metadata.annotations[volcano.sh/vgpu-mode]: mig is offered by no node "
        "(modes offered: hami-core); use an offered mode or remove the annotation"
    ]


def test_invalid_mode(view: ClusterView) -> None:
    obj = pod({NUM: 1, MEM: 1000}, annotations={"volcano.sh/vgpu-mode": "vgpu"})
    assert denial(obj, view) == [
        "[vgpu-mode-invalid] metadata.annotations[volcano.sh/vgpu-mode]: vgpu is not a vGPU mode; use hami-core or mig"
    ]


def test_privileged_container(view: ClusterView) -> None:
    obj = pod({NUM: 1, MEM: 1000})
    obj["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    assert denial(obj, view) == [
        "[vgpu-privileged] spec.containers[0].securityContext.privileged: true gives the container every GPU "
        "and bypasses vGPU limits; drop privileged from vGPU containers"
    ]


@pytest.mark.parametrize(
    "key",
    [
        "volcano.sh/vgpu-ids-new",
        "volcano.sh/devices-to-allocate",
        "volcano.sh/vgpu-node",
        "volcano.sh/vgpu-time",
        "volcano.sh/bind-phase",
        "volcano.sh/bind-time",
        "vgpu-guard.io/allocation",
    ],
)
def test_forged_allocation_annotations(view: ClusterView, key: str) -> None:
    obj = pod({NUM: 1, MEM: 1000}, annotations={key: "x"})
    assert denial(obj, view) == [
        f"[allocation-annotations] metadata.annotations[{key}]: x was set by alice; allocation annotations are "
        "written by the scheduler at binding, remove it"
    ]


def test_forged_annotations_on_non_gpu_pods_too(view: ClusterView) -> None:
    obj = pod({"cpu": "1"}, annotations={"volcano.sh/vgpu-ids-new": "GPU-1,NVIDIA,1000,0:;"})
    assert denial(obj, view)[0].startswith(
        "[allocation-annotations] metadata.annotations[volcano.sh/vgpu-ids-new]"
    )


def test_trusted_user_may_set_allocation_annotations(view: ClusterView) -> None:
    config = config_with(
        admission={"trustedUsers": ["system:serviceaccount:vgpu-guard:vgpu-guard-controller"]}
    )
    obj = pod({NUM: 1, MEM: 1000}, annotations={"volcano.sh/vgpu-node": "a30"})
    result = review(obj, view, config, user="system:serviceaccount:vgpu-guard:vgpu-guard-controller")
    assert result.decision.allowed


MULTI_CONTAINERS = [
    {"name": "a", "image": "i", "resources": {"limits": {NUM: 1, MEM: 1000}}},
    {"name": "b", "image": "i", "resources": {"limits": {NUM: 1, MEM: 1000}}},
]
MULTI = (
    "[vgpu-multi-container] spec.containers[1]: also requests vGPU (as does spec.containers[0]), and the "
    "device plugin cannot tell the containers apart at allocation; request vGPU in one container, or split "
    "the pod"
)
# Kubernetes' 120 characters: the remedy whole, the explanation cut at a word.
MULTI_WARNING = (
    "[vgpu-multi-container] spec.containers[1]: also requests vGPU (as does…; request vGPU in one container, "
    "or split the pod"
)


def test_multi_container_denied_by_default(view: ClusterView) -> None:
    assert denial(pod(containers=MULTI_CONTAINERS), view) == [MULTI]


@pytest.mark.parametrize(
    "admission",
    [{"multiContainer": "warn"}, {"rules": {"vgpu-multi-container": "warn"}}],
    ids=["multiContainer", "rules"],
)
def test_multi_container_warn_admits_with_the_warning(view: ClusterView, admission: dict[str, Any]) -> None:
    """The documented setting and the rule's action are one switch: both warn, neither is silent."""
    result = review(pod(containers=MULTI_CONTAINERS), view, config_with(admission=admission))
    assert result.decision.allowed
    assert result.decision.actions == {"vgpu-multi-container": "warn"}
    assert MULTI_WARNING in result.warnings


def test_a_rules_entry_wins_over_multi_container(view: ClusterView) -> None:
    config = config_with(admission={"multiContainer": "warn", "rules": {"vgpu-multi-container": "enforce"}})
    assert denial(pod(containers=MULTI_CONTAINERS), view, config) == [MULTI]


def test_request_limit_mismatch(view: ClusterView) -> None:
    obj = pod({NUM: 1, MEM: 1000}, requests={NUM: 1, MEM: 2000})
    assert denial(obj, view) == [
        f"[vgpu-request-limit-mismatch] spec.containers[0].resources.requests[{MEM}]: 2000 differs from limits "
        "1000; extended resources need equal values, set both to 1000"
    ]


def test_several_violations_one_line_each(view: ClusterView) -> None:
    lines = denial(pod({NUM: 0, MEM: "1Gi", CORES: 101}), view)
    assert [line.split("]")[0] + "]" for line in lines] == [
        "[vgpu-memory-unit]",
        "[vgpu-number-range]",
        "[vgpu-cores-range]",
    ]


def test_init_container_paths(view: ClusterView) -> None:
    obj = pod({"cpu": "1"})
    obj["spec"]["initContainers"] = [
        {"name": "warm", "image": "i", "resources": {"limits": {NUM: 1, CORES: 300}}}
    ]
    assert denial(obj, view) == [
        f"[vgpu-cores-range] spec.initContainers[0].resources.limits[{CORES}]: 300 is outside 0..100 "
        "(percent of one GPU); use 0..100, 100 = whole card"
    ]


def test_rule_actions_warn_and_audit(view: ClusterView) -> None:
    obj = pod({NUM: 1, CORES: 150, MEM: 1000})
    warned = review(obj, view, config_with(admission={"rules": {"vgpu-cores-range": "warn"}}))
    assert warned.decision.allowed
    assert any(w.startswith(f"[vgpu-cores-range] {LIM}[{CORES}]: 150 is outside") for w in warned.warnings)
    assert all(len(w) <= 120 for w in warned.warnings)
    audited = review(obj, view, config_with(admission={"rules": {"vgpu-cores-range": "audit"}}))
    assert audited.decision.allowed
    assert audited.decision.audit and audited.decision.audit[0].startswith("[vgpu-cores-range]")
    assert not any("vgpu-cores-range" in w for w in audited.warnings)


def test_unsynced_view_answers_retriable_error() -> None:
    view = view_of([gpu_node("a30")], synced=False)
    result = review(pod({NUM: 1, MEM: 1000}), view)
    assert result.decision.code == 503
    assert result.decision.message == (
        "[cluster-state-unknown] vgpu-guard has not finished reading nodes from the API server and will not "
        "decide on a partial view; retry in a few seconds"
    )
    assert review(pod({"cpu": "1"}), view).decision.allowed  # non-GPU pods are never held up


def test_non_gpu_pods_pass_untouched(view: ClusterView) -> None:
    result = review(pod({"cpu": "1", "memory": "1Gi"}), view)
    assert result.decision.allowed and result.patch == () and result.warnings == ()


# --- mutation ----------------------------------------------------------------------------------------


def limits_of(obj: Any, index: int = 0) -> dict[str, Any]:
    return dict(obj["spec"]["containers"][index]["resources"]["limits"])


def test_memory_without_number_gets_default_gpu_num(view: ClusterView) -> None:
    result = review(pod({MEM: 3000, CORES: 50}), view)
    assert limits_of(result.object)[NUM] == "1"
    assert 'vgpu-guard: container "cuda": set volcano.sh/vgpu-number=1 (defaultGPUNum)' in result.warnings


def test_whole_card_request_becomes_exclusive(view: ClusterView) -> None:
    result = review(pod({NUM: 2}), view)
    assert limits_of(result.object)[CORES] == "100"
    assert (
        'vgpu-guard: container "cuda": set volcano.sh/vgpu-cores=100 (a whole card is exclusive)'
        in result.warnings
    )
    result = review(pod({NUM: 1, PCT: 100}), view)
    assert limits_of(result.object)[CORES] == "100"
    result = review(pod({NUM: 1, PCT: 50}), view)
    assert CORES not in limits_of(result.object)


def test_explicit_cores_are_kept_for_whole_card(view: ClusterView) -> None:
    result = review(pod({NUM: 1, CORES: 30}), view)
    assert limits_of(result.object)[CORES] == 30


def test_configured_defaults(view: ClusterView) -> None:
    config = config_with(
        deviceConfig={"nvidia": {"defaultMemory": 2048, "defaultCores": 20, "defaultGPUNum": 2}}
    )
    result = review(pod({CORES: 10}), view, config)
    assert limits_of(result.object) == {NUM: "2", MEM: "2048", CORES: 10}
    result = review(pod({MEM: 4096}), view, config)
    assert limits_of(result.object) == {NUM: "2", MEM: 4096, CORES: "20"}


def test_requests_only_copied_to_limits(view: ClusterView) -> None:
    result = review(pod(requests={NUM: 1, MEM: 1000}), view)
    assert limits_of(result.object) == {NUM: 1, MEM: 1000}
    assert (
        'vgpu-guard: container "cuda": copied requests volcano.sh/vgpu-number to limits (Volcano reads limits)'
        in result.warnings
    )


def test_mig_request_rounded_to_profile(view: ClusterView) -> None:
    """Seed 002: 3000 MiB in MIG mode lands on a 5 GiB instance."""
    result = review(
        pod({NUM: 1, MEM: 3000}, annotations={"volcano.sh/vgpu-mode": "mig"}, schedulerName="volcano"), view
    )
    assert result.decision.allowed
    assert limits_of(result.object)[MEM] == "5120"
    assert result.object["spec"]["containers"][0]["resources"]["requests"][MEM] == "5120"
    assert result.object["metadata"]["annotations"]["vgpu-guard.io/mig-profile"] == "1g.5gb"
    assert list(result.warnings) == [
        'vgpu-guard: container "cuda": rounded volcano.sh/vgpu-memory 3000 -> 5120 (MIG 1g.5gb)',
        "vgpu-guard: MIG 1g.5gb on A100-SXM4-40GB exposes ~4864 MiB, not the 5120 MiB configured",
        "vgpu-guard: set annotation vgpu-guard.io/mig-profile=1g.5gb",
    ]


def test_canonical_quantities_from_the_api_server_are_plain_counts(view: ClusterView) -> None:
    """kube-apiserver canonicalises before admission: the user's 3000 reaches the webhook as "3k"
    (and 12000 as "12k"). Those are the same MiB counts, rounded and allowed like the plain form."""
    result = review(pod({NUM: 1, MEM: "3k"}, annotations={"volcano.sh/vgpu-mode": "mig"}), view)
    assert result.decision.allowed
    assert limits_of(result.object)[MEM] == "5120"
    assert result.warnings[0] == (
        'vgpu-guard: container "cuda": rounded volcano.sh/vgpu-memory 3000 -> 5120 (MIG 1g.5gb)'
    )
    assert review(pod({NUM: 1, MEM: "12k"}), view).decision.allowed


def test_mig_rounding_first_fitting_group_wins(view: ClusterView) -> None:
    # 6000 fits no instance of group1 (1g.5gb), so group2's smallest fitting instance (2g.10gb) wins.
    result = review(pod({NUM: 1, MEM: 6000}, annotations={"volcano.sh/vgpu-mode": "mig"}), view)
    assert limits_of(result.object)[MEM] == "10240"
    assert result.object["metadata"]["annotations"]["vgpu-guard.io/mig-profile"] == "2g.10gb"


def test_mig_rounding_over_several_models_takes_the_smallest_that_rounds_the_same_everywhere() -> None:
    view = view_of(
        [
            gpu_node("a30", card_type="NVIDIA-NVIDIA A30", mode="mig", split=4),
            gpu_node("a100", memory=40960, card_type=A100_40, mode="mig", split=7),
        ]
    )
    result = review(pod({NUM: 1, MEM: 3000}, annotations={"volcano.sh/vgpu-mode": "mig"}), view)
    assert limits_of(result.object)[MEM] == "5120"
    assert result.object["metadata"]["annotations"]["vgpu-guard.io/mig-profile"] == (
        "NVIDIA A100-SXM4-40GB=1g.5gb,NVIDIA A30=1g.6gb"
    )


@pytest.mark.parametrize(
    ("modes", "default", "expected", "why"),
    [
        (["hami-core"], "auto", "hami-core", "defaultMode auto"),
        (["mig"], "auto", "mig", "defaultMode auto"),
        (["hami-core", "mig"], "auto", "hami-core", "defaultMode auto, both modes offered"),
        (["hami-core", "mig"], "mig", "mig", "defaultMode mig"),
        (["hami-core"], "mig", "hami-core", "defaultMode mig is offered by no node"),
    ],
)
def test_mode_stamped(modes: list[str], default: str, expected: str, why: str) -> None:
    nodes = [gpu_node(f"n-{m}", memory=40960, card_type=A100_40, mode=m) for m in modes]
    config = config_with(admission={"defaultMode": default})
    result = review(pod({NUM: 1, MEM: 1000}), view_of(nodes, config), config)
    assert result.object["metadata"]["annotations"]["volcano.sh/vgpu-mode"] == expected
    assert f"vgpu-guard: set annotation volcano.sh/vgpu-mode={expected} ({why})" in result.warnings


def test_mode_never_stamped_when_no_node_offers_one() -> None:
    # On a fleet that can grow (capacity rules warn), the pod is admitted with the note.
    growing = config_with(admission={"fleetScaling": "scaling"})
    result = review(pod({NUM: 1, MEM: 1000}), view_of([]), growing)
    assert result.decision.allowed
    assert "volcano.sh/vgpu-mode" not in result.object["metadata"].get("annotations", {})
    assert "vgpu-guard: volcano.sh/vgpu-mode left unset: no node registers vGPU devices" in result.warnings


def test_a_pod_that_validation_denies_gets_no_notes_about_its_mutation() -> None:
    """kubectl printed 'Warning: vgpu-guard: ...' for each change to a pod that was then denied,
    without naming it (issue 38 item 8): the denial alone says what to fix."""
    result = review(pod({NUM: 1, MEM: 1000}), view_of([]))
    assert not result.decision.allowed
    assert not any(w.startswith("vgpu-guard: ") for w in result.warnings), result.warnings
    assert (
        "vgpu-guard: volcano.sh/vgpu-mode left unset: no node registers vGPU devices"
        in review(
            pod({NUM: 1, MEM: 1000}), view_of([]), config_with(admission={"fleetScaling": "scaling"})
        ).warnings
    )  # the same note, where the pod is admitted


def test_routing_sets_scheduler_name(view: ClusterView) -> None:
    config = config_with(scheduling={"routing": True, "schedulerName": "vgpu-guard"})
    result = review(pod({NUM: 1, MEM: 1000}, schedulerName="volcano"), view, config)
    assert result.object["spec"]["schedulerName"] == "vgpu-guard"
    assert "vgpu-guard: set spec.schedulerName=vgpu-guard (was volcano; vGPU routing on)" in result.warnings
    assert (
        review(pod({NUM: 1, MEM: 1000}, schedulerName="volcano"), view).object["spec"]["schedulerName"]
        == "volcano"
    )


def test_mutation_is_idempotent(view: ClusterView) -> None:
    config = default_config()
    first = mutate(
        pod({MEM: 3000}, annotations={"volcano.sh/vgpu-mode": "mig"}, schedulerName="volcano"), view, config
    )
    second = mutate(first.object, view, config)
    assert first.patch and second.patch == () and second.warnings == ()


def test_patch_escapes_annotation_keys(view: ClusterView) -> None:
    mutation = mutate(pod({NUM: 1, MEM: 1000}, annotations={"a": "b"}), view, default_config())
    assert {
        "op": "add",
        "path": "/metadata/annotations/volcano.sh~1vgpu-mode",
        "value": "hami-core",
    } in mutation.patch
