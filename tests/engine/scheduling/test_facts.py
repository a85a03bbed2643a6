"""What the filters read of a pod (``pod_facts``) and what makes vgpu-guard refuse it; resource
units (``resources``); the pods counted per node (``Workloads``)."""

from __future__ import annotations

import random
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest

from tests.engine.scheduling.kit import container, node, pod, term, workloads
from vgpu_guard.engine.node_terms import NodeSelectorRequirement, NodeSelectorTerm, Toleration
from vgpu_guard.engine.quantity import QuantityError
from vgpu_guard.engine.resources import add_into, amount, scheduler_units
from vgpu_guard.engine.scheduling import pod_facts, unsupported_message
from vgpu_guard.engine.scheduling.facts import AffinityTerm, HostPort, PodFacts, has_required_anti_affinity
from vgpu_guard.engine.scheduling.labels import LabelSelector, Requirement, parse_selector
from vgpu_guard.engine.scheduling.workloads import Workloads


def test_identity_labels_and_node() -> None:
    obj = pod("web-0", namespace="team", labels={"app": "web"}, node="n1")
    obj["metadata"]["labels"]["gen"] = 2
    facts = pod_facts(obj)
    assert (facts.uid, facts.namespace, facts.name, facts.key) == (
        "uid-team-web-0",
        "team",
        "web-0",
        "team/web-0",
    )
    assert facts.labels == {"app": "web", "gen": "2"}
    assert facts.node_name == "n1"
    assert not facts.deleting


def test_namespace_defaults_to_default() -> None:
    assert pod_facts({"metadata": {"name": "x"}, "spec": {}}).namespace == "default"


def test_a_deletion_timestamp_marks_the_pod_deleting() -> None:
    assert pod_facts(pod("p", deleting=True)).deleting


@pytest.mark.parametrize(
    "obj", [{}, {"metadata": [], "spec": "x"}, {"spec": {"containers": "x", "volumes": 3}}]
)
def test_unreadable_pods_read_as_absent_parts(obj: dict[str, Any]) -> None:
    facts = pod_facts(obj)
    assert (facts.requests, facts.host_ports, facts.claims, facts.unsupported) == ({}, (), (), ())


# --- host ports ----------------------------------------------------------------------------------


def test_host_ports_come_from_app_containers_only_with_defaults() -> None:
    facts = pod_facts(
        pod(
            "p",
            containers=[
                container(
                    "a",
                    ports=[
                        {"containerPort": 8080, "hostPort": 80},
                        {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"},
                        {"containerPort": 9090},  # no host port
                        {"containerPort": 1, "hostPort": 0},
                    ],
                ),
                container("b", ports=[{"containerPort": 443, "hostPort": 443, "protocol": "SCTP"}]),
            ],
            init_containers=[container("init", ports=[{"containerPort": 8000, "hostPort": 8000}])],
        )
    )
    assert facts.host_ports == (
        HostPort("0.0.0.0", "TCP", 80),
        HostPort("10.0.0.1", "UDP", 53),
        HostPort("0.0.0.0", "SCTP", 443),
    )


@pytest.mark.parametrize("bad", ["80", 80.0, True, -1, None])
def test_host_ports_that_are_not_positive_integers_are_ignored(bad: Any) -> None:
    facts = pod_facts(pod("p", containers=[container(ports=[{"containerPort": 80, "hostPort": bad}])]))
    assert facts.host_ports == ()


# --- claims, unsupported -------------------------------------------------------------------------


def test_claims_are_the_persistent_volume_claim_volumes_in_order() -> None:
    facts = pod_facts(
        pod(
            "p",
            volumes=[
                {"name": "a", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "b", "emptyDir": {}},
                {"name": "c", "configMap": {"name": "cfg"}},
                {"name": "d", "persistentVolumeClaim": {"claimName": "logs", "readOnly": True}},
                {"name": "e", "persistentVolumeClaim": {}},
            ],
        )
    )
    assert facts.claims == ("data", "logs")
    assert facts.unsupported == ()


def test_resource_claims_are_unsupported() -> None:
    facts = pod_facts(pod("p", resourceClaims=[{"name": "gpu", "resourceClaimName": "shared-gpu"}]))
    assert facts.unsupported == ("dynamic resource allocation (spec.resourceClaims)",)
    assert pod_facts(pod("p", resourceClaims=[])).unsupported == ()


def test_generic_ephemeral_volumes_are_unsupported() -> None:
    ephemeral = {
        "name": "scratch",
        "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}},
    }
    facts = pod_facts(pod("p", volumes=[ephemeral]))
    assert facts.unsupported == ("generic ephemeral volumes (spec.volumes[].ephemeral)",)
    assert facts.claims == ()


def test_inline_cloud_disks_are_unsupported() -> None:
    """VolumeRestrictions and NodeVolumeLimits need every pod's disks and the nodes' attach limits."""
    volumes = [
        {"name": "a", "gcePersistentDisk": {"pdName": "d1"}},
        {"name": "b", "csi": {"driver": "ebs.csi.aws.com"}},
        {"name": "c", "emptyDir": {}},
    ]
    facts = pod_facts(pod("p", volumes=volumes))
    assert facts.unsupported == (
        "inline csi, gcePersistentDisk volumes (VolumeRestrictions, NodeVolumeLimits)",
    )


def test_the_refusal_names_everything_unsupported() -> None:
    facts = pod_facts(
        pod(
            "p",
            resourceClaims=[{"name": "gpu"}],
            volumes=[{"name": "v", "ephemeral": {"volumeClaimTemplate": {}}}],
        )
    )
    assert unsupported_message(facts) == (
        "vgpu-guard does not place pods that use dynamic resource allocation (spec.resourceClaims) and "
        "generic ephemeral volumes (spec.volumes[].ephemeral): it cannot check them the way "
        "kube-scheduler does, and it never binds blindly; schedule this pod with a scheduler that "
        "supports them"
    )
    assert unsupported_message(pod_facts(pod("p"))) is None


# --- node constraints ----------------------------------------------------------------------------


def test_node_selector_affinity_and_tolerations() -> None:
    facts = pod_facts(
        pod(
            "p",
            nodeSelector={"pool": "gpu"},
            node_affinity=[{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}],
            tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
        )
    )
    assert facts.node_selector == {"pool": "gpu"}
    assert facts.node_affinity == (
        NodeSelectorTerm(expressions=(NodeSelectorRequirement("zone", "In", ("a",)),)),
    )
    assert facts.tolerations == (Toleration("dedicated", "Exists", "", "NoSchedule"),)
    assert pod_facts(pod("q")).node_affinity is None  # none required: every node


# --- pod (anti-)affinity -------------------------------------------------------------------------

WEB = {"matchLabels": {"app": "web"}}


def test_affinity_terms_resolve_namespaces_against_the_carrier() -> None:
    facts = pod_facts(
        pod(
            "p",
            namespace="team",
            affinity=[term(WEB, "zone"), term(WEB, "zone", namespaces=["a", "b"])],
            anti_affinity=[
                term(WEB, "kubernetes.io/hostname", namespace_selector={"matchLabels": {"env": "prod"}})
            ],
        )
    )
    own, named = facts.affinity
    assert own == AffinityTerm(parse_selector(WEB), "zone", frozenset({"team"}))
    assert named.namespaces == frozenset({"a", "b"})
    (selected,) = facts.anti_affinity
    # With a namespaceSelector, the own namespace is not implied.
    assert selected.namespaces == frozenset()
    assert selected.namespace_selector == parse_selector({"matchLabels": {"env": "prod"}})


def test_a_term_without_label_selector_keeps_it_absent() -> None:
    (t,) = pod_facts(pod("p", anti_affinity=[term(None, "zone")])).anti_affinity
    assert t.selector is None


def test_preferred_terms_are_not_read() -> None:
    preferred = {
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "podAffinityTerm": term(WEB, "zone")}
            ]
        }
    }
    obj = pod("p")
    obj["spec"]["affinity"] = {**preferred, "podAntiAffinity": preferred["podAffinity"]}
    facts = pod_facts(obj)
    assert facts.affinity == () and facts.anti_affinity == ()


def test_match_label_keys_and_mismatch_label_keys_use_the_carriers_values() -> None:
    facts = pod_facts(
        pod(
            "p",
            labels={"app": "web", "pod-template-hash": "abc", "tenant": "t1"},
            anti_affinity=[
                term(
                    WEB,
                    "zone",
                    matchLabelKeys=["pod-template-hash", "not-a-label"],
                    mismatchLabelKeys=["tenant"],
                )
            ],
        )
    )
    (t,) = facts.anti_affinity
    assert t.selector == LabelSelector(
        (
            Requirement("app", "In", frozenset({"web"})),
            Requirement("pod-template-hash", "In", frozenset({"abc"})),
            Requirement("tenant", "NotIn", frozenset({"t1"})),
        )
    )


def test_label_keys_do_not_turn_a_missing_selector_into_one() -> None:
    (t,) = pod_facts(
        pod("p", labels={"h": "1"}, anti_affinity=[term(None, "zone", matchLabelKeys=["h"])])
    ).anti_affinity
    assert t.selector is None


# --- topology spread -------------------------------------------------------------------------------


def test_spread_reads_do_not_schedule_constraints_with_their_label_keys() -> None:
    facts = pod_facts(
        pod(
            "p",
            labels={"app": "web", "pod-template-hash": "abc"},
            topologySpreadConstraints=[
                {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": WEB,
                 "matchLabelKeys": ["pod-template-hash"]},
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": WEB},
                {"maxSkew": "x", "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule"},
            ],
        )
    )  # fmt: skip
    first, second = facts.spread
    assert (first.max_skew, first.topology_key) == (2, "zone")
    assert first.selector == LabelSelector(
        (
            Requirement("app", "In", frozenset({"web"})),
            Requirement("pod-template-hash", "In", frozenset({"abc"})),
        )
    )
    assert (second.max_skew, second.topology_key, second.selector) == (1, "rack", None)


# --- resource units ------------------------------------------------------------------------------


def test_node_allocatable_in_scheduler_units() -> None:
    info = node("n", allocatable={"cpu": "7500m", "memory": "1.5", "pods": "110", "hugepages-2Mi": "1Gi"})
    assert info.allocatable_units == {"cpu": 7500, "memory": 2, "pods": 110, "hugepages-2Mi": 2**30}


def test_amount_and_scheduler_units() -> None:
    assert amount("cpu", "250m") == 250
    assert amount("cpu", 2) == 2000
    assert amount("memory", "1Ki") == 1024
    assert amount("volcano.sh/vgpu-memory", "12288") == 12288
    assert scheduler_units("cpu", Fraction(1, 3)) == 334  # rounded up, never down
    with pytest.raises(QuantityError):
        amount("cpu", "one")


def test_add_into_adds_and_subtracts() -> None:
    total = {"cpu": 100}
    add_into(total, {"cpu": 50, "memory": 10})
    assert total == {"cpu": 150, "memory": 10}
    add_into(total, {"cpu": 150, "memory": 10}, sign=-1)
    assert total == {"cpu": 0, "memory": 0}


# --- Workloads -----------------------------------------------------------------------------------


def test_workloads_count_requests_ports_and_anti_affinity_per_node() -> None:
    a = pod(
        "a",
        node="n1",
        containers=[container(requests={"cpu": "1"}, ports=[{"containerPort": 1, "hostPort": 80}])],
    )
    b = pod("b", node="n1", requests={"cpu": "500m"}, anti_affinity=[term(WEB, "zone")])
    placed = workloads([a, b])
    usage = placed.usage("n1")
    assert set(usage.pods) == {"uid-default-a", "uid-default-b"}
    assert usage.requested == {"cpu": 1500}
    assert set(usage.ports) == {HostPort("0.0.0.0", "TCP", 80)}
    assert placed.anti_affinity_pods == 1
    assert placed.node_of("uid-default-b") == "n1"
    assert placed.usage("n2").pods == {}


def test_assume_moves_a_pod_and_forget_gives_its_place_back() -> None:
    b = pod("b", node="n1", requests={"cpu": "500m"}, anti_affinity=[term(WEB, "zone")])
    placed = workloads([b])
    placed.assume(pod_facts(b), "n2")
    assert placed.usage("n1").requested == {"cpu": 0} and placed.usage("n1").pods == {}
    assert placed.usage("n2").requested == {"cpu": 500}
    assert placed.anti_affinity_pods == 1
    placed.forget("uid-default-b")
    assert placed.usage("n2").pods == {} and placed.anti_affinity_pods == 0
    placed.forget("uid-default-b")  # unknown: nothing happens
    assert placed.node_of("uid-default-b") is None


def _snapshot(placed: Workloads, nodes: list[str]) -> list[object]:
    return [
        [(n, placed.usage(n).pods, placed.usage(n).requested, +placed.usage(n).ports) for n in nodes],
        placed.anti_affinity_pods,
        sorted((n, sorted(u.pods)) for n, u in placed.nodes_with_pods() if u.pods),
    ]


def test_a_deferred_pod_reads_as_an_assumed_one() -> None:
    """defer + reads == assume + reads, through moves, forgets and re-placements."""
    rng = random.Random(7)
    pods = [
        pod(f"p{i}", node="n1", requests={"cpu": f"{rng.randint(1, 9)}00m"},
            containers=[container(ports=[{"containerPort": 1, "hostPort": 8000 + rng.randint(0, 3)}])]
            if rng.random() < 0.3 else None,
            anti_affinity=[term(WEB, "zone")] if rng.random() < 0.3 else None)
        for i in range(40)
    ]  # fmt: skip
    eager, lazy = Workloads(), Workloads()
    nodes = ["n1", "n2", "n3"]
    for step in range(300):
        p = rng.choice(pods)
        uid, target = p["metadata"]["uid"], rng.choice(nodes)
        if rng.random() < 0.2:
            eager.forget(uid)
            lazy.forget(uid)
        else:
            eager.assume(pod_facts(p), target)
            lazy.defer(uid, target, p, pod_facts)
        assert lazy.node_of(uid) == eager.node_of(uid)
        assert lazy.anti_affinity_pods == eager.anti_affinity_pods
        assert [lazy.epoch(n) for n in nodes] == [eager.epoch(n) for n in nodes]
        if step % 7 == 0:  # reading folds some nodes while others still wait
            read = rng.choice(nodes)
            assert lazy.usage(read).requested == eager.usage(read).requested
    assert _snapshot(lazy, nodes) == _snapshot(eager, nodes)


def _recording(derived: list[str], field: str) -> Callable[[dict[str, Any]], PodFacts]:
    """``pod_facts`` that notes each pod's metadata ``field`` as it derives it."""

    def derive(p: dict[str, Any]) -> PodFacts:
        derived.append(p["metadata"][field])
        return pod_facts(p)

    return derive


def test_a_deferred_pod_is_derived_only_when_its_node_is_read() -> None:
    derived: list[str] = []
    derive = _recording(derived, "name")
    placed = Workloads()
    a = pod("a", node="n1", requests={"cpu": "1"})
    b = pod("b", node="n2", requests={"cpu": "2"}, anti_affinity=[term(WEB, "zone")])
    placed.defer("uid-default-a", "n1", a, derive)
    placed.defer("uid-default-b", "n2", b, derive)
    assert derived == [] and placed.anti_affinity_pods == 1  # read off the raw pod
    assert placed.usage("n1").requested == {"cpu": 1000} and derived == ["a"]
    assert placed.usage("n1").requested == {"cpu": 1000} and derived == ["a"]  # counted once
    placed.forget("uid-default-b")  # never derived, gone without a trace
    assert derived == ["a"] and placed.anti_affinity_pods == 0 and placed.usage("n2").pods == {}


def test_a_deferred_pod_is_derived_from_its_newest_version() -> None:
    derived: list[str] = []
    derive = _recording(derived, "resourceVersion")
    placed = Workloads()
    old = pod("a", node="n1", requests={"cpu": "1"})
    old["metadata"]["resourceVersion"] = "1"
    placed.defer("uid-default-a", "n1", old, derive)
    new = pod("a", node="n1", requests={"cpu": "1"}, labels={"app": "web"})
    new["metadata"]["resourceVersion"] = "2"
    placed.refresh("uid-default-a", new)
    placed.refresh("uid-default-b", new)  # not placed: nothing happens
    assert placed.usage("n1").pods["uid-default-a"].labels == {"app": "web"} and derived == ["2"]
    placed.refresh("uid-default-a", old)  # counted already: the facts stay as derived
    assert placed.usage("n1").pods["uid-default-a"].labels == {"app": "web"} and derived == ["2"]


def test_has_required_anti_affinity_agrees_with_the_facts() -> None:
    shapes: list[Any] = [None, {}, {"podAntiAffinity": None}, {"podAntiAffinity": {}},
                         {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}},
                         {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": "x"}},
                         {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]}},
                         {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{}]}},
                         {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]}}]  # fmt: skip
    for affinity in shapes:
        raw = pod("a", node="n1")
        raw["spec"]["affinity"] = affinity
        assert has_required_anti_affinity(raw) == bool(pod_facts(raw).anti_affinity), affinity
    assert has_required_anti_affinity({"spec": "not a map"}) is False


def test_workloads_index_claims_volumes_and_namespace_labels() -> None:
    claim = {"metadata": {"name": "data", "namespace": "team"}, "spec": {"volumeName": "pv-1"}}
    unbound = {"metadata": {"name": "scratch"}, "spec": {}}
    volume = {"metadata": {"name": "pv-1"}}
    placed = workloads(
        claims=[claim, unbound],
        volumes=[volume],
        namespaces=[{"metadata": {"name": "team", "labels": {"t": 1}}}],
    )
    assert placed.volume_of("team", "data") == volume
    assert placed.volume_of("default", "scratch") is None  # namespace defaults to "default"; unbound
    assert placed.volume_of("default", "data") is None
    assert placed.namespace_labels == {"team": {"t": "1"}}
