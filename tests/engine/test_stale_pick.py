"""The device plugin's pick replayed (engine/stale_pick.py, issue 43 item 8): which pod's assignment
``GetPendingPod`` hands to a bound pod's container, and when that pod is one the kubelet never
admits on the node."""

from __future__ import annotations

from vgpu_guard.engine.stale_pick import (
    MAX_UINT64,
    PickPod,
    device_count,
    next_request,
    pick_pod,
    predicate_time,
    stale_picks,
)

NODE = "gpu-0"
ONE = "GPU-a,NVIDIA,12288,0:"
TWO = "GPU-a,NVIDIA,6144,0:GPU-b,NVIDIA,6144,0:"


def pod(
    name: str,
    *,
    time: str | None,
    node: str = "",
    phase: str = "Pending",
    vgpu_node: str = NODE,
    devices: str = ONE,
    bind_phase: str = "allocating",
    namespace: str = "ml",
) -> PickPod:
    return PickPod(namespace, name, f"uid-{name}", node, phase, vgpu_node, time, devices, bind_phase)


def picks(*pods: PickPod) -> list[tuple[str, str, int]]:
    return [(p.stale.name, p.bound.name, p.devices) for p in stale_picks(NODE, pods).picks]


def test_a_pending_pods_older_assignment_is_handed_to_the_bound_pod() -> None:
    stale = pod("discarded", time="1700000000")
    bound = pod("web", time="1700000060", node=NODE)
    found = stale_picks(NODE, [bound, stale])
    assert [(p.stale.key, p.bound.key, p.node, p.devices) for p in found.picks] == [
        ("ml/discarded", "ml/web", NODE, 1)
    ]
    assert found.picks[0].why.startswith("it is not bound to any node")
    assert found.malformed == ()


def test_a_newer_pending_assignment_is_not_picked() -> None:
    assert picks(pod("discarded", time="1700000100"), pod("web", time="1700000060", node=NODE)) == []


def test_a_consumed_or_confirmed_assignment_is_not_picked_and_does_not_ask() -> None:
    bound = pod("web", time="1700000060", node=NODE)
    # The plugin erased every device of the pod it served: its count is 0, it matches no request.
    assert picks(pod("served", time="1700000000", devices=";"), bound) == []
    # A bound pod the plugin confirmed (or failed) is not admitted again: it asks for nothing.
    for phase in ("success", "failed"):
        confirmed = pod("web", time="1700000060", node=NODE, bind_phase=phase)
        assert picks(pod("discarded", time="1700000000"), confirmed) == []


def test_another_nodes_assignment_is_not_picked() -> None:
    other = pod("elsewhere", time="1700000000", vgpu_node="gpu-1")
    assert picks(other, pod("web", time="1700000060", node=NODE)) == []


def test_a_different_device_count_is_not_picked() -> None:
    assert (
        picks(pod("discarded", time="1700000000", devices=TWO), pod("web", time="1700000060", node=NODE))
        == []
    )
    # The count is the pod's total over every container still listed, not its next container's.
    two_containers = pod("discarded", time="1700000000", devices=f"{ONE};{ONE}")
    assert picks(two_containers, pod("web", time="1700000060", node=NODE)) == []
    assert picks(two_containers, pod("web", time="1700000060", node=NODE, devices=TWO)) == [
        ("discarded", "web", 2)
    ]


def test_a_pod_bound_elsewhere_ended_or_running_is_never_served_on_the_node() -> None:
    bound = pod("web", time="1700000060", node=NODE)
    cases = [
        (pod("moved", time="1700000000", node="gpu-1"), "it is bound to node gpu-1"),
        (pod("done", time="1700000000", node=NODE, phase="Succeeded"), "it ended (Succeeded)"),
        (pod("victim", time="1700000000", node=NODE, phase="Running"), "it runs already without the plugin"),
    ]
    for stale, why in cases:
        found = stale_picks(NODE, [stale, bound]).picks
        assert [(p.stale.name, p.bound.name) for p in found] == [(stale.name, "web")]
        assert found[0].why.startswith(why)


def test_two_bound_pods_in_order_are_not_a_stale_pick() -> None:
    # The older bound pod is served first (or they swap, which the ledger's one-pod-per-node rule
    # prevents for our binds): both are admitted on the node, so neither assignment is stale.
    assert picks(pod("a", time="1700000000", node=NODE), pod("b", time="1700000060", node=NODE)) == []


def test_equal_times_follow_the_plugins_tie_break_in_list_order() -> None:
    # getOldestPod starts from the last match in list order and takes only a strictly older one:
    # the last pod wins a tie it is part of ...
    assert picks(pod("a-discarded", time="1700000000"), pod("web", time="1700000000", node=NODE)) == []
    assert picks(pod("a-web", time="1700000000", node=NODE), pod("discarded", time="1700000000")) == [
        ("discarded", "a-web", 1)
    ]
    # ... and when the last is newer, the first of the oldest in list order wins.
    newer = pod("c-other", time="1700000060", node=NODE)
    assert (
        picks(pod("a-web", time="1700000000", node=NODE), pod("b-discarded", time="1700000000"), newer) == []
    )
    assert picks(
        pod("a-discarded", time="1700000000"), pod("b-web", time="1700000000", node=NODE), newer
    ) == [
        ("a-discarded", "b-web", 1),
        ("a-discarded", "c-other", 1),
    ]


def test_list_order_is_the_storage_key_not_the_namespace_then_the_name() -> None:
    # "a-x/s" sorts before "a/b" ('-' < '/'), as etcd and the watch cache list the keys; by
    # (namespace, name) the bound pod a/b would be first and win the tie.
    stale = pod("s", time="1700000000", namespace="a-x")
    bound = pod("b", time="1700000000", node=NODE, namespace="a")
    newer = pod("n", time="1700000060", node=NODE, namespace="b")
    assert picks(bound, stale, newer) == [("s", "b", 1), ("s", "n", 1)]


def test_a_malformed_time_is_reported_for_that_pod_only_and_counts_as_newest() -> None:
    bad = pod("discarded", time="17e8")
    bound = pod("web", time="1700000060", node=NODE)
    found = stale_picks(NODE, [bad, bound, pod("fine", time="1700000090")])
    assert found.picks == ()  # MaxUint64: newer than the bound pod's
    assert [(m.pod.name, m.annotation) for m in found.malformed] == [("discarded", "volcano.sh/vgpu-time")]
    assert "'17e8' is not an unsigned 64-bit decimal number" in found.malformed[0].problem
    # A bound pod whose time is unreadable is newest too: a stale pod with a readable one wins.
    found = stale_picks(NODE, [pod("discarded", time="1700000000"), pod("web", time="-1", node=NODE)])
    assert [(p.stale.name, p.bound.name) for p in found.picks] == [("discarded", "web")]
    assert [m.pod.name for m in found.malformed] == ["web"]


def test_predicate_time_reads_as_parse_uint() -> None:
    assert predicate_time(None) == (MAX_UINT64, None)  # absent: newest, and no problem
    assert predicate_time("1700000000") == (1700000000, None)
    assert predicate_time(str(MAX_UINT64)) == (MAX_UINT64, None)  # what the plugin writes after
    for bad in ("", "+1", "0x10", "1_000", "١٢", str(MAX_UINT64 + 1), " 1"):
        time, problem = predicate_time(bad)
        assert time == MAX_UINT64 and problem is not None, bad
    assert predicate_time("1" * (1024 * 1024 + 1))[1] == "is longer than 1048576 characters"


def test_a_record_the_plugins_decoder_fails_on_is_reported_and_still_counted() -> None:
    assert device_count("GPU-a,NVIDIA:") == (
        1,
        "record 'GPU-a,NVIDIA' has fewer than the four fields UUID,TYPE,memory,cores",
    )
    found = stale_picks(NODE, [pod("bad", time="1700000000", devices="GPU-a,NVIDIA:")])
    assert [(m.pod.name, m.annotation) for m in found.malformed] == [
        ("bad", "volcano.sh/devices-to-allocate")
    ]


def test_counts_and_the_next_request_as_the_plugin_decodes() -> None:
    assert device_count("") == (0, None)
    assert device_count(";;") == (0, None)
    assert device_count(f"{ONE};{TWO}") == (3, None)
    assert device_count("garbage") == (0, None)  # no ',' anywhere: no record
    assert next_request(f";{TWO}") == 2  # the first container entry still listing a device
    assert next_request("GPU-a,OTHER,1,0:") == 0  # only NVIDIA devices are handed out


def test_pick_pod_reads_the_annotations_and_skips_pods_without_a_node() -> None:
    obj = {
        "metadata": {
            "name": "web",
            "namespace": "ml",
            "uid": "u1",
            "annotations": {
                "volcano.sh/vgpu-node": NODE,
                "volcano.sh/vgpu-time": "1700000000",
                "volcano.sh/devices-to-allocate": ONE,
                "volcano.sh/bind-phase": "allocating",
            },
        },
        "spec": {"nodeName": NODE},
        "status": {"phase": "Pending"},
    }
    assert pick_pod(obj) == PickPod("ml", "web", "u1", NODE, "Pending", NODE, "1700000000", ONE, "allocating")
    assert pick_pod({"metadata": {"name": "plain"}}) is None
    assert pick_pod({"metadata": "not a map", "spec": None}) is None
