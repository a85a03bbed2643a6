"""NodeResourcesFit: requests against allocatable, as noderesources/fit.go (1.20) computes them.

The table ported from fit_test.go (TestEnoughRequests, TestNotEnoughRequests, TestStorageRequests)
uses its node: allocatable cpu 10m, memory 20, pods 32, example.com/aaa 5, ephemeral-storage 20,
hugepages-2Mi 5; one existing pod on it. ``framework.Resource{MilliCPU: 1, Memory: 1}`` is written
``res(1, 1)`` (requests ``cpu: 1m``, ``memory: 1``).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.engine.scheduling.kit import container, node, pod, verdicts, workloads
from vgpu_guard.engine.scheduling import pod_facts
from vgpu_guard.engine.scheduling.plugins import node_resources_fit
from vgpu_guard.engine.scheduling.plugins.node_resources_fit import TOO_MANY_PODS, insufficient

EXT_A = "example.com/aaa"
EXT_B = "example.com/bbb"
K8S_IO_A = "kubernetes.io/something"
K8S_IO_B = "subdomain.kubernetes.io/something"
HUGE_A = "hugepages-2Mi"

FIT_NODE = {
    "cpu": "10m",
    "memory": "20",
    "pods": "32",
    EXT_A: "5",
    "ephemeral-storage": "20",
    HUGE_A: "5",
}


_NAMES = {"ext_a": EXT_A, "ext_b": EXT_B, "k8s_a": K8S_IO_A, "k8s_b": K8S_IO_B, "huge_a": HUGE_A}


def res(cpu_m: int = 0, memory: int = 0, **scalars: int) -> dict[str, str]:
    """Go's ``framework.Resource{MilliCPU, Memory, ScalarResources}.ResourceList()`` as requests;
    scalars by short name (``ext_a`` is example.com/aaa, ``huge_a`` hugepages-2Mi, ...)."""
    return {"cpu": f"{cpu_m}m", "memory": str(memory), **{_NAMES[k]: str(v) for k, v in scalars.items()}}


def resource_pod(*usage: dict[str, str], init: tuple[dict[str, str], ...] = (), **kw: Any) -> dict[str, Any]:
    """``newResourcePod`` / ``newResourceInitPod``: one container per usage."""
    return pod(
        containers=[container(f"c{i}", requests=u) for i, u in enumerate(usage)],
        init_containers=[container(f"i{i}", requests=u) for i, u in enumerate(init)],
        **kw,
    )


def fit_reasons(
    incoming: dict[str, Any], *existing_usage: dict[str, str], allocatable: dict[str, str] | None = None
) -> tuple[str, ...]:
    existing = [resource_pod(u, name=f"existing-{i}", node="machine") for i, u in enumerate(existing_usage)]
    machine = node("machine", allocatable=allocatable or FIT_NODE)
    return verdicts(incoming, [machine], existing)["machine"]


ENOUGH_REQUESTS: list[tuple[str, dict[str, Any], dict[str, str], tuple[str, ...]]] = [
    ("no resources requested always fits", pod(containers=[container()]), res(10, 20), ()),
    (
        "too many resources fails",
        resource_pod(res(1, 1)),
        res(10, 20),
        ("Insufficient cpu", "Insufficient memory"),
    ),
    (
        "too many resources fails due to init container cpu",
        resource_pod(res(1, 1), init=(res(3, 1),)),
        res(8, 19),
        ("Insufficient cpu",),
    ),
    (
        "too many resources fails due to highest init container cpu",
        resource_pod(res(1, 1), init=(res(3, 1), res(2, 1))),
        res(8, 19),
        ("Insufficient cpu",),
    ),
    (
        "too many resources fails due to init container memory",
        resource_pod(res(1, 1), init=(res(1, 3),)),
        res(9, 19),
        ("Insufficient memory",),
    ),
    (
        "too many resources fails due to highest init container memory",
        resource_pod(res(1, 1), init=(res(1, 3), res(1, 2))),
        res(9, 19),
        ("Insufficient memory",),
    ),
    (
        "init container fits because it's the max, not sum, of containers and init containers",
        resource_pod(res(1, 1), init=(res(1, 1),)),
        res(9, 19),
        (),
    ),
    (
        "multiple init containers fit because it's the max, not sum, of containers and init containers",
        resource_pod(res(1, 1), init=(res(1, 1), res(1, 1))),
        res(9, 19),
        (),
    ),
    ("both resources fit", resource_pod(res(1, 1)), res(5, 5), ()),
    ("one resource memory fits", resource_pod(res(2, 1)), res(9, 5), ("Insufficient cpu",)),
    ("one resource cpu fits", resource_pod(res(1, 2)), res(5, 19), ("Insufficient memory",)),
    ("equal edge case", resource_pod(res(5, 1)), res(5, 19), ()),
    ("equal edge case for init container", resource_pod(res(4, 1), init=(res(5, 1),)), res(5, 19), ()),
    ("extended resource fits", resource_pod(res(0, 0, ext_a=1)), res(), ()),
    ("extended resource fits for init container", resource_pod(res(), init=(res(0, 0, ext_a=1),)), res(), ()),
    (
        "extended resource capacity enforced",
        resource_pod(res(1, 1, ext_a=10)),
        res(0, 0, ext_a=0),
        (f"Insufficient {EXT_A}",),
    ),
    (
        "extended resource capacity enforced for init container",
        resource_pod(res(), init=(res(1, 1, ext_a=10),)),
        res(0, 0, ext_a=0),
        (f"Insufficient {EXT_A}",),
    ),
    (
        "extended resource allocatable enforced",
        resource_pod(res(1, 1, ext_a=1)),
        res(0, 0, ext_a=5),
        (f"Insufficient {EXT_A}",),
    ),
    (
        "extended resource allocatable enforced for init container",
        resource_pod(res(), init=(res(1, 1, ext_a=1),)),
        res(0, 0, ext_a=5),
        (f"Insufficient {EXT_A}",),
    ),
    (
        "extended resource allocatable enforced for multiple containers",
        resource_pod(res(1, 1, ext_a=3), res(1, 1, ext_a=3)),
        res(0, 0, ext_a=2),
        (f"Insufficient {EXT_A}",),
    ),
    (
        "extended resource allocatable admits multiple init containers",
        resource_pod(res(), init=(res(1, 1, ext_a=3), res(1, 1, ext_a=3))),
        res(0, 0, ext_a=2),
        (),
    ),
    (
        "extended resource allocatable enforced for multiple init containers",
        resource_pod(res(), init=(res(1, 1, ext_a=6), res(1, 1, ext_a=3))),
        res(0, 0, ext_a=2),
        (f"Insufficient {EXT_A}",),
    ),
    (
        "extended resource allocatable enforced for unknown resource",
        resource_pod(res(1, 1, ext_b=1)),
        res(0, 0),
        (f"Insufficient {EXT_B}",),
    ),
    (
        "extended resource allocatable enforced for unknown resource for init container",
        resource_pod(res(), init=(res(1, 1, ext_b=1),)),
        res(0, 0),
        (f"Insufficient {EXT_B}",),
    ),
    (
        "kubernetes.io resource capacity enforced",
        resource_pod(res(1, 1, k8s_a=10)),
        res(0, 0),
        (f"Insufficient {K8S_IO_A}",),
    ),
    (
        "kubernetes.io resource capacity enforced for init container",
        resource_pod(res(), init=(res(1, 1, k8s_b=10),)),
        res(0, 0),
        (f"Insufficient {K8S_IO_B}",),
    ),
    (
        "hugepages resource capacity enforced",
        resource_pod(res(1, 1, huge_a=10)),
        res(0, 0, huge_a=0),
        (f"Insufficient {HUGE_A}",),
    ),
    (
        "hugepages resource capacity enforced for init container",
        resource_pod(res(), init=(res(1, 1, huge_a=10),)),
        res(0, 0, huge_a=0),
        (f"Insufficient {HUGE_A}",),
    ),
    (
        "hugepages resource allocatable enforced for multiple containers",
        resource_pod(res(1, 1, huge_a=3), res(1, 1, huge_a=3)),
        res(0, 0, huge_a=2),
        (f"Insufficient {HUGE_A}",),
    ),
    (
        "resources + pod overhead fits",
        resource_pod(res(1, 1), overhead={"cpu": "3m", "memory": "13"}),
        res(5, 5),
        (),
    ),
    (
        "requests + overhead does not fit for memory",
        resource_pod(res(1, 1), overhead={"cpu": "1m", "memory": "15"}),
        res(5, 5),
        ("Insufficient memory",),
    ),
    # TestStorageRequests
    ("due to container scratch disk", resource_pod(res(1, 1)), res(10, 10), ("Insufficient cpu",)),
    ("pod fit", resource_pod(res(1, 1)), res(2, 10), ()),
    (
        "storage ephemeral local storage request exceeds allocatable",
        resource_pod({"ephemeral-storage": "25"}),
        res(2, 2),
        ("Insufficient ephemeral-storage",),
    ),
    ("pod fits", resource_pod({"ephemeral-storage": "10"}), res(2, 2), ()),
]


@pytest.mark.parametrize(
    ("incoming", "existing", "want"),
    [pytest.param(p, e, w, id=name) for name, p, e, w in ENOUGH_REQUESTS],
)
def test_enough_requests_from_fit_test_go(
    incoming: dict[str, Any], existing: dict[str, str], want: tuple[str, ...]
) -> None:
    assert fit_reasons(incoming, existing) == want


NOT_ENOUGH_PODS = {"cpu": "10m", "memory": "20", "pods": "1"}


@pytest.mark.parametrize(
    "incoming",
    [
        pytest.param(pod(containers=[container()]), id="even without specified resources"),
        pytest.param(resource_pod(res(1, 1)), id="even if both resources fit"),
        pytest.param(resource_pod(res(5, 1)), id="even for equal edge case"),
        pytest.param(resource_pod(res(5, 1), init=(res(5, 1),)), id="due to init container"),
    ],
)
def test_not_enough_requests_too_many_pods(incoming: dict[str, Any]) -> None:
    # TestNotEnoughRequests: allocatable pods 1, one pod already there (it uses cpu 5m or 10m).
    reasons = fit_reasons(incoming, res(5, 5), allocatable=NOT_ENOUGH_PODS)
    assert reasons == (TOO_MANY_PODS,)


def test_too_many_pods_and_insufficient_cpu_are_both_reported() -> None:
    incoming = resource_pod(res(6, 1))
    assert fit_reasons(incoming, res(5, 5), allocatable=NOT_ENOUGH_PODS) == (
        TOO_MANY_PODS,
        "Insufficient cpu",
    )


# --- requests -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cpu", "millicores"),
    [("100m", 100), ("0.1", 100), ("1", 1000), ("1.5", 1500), ("0.0001", 1), ("1001u", 2), ("2", 2000)],
)
def test_cpu_counts_in_millicores_rounded_up(cpu: str, millicores: int) -> None:
    # Quantity.MilliValue rounds up: 0.0001 cpu (0.1m) needs one millicore.
    assert pod_facts(pod(requests={"cpu": cpu})).requests == {"cpu": millicores}


@pytest.mark.parametrize(
    ("quantity", "units"),
    [
        ("1Gi", 2**30),
        ("1G", 10**9),
        ("128974848", 128974848),
        ("129M", 129 * 10**6),
        ("1.5", 2),
        ("1e3", 1000),
    ],
)
def test_memory_and_ephemeral_storage_count_in_bytes_rounded_up(quantity: str, units: int) -> None:
    facts = pod_facts(pod(requests={"memory": quantity, "ephemeral-storage": quantity}))
    assert facts.requests == {"memory": units, "ephemeral-storage": units}


def test_requests_are_summed_over_containers_and_raised_to_the_largest_init_container() -> None:
    incoming = pod(
        containers=[
            container("a", {"cpu": "250m", "memory": "1Gi", "volcano.sh/vgpu-memory": "1024"}),
            container("b", {"cpu": "0.5", "memory": "512Mi", "volcano.sh/vgpu-memory": "2048"}),
        ],
        init_containers=[
            container("init-1", {"cpu": "1", "memory": "1Gi"}),
            container("init-2", {"cpu": "500m", "memory": "2Gi", "hugepages-2Mi": "4Mi"}),
        ],
        overhead={"cpu": "100m", "memory": "64Mi"},
    )
    assert pod_facts(incoming).requests == {
        "cpu": 1000 + 100,  # max(250m + 500m, 1, 500m) + overhead
        "memory": 2 * 2**30 + 64 * 2**20,  # max(1.5Gi, 1Gi, 2Gi) + overhead
        "volcano.sh/vgpu-memory": 3072,
        "hugepages-2Mi": 4 * 2**20,
    }


def test_limits_are_not_requests() -> None:
    # The API server defaults requests to limits; the scheduler reads requests only.
    incoming = pod(containers=[{"name": "c", "image": "x", "resources": {"limits": {"cpu": "64"}}}])
    assert pod_facts(incoming).requests == {}


def test_a_quantity_that_does_not_parse_counts_as_nothing() -> None:
    assert pod_facts(pod(requests={"cpu": "lots", "memory": "1Ki"})).requests == {"memory": 1024}


# --- pods ----------------------------------------------------------------------------------------


def test_pods_allocatable_counts_the_existing_pods_plus_this_one() -> None:
    small = {"cpu": "4", "memory": "8Gi", "pods": "2"}
    one = [pod("a", node="n")]
    two = [pod("a", node="n"), pod("b", node="n")]
    incoming = pod(requests={"cpu": "1"})
    assert verdicts(incoming, [node("n", allocatable=small)], one)["n"] == ()
    assert verdicts(incoming, [node("n", allocatable=small)], two)["n"] == (TOO_MANY_PODS,)


def test_a_node_without_pods_allocatable_takes_no_pod() -> None:
    bare = node("n", allocatable={"cpu": "4", "memory": "8Gi"})
    assert verdicts(pod(containers=[container()]), [bare])["n"] == (TOO_MANY_PODS,)


def test_a_pod_requesting_nothing_is_only_checked_for_the_pod_count() -> None:
    full = node("n", allocatable={"cpu": "1", "memory": "1", "pods": "110"})
    existing = [pod("hog", node="n", requests={"cpu": "2", "memory": "2"})]  # already over
    assert verdicts(pod(containers=[container()]), [full], existing)["n"] == ()
    assert verdicts(pod(requests={"cpu": "0", "memory": "0"}), [full], existing)["n"] == ()
    assert verdicts(pod(requests={"cpu": "1m"}), [full], existing)["n"] == (
        "Insufficient cpu",
        "Insufficient memory",  # once anything is requested, every native resource is checked
    )


def test_a_zero_extended_request_still_checks_the_native_resources() -> None:
    # len(podRequest.ScalarResources) != 0 even when the amount is 0.
    full = node("n", allocatable={"cpu": "1", "pods": "110"})
    existing = [pod("hog", node="n", requests={"cpu": "2"})]
    assert verdicts(pod(requests={EXT_A: "0"}), [full], existing)["n"] == ("Insufficient cpu",)


# --- several shortfalls, extended resources ------------------------------------------------------


def test_several_shortfalls_give_several_reasons_in_kube_schedulers_order() -> None:
    small = node(
        "n",
        allocatable={
            "cpu": "1",
            "memory": "1Gi",
            "ephemeral-storage": "1Gi",
            "pods": "110",
            "volcano.sh/vgpu-memory": "1024",
            HUGE_A: "0",
        },
    )
    incoming = pod(
        requests={
            "cpu": "2",
            "memory": "2Gi",
            "ephemeral-storage": "2Gi",
            "volcano.sh/vgpu-memory": "2048",
            HUGE_A: "2Mi",
            "example.com/zzz": "1",
        }
    )
    assert verdicts(incoming, [small])["n"] == (
        "Insufficient cpu",
        "Insufficient memory",
        "Insufficient ephemeral-storage",
        "Insufficient example.com/zzz",
        f"Insufficient {HUGE_A}",
        "Insufficient volcano.sh/vgpu-memory",
    )


def test_extended_resources_count_the_pods_already_on_the_node() -> None:
    gpu = node("n", allocatable={"pods": "110", "volcano.sh/vgpu-memory": "24576"})
    existing = [pod("a", node="n", requests={"volcano.sh/vgpu-memory": "20480"})]
    assert verdicts(pod(requests={"volcano.sh/vgpu-memory": "4096"}), [gpu], existing)["n"] == ()
    assert verdicts(pod(requests={"volcano.sh/vgpu-memory": "4097"}), [gpu], existing)["n"] == (
        "Insufficient volcano.sh/vgpu-memory",
    )


def test_a_resource_without_a_domain_other_than_the_native_ones_is_not_checked() -> None:
    # Only cpu, memory, ephemeral-storage and scalar names (with "/", hugepages-, attachable-volumes-).
    assert verdicts(pod(requests={"gpus": "8", "cpu": "1"}), [node("n")])["n"] == ()
    assert verdicts(pod(requests={"attachable-volumes-aws-ebs": "1"}), [node("n")])["n"] == (
        "Insufficient attachable-volumes-aws-ebs",
    )


# --- only / skip ---------------------------------------------------------------------------------


VGPU = frozenset({"volcano.sh/vgpu-memory", "volcano.sh/vgpu-number"})


def test_skip_leaves_resources_out_and_only_checks_just_those_without_the_pod_count() -> None:
    allocatable = {"cpu": "1", "pods": "1", "volcano.sh/vgpu-memory": "1024", "volcano.sh/vgpu-number": "1"}
    usage = workloads([pod("a", node="n", requests={"volcano.sh/vgpu-number": "1"})]).usage("n")
    request = pod_facts(
        pod(requests={"cpu": "2", "volcano.sh/vgpu-memory": "2048", "volcano.sh/vgpu-number": "1"})
    ).requests
    units = node("n", allocatable=allocatable).allocatable_units
    assert insufficient(request, units, usage) == (
        TOO_MANY_PODS,
        "Insufficient cpu",
        "Insufficient volcano.sh/vgpu-memory",
        "Insufficient volcano.sh/vgpu-number",
    )
    assert insufficient(request, units, usage, skip=VGPU) == (TOO_MANY_PODS, "Insufficient cpu")
    assert insufficient(request, units, usage, only=VGPU) == (
        "Insufficient volcano.sh/vgpu-memory",
        "Insufficient volcano.sh/vgpu-number",
    )
    assert insufficient(request, units, usage, only=frozenset({"memory"})) == ()


def test_the_framework_passes_later_resources_as_skip() -> None:
    gpu = node("n", allocatable={"pods": "110", "volcano.sh/vgpu-memory": "1024"})
    incoming = pod(requests={"volcano.sh/vgpu-memory": "2048"})
    assert verdicts(incoming, [gpu])["n"] == ("Insufficient volcano.sh/vgpu-memory",)
    assert verdicts(incoming, [gpu], later=frozenset({"volcano.sh/vgpu-memory"}))["n"] == ()


def test_the_plugin_is_named_as_in_kube_scheduler() -> None:
    assert node_resources_fit.NAME == "NodeResourcesFit"
