"""InterPodAffinity: required pod affinity and anti-affinity (interpodaffinity/filtering.go, 1.20).

Every failure carries two reasons, the general and the specific one, as kube-scheduler's status
does. Cases marked "(filtering_test.go)" are ported from TestRequiredAffinitySingleNode and
TestRequiredAffinityMultipleNodes; all pods are in namespace "default" there (Go's "").
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.engine.scheduling.kit import exists, expr, node, pod, term, verdicts
from vgpu_guard.engine.scheduling.plugins import inter_pod_affinity
from vgpu_guard.engine.scheduling.plugins.inter_pod_affinity import (
    AFFINITY,
    ANTI_AFFINITY,
    EXISTING_ANTI_AFFINITY,
    GENERAL,
)

OK: tuple[str, ...] = ()
AFF = (GENERAL, AFFINITY)
ANTI = (GENERAL, ANTI_AFFINITY)
EXISTING = (GENERAL, EXISTING_ANTI_AFFINITY)

SECURITYSCAN = {"service": "securityscan"}
S1 = {"security": "S1"}
MACHINE1 = node("machine1", {"region": "r1", "zone": "z11"})


def in_(key: str, *values: str) -> dict[str, Any]:
    return expr(key, "In", *values)


def single(incoming: dict[str, Any], *existing: dict[str, Any]) -> tuple[str, ...]:
    return verdicts(incoming, [MACHINE1], existing)["machine1"]


# --- TestRequiredAffinitySingleNode ----------------------------------------------------------------

SINGLE_NODE: list[tuple[str, dict[str, Any], list[dict[str, Any]], tuple[str, ...]]] = [
    (
        "A pod that has no required pod affinity scheduling rules can schedule onto a node with no existing pods",
        pod("p"),
        [],
        OK,
    ),
    (
        "satisfies with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using In operator that matches the existing pod",
        pod("p", labels=S1, affinity=[term(in_("service", "securityscan", "value2"), "region")]),
        [pod("e", node="machine1", labels=SECURITYSCAN)],
        OK,
    ),
    (
        "satisfies the pod with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using not in operator in labelSelector that matches the existing pod",
        pod("p", labels=S1, affinity=[term(expr("service", "NotIn", "securityscan3", "value3"), "region")]),
        [pod("e", node="machine1", labels=SECURITYSCAN)],
        OK,
    ),
    (
        "Does not satisfy the PodAffinity with labelSelector because of diff Namespace",
        pod(
            "p",
            labels=S1,
            affinity=[term(in_("service", "securityscan", "value2"), "", namespaces=["DiffNameSpace"])],
        ),
        [pod("e", namespace="ns", node="machine1", labels=SECURITYSCAN)],
        AFF,
    ),
    (
        "Doesn't satisfy the PodAffinity because of unmatching labelSelector with the existing pod",
        pod("p", labels=SECURITYSCAN, affinity=[term(in_("service", "antivirusscan", "value2"), "")]),
        [pod("e", node="machine1", labels=SECURITYSCAN)],
        AFF,
    ),
    (
        "satisfies the PodAffinity with different label Operators in multiple RequiredDuringSchedulingIgnoredDuringExecution",
        pod(
            "p",
            labels=S1,
            affinity=[
                term(
                    {
                        "matchExpressions": [
                            {"key": "service", "operator": "Exists"},
                            {"key": "wrongkey", "operator": "DoesNotExist"},
                        ]
                    },
                    "region",
                ),
                term(
                    {
                        "matchExpressions": [
                            {"key": "service", "operator": "In", "values": ["securityscan"]},
                            {"key": "service", "operator": "NotIn", "values": ["WrongValue"]},
                        ]
                    },
                    "region",
                ),
            ],
        ),
        [pod("e", node="machine1", labels=SECURITYSCAN)],
        OK,
    ),
    (
        "The labelSelector requirements(items of matchExpressions) are ANDed, the pod cannot schedule onto the node because one of the matchExpression item don't match.",
        pod(
            "p",
            labels=S1,
            affinity=[
                term(
                    {
                        "matchExpressions": [
                            {"key": "service", "operator": "Exists"},
                            {"key": "wrongkey", "operator": "DoesNotExist"},
                        ]
                    },
                    "region",
                ),
                term(
                    {
                        "matchExpressions": [
                            {"key": "service", "operator": "In", "values": ["securityscan2"]},
                            {"key": "service", "operator": "NotIn", "values": ["WrongValue"]},
                        ]
                    },
                    "region",
                ),
            ],
        ),
        [pod("e", node="machine1", labels=SECURITYSCAN)],
        AFF,
    ),
    (
        "satisfies the PodAffinity and PodAntiAffinity with the existing pod",
        pod(
            "p",
            labels=S1,
            affinity=[term(in_("service", "securityscan", "value2"), "region")],
            anti_affinity=[term(in_("service", "antivirusscan", "value2"), "node")],
        ),
        [pod("e", node="machine1", labels=SECURITYSCAN)],
        OK,
    ),
    (
        "satisfies the PodAffinity and PodAntiAffinity and PodAntiAffinity symmetry with the existing pod",
        pod(
            "p",
            labels=S1,
            affinity=[term(in_("service", "securityscan", "value2"), "region")],
            anti_affinity=[term(in_("service", "antivirusscan", "value2"), "node")],
        ),
        [
            pod(
                "e",
                node="machine1",
                labels=SECURITYSCAN,
                anti_affinity=[term(in_("service", "antivirusscan", "value2"), "node")],
            )
        ],
        OK,
    ),
    (
        "satisfies the PodAffinity but doesn't satisfy the PodAntiAffinity with the existing pod",
        pod(
            "p",
            labels=S1,
            affinity=[term(in_("service", "securityscan", "value2"), "region")],
            anti_affinity=[term(in_("service", "securityscan", "value2"), "zone")],
        ),
        [pod("e", node="machine1", labels=SECURITYSCAN)],
        ANTI,
    ),
    (
        "satisfies the PodAffinity and PodAntiAffinity but doesn't satisfy PodAntiAffinity symmetry with the existing pod",
        pod(
            "p",
            labels=SECURITYSCAN,
            affinity=[term(in_("service", "securityscan", "value2"), "region")],
            anti_affinity=[term(in_("service", "antivirusscan", "value2"), "node")],
        ),
        [
            pod(
                "e",
                node="machine1",
                labels=SECURITYSCAN,
                anti_affinity=[term(in_("service", "securityscan", "value2"), "zone")],
            )
        ],
        EXISTING,
    ),
    (
        "pod matches its own Label in PodAffinity and that matches the existing pod Labels",
        pod(
            "p",
            labels=SECURITYSCAN,
            affinity=[term(expr("service", "NotIn", "securityscan", "value2"), "region")],
        ),
        [pod("e", node="machine2", labels=SECURITYSCAN)],  # machine2 is not a node of the cluster
        AFF,
    ),
    (
        "verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity constraints. doesn't satisfy PodAntiAffinity symmetry with the existing pod",
        pod("p", labels=SECURITYSCAN),
        [
            pod(
                "e",
                node="machine1",
                labels=SECURITYSCAN,
                anti_affinity=[term(in_("service", "securityscan", "value2"), "zone")],
            )
        ],
        EXISTING,
    ),
    (
        "verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity constraints. satisfy PodAntiAffinity symmetry with the existing pod",
        pod("p", labels=SECURITYSCAN),
        [
            pod(
                "e",
                node="machine1",
                labels=SECURITYSCAN,
                anti_affinity=[term(expr("service", "NotIn", "securityscan", "value2"), "zone")],
            )
        ],
        OK,
    ),
    (
        "satisfies the PodAntiAffinity with existing pod but doesn't satisfy PodAntiAffinity symmetry with incoming pod",
        pod(
            "p",
            labels=SECURITYSCAN,
            anti_affinity=[term(exists("service"), "region"), term(exists("security"), "region")],
        ),
        [pod("e", node="machine1", labels=S1, anti_affinity=[term(exists("security"), "zone")])],
        ANTI,
    ),
    (
        "PodAntiAffinity symmetry check a1: incoming pod and existing pod partially match each other on AffinityTerms",
        pod(
            "p",
            labels=SECURITYSCAN,
            anti_affinity=[term(exists("service"), "zone"), term(exists("security"), "zone")],
        ),
        [pod("e", node="machine1", labels=S1, anti_affinity=[term(exists("security"), "zone")])],
        ANTI,
    ),
    (
        "PodAntiAffinity symmetry check a2: incoming pod and existing pod partially match each other on AffinityTerms",
        pod("p", labels=S1, anti_affinity=[term(exists("security"), "zone")]),
        [
            pod(
                "e",
                node="machine1",
                labels=SECURITYSCAN,
                anti_affinity=[term(exists("service"), "zone"), term(exists("security"), "zone")],
            )
        ],
        EXISTING,
    ),
    (
        "PodAntiAffinity symmetry check b1: incoming pod and existing pod partially match each other on AffinityTerms",
        pod(
            "p",
            labels={"abc": "", "xyz": ""},
            anti_affinity=[term(exists("abc"), "zone"), term(exists("def"), "zone")],
        ),
        [
            pod(
                "e",
                node="machine1",
                labels={"def": "", "xyz": ""},
                anti_affinity=[term(exists("abc"), "zone"), term(exists("def"), "zone")],
            )
        ],
        ANTI,
    ),
    (
        "PodAntiAffinity symmetry check b2: incoming pod and existing pod partially match each other on AffinityTerms",
        pod(
            "p",
            labels={"def": "", "xyz": ""},
            anti_affinity=[term(exists("abc"), "zone"), term(exists("def"), "zone")],
        ),
        [
            pod(
                "e",
                node="machine1",
                labels={"abc": "", "xyz": ""},
                anti_affinity=[term(exists("abc"), "zone"), term(exists("def"), "zone")],
            )
        ],
        ANTI,
    ),
]


@pytest.mark.parametrize(
    ("incoming", "existing", "want"),
    [pytest.param(p, e, w, id=name[:90]) for name, p, e, w in SINGLE_NODE],
)
def test_required_affinity_single_node_from_filtering_test_go(
    incoming: dict[str, Any], existing: list[dict[str, Any]], want: tuple[str, ...]
) -> None:
    assert single(incoming, *existing) == want


# --- TestRequiredAffinityMultipleNodes -------------------------------------------------------------

RG_CHINA = {"region": "China"}
RG_CHINA_AZ1 = {"region": "China", "az": "az1"}
RG_INDIA = {"region": "India"}


def three_regions() -> list[Any]:
    return [node("nodeA", RG_CHINA), node("nodeB", RG_CHINA_AZ1), node("nodeC", RG_INDIA)]


def abc(*names_zones: tuple[str, str]) -> list[Any]:
    return [node(n, {"region": "r1", "zone": z, "hostname": n}) for n, z in names_zones]


MULTIPLE_NODES: list[tuple[str, dict[str, Any], list[dict[str, Any]], list[Any], list[tuple[str, ...]]]] = [
    (
        "A pod can be scheduled onto all the nodes that have the same topology key & label value with one of them has an existing pod that matches the affinity rules",
        pod("p", affinity=[term(in_("foo", "bar"), "region")]),
        [pod("p1", node="nodeA", labels={"foo": "bar"})],
        three_regions(),
        [OK, OK, AFF],
    ),
    (
        "The first pod of the collection should not be blocked from being scheduled onto any node, even there's no existing pod that matches the rule anywhere.",
        pod(
            "p",
            labels={"foo": "bar", "service": "securityscan"},
            affinity=[term(in_("foo", "bar"), "zone"), term(in_("service", "securityscan"), "zone")],
        ),
        [pod("p1", node="nodeA", labels={"foo": "bar"})],
        [node("nodeA", {"zone": "az1", "hostname": "h1"}), node("nodeB", {"zone": "az2", "hostname": "h2"})],
        [OK, OK],
    ),
    (
        "The first pod of the collection can only be scheduled on nodes labelled with the requested topology keys",
        pod(
            "p",
            labels={"foo": "bar", "service": "securityscan"},
            affinity=[term(in_("foo", "bar"), "zone"), term(in_("service", "securityscan"), "zone")],
        ),
        [pod("p1", node="nodeA", labels={"foo": "bar"})],
        [
            node("nodeA", {"zoneLabel": "az1", "hostname": "h1"}),
            node("nodeB", {"zoneLabel": "az2", "hostname": "h2"}),
        ],
        [AFF, AFF],
    ),
    (
        "NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the inter pod affinity rule. The pod can not be scheduled onto nodeA and nodeB.",
        pod("p", anti_affinity=[term(in_("foo", "abc"), "region")]),
        [pod("e", node="nodeA", labels={"foo": "abc"})],
        [
            node("nodeA", {"region": "r1", "hostname": "nodeA"}),
            node("nodeB", {"region": "r1", "hostname": "nodeB"}),
        ],
        [ANTI, ANTI],
    ),
    (
        "This test ensures that anti-affinity matches a pod when any term of the anti-affinity rule matches a pod.",
        pod(
            "p",
            anti_affinity=[term(in_("foo", "abc"), "region"), term(in_("service", "securityscan"), "zone")],
        ),
        [pod("e", node="nodeA", labels={"foo": "abc", "service": "securityscan"})],
        abc(("nodeA", "z1"), ("nodeB", "z2")),
        [ANTI, ANTI],
    ),
    (
        "The pod can not be scheduled onto nodeA and nodeB but can be scheduled onto nodeC",
        pod("p", anti_affinity=[term(in_("foo", "abc"), "region")]),
        [pod("e", node="nodeA", labels={"foo": "abc"})],
        three_regions(),
        [ANTI, ANTI, OK],
    ),
    (
        "nodeC has an existing pod that match the inter pod affinity rule but in different namespace",
        pod("p", namespace="NS1", labels={"foo": "123"}, anti_affinity=[term(in_("foo", "bar"), "region")]),
        [
            pod("e1", namespace="NS1", node="nodeA", labels={"foo": "bar"}),
            pod("e2", namespace="NS2", node="nodeC", anti_affinity=[term(in_("foo", "123"), "region")]),
        ],
        three_regions(),
        [ANTI, ANTI, OK],
    ),
    (
        "Test existing pod's anti-affinity: if an existing pod has a term with invalid topologyKey, labelSelector of the term is firstly checked, and then topologyKey of the term is also checked",
        pod("p", labels={"foo": ""}),
        [pod("e", node="nodeA", anti_affinity=[term(exists("foo"), "invalid-node-label")])],
        abc(("nodeA", "z1"), ("nodeB", "z1")),
        [OK, OK],
    ),
    (
        "Test incoming pod's anti-affinity: even if labelSelector matches, we still check if topologyKey matches",
        pod("p", anti_affinity=[term(exists("foo"), "invalid-node-label")]),
        [pod("e", node="nodeA", labels={"foo": ""})],
        abc(("nodeA", "z1"), ("nodeB", "z1")),
        [OK, OK],
    ),
    (
        "Test existing pod's anti-affinity: incoming pod wouldn't considered as a fit as it violates each existingPod's terms on all nodes",
        pod("p", labels={"foo": "", "bar": ""}),
        [
            pod("e1", node="nodeA", anti_affinity=[term(exists("foo"), "zone")]),
            pod("e2", node="nodeA", anti_affinity=[term(exists("bar"), "region")]),
        ],
        abc(("nodeA", "z1"), ("nodeB", "z2")),
        [EXISTING, EXISTING],
    ),
    (
        "Test incoming pod's anti-affinity: incoming pod wouldn't considered as a fit as it at least violates one anti-affinity rule of existingPod",
        pod("p", anti_affinity=[term(exists("foo"), "zone"), term(exists("bar"), "region")]),
        [pod("e1", node="nodeA", labels={"foo": ""}), pod("e2", node="nodeB", labels={"bar": ""})],
        abc(("nodeA", "z1"), ("nodeB", "z2")),
        [ANTI, ANTI],
    ),
    (
        "Test existing pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a single term match - case when one term has invalid topologyKey",
        pod("p", labels={"foo": "", "bar": ""}),
        [
            pod(
                "e",
                node="nodeA",
                anti_affinity=[term(exists("foo"), "invalid-node-label"), term(exists("bar"), "zone")],
            )
        ],
        abc(("nodeA", "z1"), ("nodeB", "z2")),
        [EXISTING, OK],
    ),
    (
        "Test incoming pod's affinity: firstly check if all affinityTerms match, and then check if all topologyKeys match",
        pod("p", affinity=[term(exists("foo"), "region"), term(exists("bar"), "zone")]),
        [pod("pod1", node="nodeA", labels={"foo": "", "bar": ""})],
        abc(("nodeA", "z1"), ("nodeB", "z1")),
        [OK, OK],
    ),
    (
        "Test incoming pod's affinity: firstly check if all affinityTerms match, and then check if all topologyKeys match, and the match logic should be satisfied on the same pod",
        pod("p", affinity=[term(exists("foo"), "region"), term(exists("bar"), "zone")]),
        [pod("pod1", node="nodeA", labels={"foo": ""}), pod("pod2", node="nodeB", labels={"bar": ""})],
        abc(("nodeA", "z1"), ("nodeB", "z2")),
        [AFF, AFF],
    ),
]


@pytest.mark.parametrize(
    ("incoming", "existing", "nodes", "want"),
    [pytest.param(p, e, n, w, id=name[:90]) for name, p, e, n, w in MULTIPLE_NODES],
)
def test_required_affinity_multiple_nodes_from_filtering_test_go(
    incoming: dict[str, Any], existing: list[dict[str, Any]], nodes: list[Any], want: list[tuple[str, ...]]
) -> None:
    assert list(verdicts(incoming, nodes, existing).values()) == want


# --- affinity ------------------------------------------------------------------------------------

ZONES = [
    node("a1", {"zone": "a", "kubernetes.io/hostname": "a1"}),
    node("a2", {"zone": "a", "kubernetes.io/hostname": "a2"}),
    node("b1", {"zone": "b", "kubernetes.io/hostname": "b1"}),
    node("bare", {"kubernetes.io/hostname": "bare"}),
]
WEB = {"app": "web"}


def test_required_affinity_follows_the_matching_pods_domain() -> None:
    incoming = pod("cache", labels={"app": "cache"}, affinity=[term({"matchLabels": WEB}, "zone")])
    result = verdicts(incoming, ZONES, [pod("web", node="a2", labels=WEB)])
    assert result == {"a1": OK, "a2": OK, "b1": AFF, "bare": AFF}


def test_required_affinity_without_any_matching_pod_fails_everywhere() -> None:
    incoming = pod("cache", labels={"app": "cache"}, affinity=[term({"matchLabels": WEB}, "zone")])
    result = verdicts(incoming, ZONES, [pod("other", node="a1", labels={"app": "db"})])
    assert set(result.values()) == {AFF}


def test_the_first_pod_of_a_group_may_go_anywhere_that_has_the_topology_key() -> None:
    incoming = pod("web-0", labels=WEB, affinity=[term({"matchLabels": WEB}, "zone")])
    assert verdicts(incoming, ZONES) == {"a1": OK, "a2": OK, "b1": OK, "bare": AFF}


def test_the_first_pod_exception_ends_once_one_matching_pod_exists_anywhere() -> None:
    incoming = pod("web-1", labels=WEB, affinity=[term({"matchLabels": WEB}, "zone")])
    result = verdicts(incoming, ZONES, [pod("web-0", node="b1", labels=WEB)])
    assert result == {"a1": AFF, "a2": AFF, "b1": OK, "bare": AFF}


def test_the_first_pod_exception_needs_the_pod_to_match_all_its_terms() -> None:
    incoming = pod(
        "web-0", labels=WEB, affinity=[term({"matchLabels": WEB}, "zone"), term(exists("tier"), "zone")]
    )
    assert set(verdicts(incoming, ZONES).values()) == {AFF}


def test_the_pod_itself_is_not_counted_when_it_is_already_assumed() -> None:
    # A pod reserved on a node by an earlier pass is not its own group's "existing" member.
    web = pod("web-0", labels=WEB, affinity=[term({"matchLabels": WEB}, "zone")])
    placed = pod("web-0", labels=WEB, node="a1", affinity=[term({"matchLabels": WEB}, "zone")])
    assert verdicts(web, ZONES, [placed]) == {"a1": OK, "a2": OK, "b1": OK, "bare": AFF}


def test_a_missing_topology_key_fails_affinity_even_with_matching_pods_elsewhere() -> None:
    incoming = pod("cache", affinity=[term({"matchLabels": WEB}, "rack")])
    racked = node("racked", {"rack": "r1"})
    result = verdicts(incoming, [*ZONES, racked], [pod("web", node="racked", labels=WEB)])
    assert result == {"a1": AFF, "a2": AFF, "b1": AFF, "bare": AFF, "racked": OK}


def test_pods_on_nodes_outside_the_view_do_not_count() -> None:
    incoming = pod("cache", affinity=[term({"matchLabels": WEB}, "zone")])
    assert set(verdicts(incoming, ZONES, [pod("web", node="gone", labels=WEB)]).values()) == {AFF}


# --- anti-affinity ---------------------------------------------------------------------------------


def test_anti_affinity_of_the_incoming_pod_blocks_the_whole_domain() -> None:
    incoming = pod("web-1", labels=WEB, anti_affinity=[term({"matchLabels": WEB}, "zone")])
    result = verdicts(incoming, ZONES, [pod("web-0", node="a1", labels=WEB)])
    assert result == {"a1": ANTI, "a2": ANTI, "b1": OK, "bare": OK}


def test_anti_affinity_by_hostname_blocks_only_that_node() -> None:
    incoming = pod("web-1", labels=WEB, anti_affinity=[term({"matchLabels": WEB}, "kubernetes.io/hostname")])
    result = verdicts(incoming, ZONES, [pod("web-0", node="a1", labels=WEB)])
    assert result == {"a1": ANTI, "a2": OK, "b1": OK, "bare": OK}


def test_anti_affinity_matches_terminating_pods_too() -> None:
    # The scheduler's cache holds a pod until it is gone, deletionTimestamp or not.
    incoming = pod("web-1", labels=WEB, anti_affinity=[term({"matchLabels": WEB}, "zone")])
    result = verdicts(incoming, ZONES, [pod("web-0", node="b1", labels=WEB, deleting=True)])
    assert result["b1"] == ANTI


def test_existing_pods_anti_affinity_is_symmetric() -> None:
    guard = pod(
        "guard", node="a1", labels={"app": "guard"}, anti_affinity=[term({"matchLabels": WEB}, "zone")]
    )
    result = verdicts(pod("web", labels=WEB), ZONES, [guard])
    assert result == {"a1": EXISTING, "a2": EXISTING, "b1": OK, "bare": OK}
    assert verdicts(pod("db", labels={"app": "db"}), ZONES, [guard]) == dict.fromkeys(
        ("a1", "a2", "b1", "bare"), OK
    )


def test_affinity_is_reported_before_anti_affinity_and_before_existing_anti_affinity() -> None:
    guard = pod("guard", node="b1", anti_affinity=[term({"matchLabels": WEB}, "zone")])
    incoming = pod(
        "web",
        labels=WEB,
        affinity=[term({"matchLabels": {"app": "db"}}, "zone")],
        anti_affinity=[term({"matchLabels": {"app": "x"}}, "zone")],
    )
    existing = [guard, pod("db", node="a1", labels={"app": "db"}), pod("x", node="b1", labels={"app": "x"})]
    result = verdicts(incoming, ZONES, existing)
    assert result == {"a1": OK, "a2": OK, "b1": AFF, "bare": AFF}
    incoming_anti = pod("web", labels=WEB, anti_affinity=[term({"matchLabels": {"app": "x"}}, "zone")])
    assert verdicts(incoming_anti, ZONES, existing)["b1"] == ANTI


# --- namespaces ----------------------------------------------------------------------------------

TEAMS = [
    {"metadata": {"name": "team-a", "labels": {"team": "a"}}},
    {"metadata": {"name": "team-b", "labels": {"team": "b"}}},
    {"metadata": {"name": "default"}},
]


def anti(**kw: Any) -> dict[str, Any]:
    return pod("web-1", labels=WEB, anti_affinity=[term({"matchLabels": WEB}, "zone", **kw)])


def blocked(incoming: dict[str, Any], other_namespace: str, **kw: Any) -> bool:
    existing = [pod("web-0", namespace=other_namespace, node="a1", labels=WEB)]
    return verdicts(incoming, ZONES, existing, namespaces=TEAMS, **kw)["a1"] == ANTI


def test_a_term_without_namespaces_means_the_pods_own_namespace() -> None:
    assert blocked(anti(), "default")
    assert not blocked(anti(), "team-a")


def test_term_namespaces_replace_the_own_namespace() -> None:
    assert blocked(anti(namespaces=["team-a", "team-b"]), "team-a")
    assert not blocked(anti(namespaces=["team-a"]), "default")


def test_namespace_selector_matches_namespaces_by_their_labels() -> None:
    selector = anti(namespace_selector={"matchLabels": {"team": "a"}})
    assert blocked(selector, "team-a")
    assert not blocked(selector, "team-b")
    assert not blocked(selector, "default")  # with a selector, the own namespace is not implied


def test_namespace_selector_and_namespaces_are_a_union() -> None:
    both = anti(namespaces=["team-b"], namespace_selector={"matchLabels": {"team": "a"}})
    assert blocked(both, "team-a")
    assert blocked(both, "team-b")
    assert not blocked(both, "default")


def test_an_empty_namespace_selector_matches_every_namespace() -> None:
    everywhere = anti(namespace_selector={})
    assert blocked(everywhere, "team-a")
    assert blocked(everywhere, "unlisted")  # a namespace we have no labels for


def test_existing_pods_namespace_selector_is_matched_against_the_incoming_pods_namespace() -> None:
    guard = pod(
        "guard",
        namespace="team-b",
        node="a1",
        anti_affinity=[term({"matchLabels": WEB}, "zone", namespace_selector={"matchLabels": {"team": "a"}})],
    )
    from_a = pod("web", namespace="team-a", labels=WEB)
    from_default = pod("web", namespace="default", labels=WEB)
    assert verdicts(from_a, ZONES, [guard], namespaces=TEAMS)["a1"] == EXISTING
    assert verdicts(from_default, ZONES, [guard], namespaces=TEAMS)["a1"] == OK


# --- selectors -----------------------------------------------------------------------------------


def test_a_missing_label_selector_matches_no_pod() -> None:
    incoming_anti = pod("p", anti_affinity=[term(None, "zone")])
    assert verdicts(incoming_anti, ZONES, [pod("x", node="a1", labels=WEB)])["a1"] == OK
    incoming_affinity = pod("p", labels=WEB, affinity=[term(None, "zone")])
    # Nothing matches, not even the pod itself: no first-pod exception either.
    assert set(verdicts(incoming_affinity, ZONES, [pod("x", node="a1", labels=WEB)]).values()) == {AFF}


def test_an_empty_label_selector_matches_every_pod_of_the_namespaces() -> None:
    incoming = pod("p", anti_affinity=[term({}, "zone")])
    result = verdicts(incoming, ZONES, [pod("x", node="a1"), pod("y", namespace="other", node="b1")])
    assert result == {"a1": ANTI, "a2": ANTI, "b1": OK, "bare": OK}


def test_match_label_keys_add_the_carriers_own_values() -> None:
    # matchLabelKeys (1.29+): app=web and the pod's own pod-template-hash.
    incoming = pod(
        "web-new",
        labels={"app": "web", "pod-template-hash": "new"},
        anti_affinity=[term({"matchLabels": WEB}, "zone", matchLabelKeys=["pod-template-hash"])],
    )
    old = pod("web-old", node="a1", labels={"app": "web", "pod-template-hash": "old"})
    new = pod("web-new-0", node="b1", labels={"app": "web", "pod-template-hash": "new"})
    assert verdicts(incoming, ZONES, [old, new]) == {"a1": OK, "a2": OK, "b1": ANTI, "bare": OK}


def test_mismatch_label_keys_exclude_the_carriers_own_values() -> None:
    # mismatchLabelKeys: keep away from other tenants' pods, not from the own tenant's.
    incoming = pod(
        "job",
        labels={"tenant": "a"},
        anti_affinity=[term(exists("tenant"), "zone", mismatchLabelKeys=["tenant"])],
    )
    mine = pod("mine", node="a1", labels={"tenant": "a"})
    theirs = pod("theirs", node="b1", labels={"tenant": "b"})
    assert verdicts(incoming, ZONES, [mine, theirs]) == {"a1": OK, "a2": OK, "b1": ANTI, "bare": OK}


def test_the_plugin_and_reasons_are_kube_schedulers() -> None:
    assert inter_pod_affinity.NAME == "InterPodAffinity"
    assert GENERAL == "node(s) didn't match pod affinity/anti-affinity"
    assert AFFINITY == "node(s) didn't match pod affinity rules"
    assert ANTI_AFFINITY == "node(s) didn't match pod anti-affinity rules"
    assert EXISTING_ANTI_AFFINITY == "node(s) didn't satisfy existing pods anti-affinity rules"
