"""PodTopologySpread: DoNotSchedule constraints (podtopologyspread/filtering.go + common.go, 1.20).

Ported from filtering_test.go (TestSingleConstraint, TestMultipleConstraints): Success is no
reason, Unschedulable is REASON, UnschedulableAndUnresolvable is MISSING_LABEL. Those tests run
the plugin alone; so does ``verdicts`` (NodeAffinity is one of the node's own checks, run before by
the allocator), hence the same "in real case, it's false" nodes pass here too.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.engine.scheduling.kit import exists, node, pod, verdicts, workloads
from vgpu_guard.engine.scheduling import pod_facts
from vgpu_guard.engine.scheduling.plugin import Refusal, Snapshot
from vgpu_guard.engine.scheduling.plugins import pod_topology_spread
from vgpu_guard.engine.scheduling.plugins.pod_topology_spread import MISSING_LABEL, REASON

OK: tuple[str, ...] = ()
SKEW = (REASON,)
MISSING = (MISSING_LABEL,)


def spread(max_skew: int, key: str, selector: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule"}
    if selector is not None:
        out["labelSelector"] = selector
    out.update(extra)
    return out


def spread_pod(
    labels: dict[str, str], *constraints: dict[str, Any], name: str = "p", **kw: Any
) -> dict[str, Any]:
    return pod(name, labels=labels, topologySpreadConstraints=list(constraints), **kw)


def on(node_name: str, name: str, *label_keys: str, **kw: Any) -> dict[str, Any]:
    """``st.MakePod().Name(name).Node(node).Label(k, "")...``"""
    return pod(name, node=node_name, labels=dict.fromkeys(label_keys, ""), **kw)


FOO = {"foo": ""}


def four_nodes() -> list[Any]:
    return [
        node("node-a", {"zone": "zone1", "node": "node-a"}),
        node("node-b", {"zone": "zone1", "node": "node-b"}),
        node("node-x", {"zone": "zone2", "node": "node-x"}),
        node("node-y", {"zone": "zone2", "node": "node-y"}),
    ]


SPREAD_2103 = [
    on("node-a", "p-a1", "foo"),
    on("node-a", "p-a2", "foo"),
    on("node-b", "p-b1", "foo"),
    on("node-y", "p-y1", "foo"),
    on("node-y", "p-y2", "foo"),
    on("node-y", "p-y3", "foo"),
]

SINGLE_CONSTRAINT: list[
    tuple[str, dict[str, Any], list[Any], list[dict[str, Any]], list[tuple[str, ...]]]
] = [
    (
        "no existing pods",
        spread_pod(FOO, spread(1, "zone", exists("foo"))),
        four_nodes(),
        [],
        [OK, OK, OK, OK],
    ),
    (
        "no existing pods, incoming pod doesn't match itself",
        spread_pod(FOO, spread(1, "zone", exists("bar"))),
        four_nodes(),
        [],
        [OK, OK, OK, OK],
    ),
    (
        "existing pods in a different namespace do not count",
        spread_pod(FOO, spread(1, "zone", exists("foo"))),
        four_nodes(),
        [
            on("node-a", "p-a1", "foo", namespace="ns1"),
            on("node-a", "p-b1", "foo", namespace="ns2"),
            on("node-x", "p-x1", "foo"),
            on("node-y", "p-y1", "foo"),
        ],
        [OK, OK, SKEW, SKEW],
    ),
    (
        "pods spread across zones as 3/3, all nodes fit",
        spread_pod(FOO, spread(1, "zone", exists("foo"))),
        four_nodes(),
        SPREAD_2103,
        [OK, OK, OK, OK],
    ),
    (
        "pods spread across zones as 1/2 due to absence of label 'zone' on node-b",
        spread_pod(FOO, spread(1, "zone", exists("foo"))),
        [
            node("node-a", {"zone": "zone1", "node": "node-a"}),
            node("node-b", {"zon": "zone1", "node": "node-b"}),
            node("node-x", {"zone": "zone2", "node": "node-x"}),
            node("node-y", {"zone": "zone2", "node": "node-y"}),
        ],
        [
            on("node-a", "p-a1", "foo"),
            on("node-b", "p-b1", "foo"),
            on("node-x", "p-x1", "foo"),
            on("node-y", "p-y1", "foo"),
        ],
        [OK, MISSING, SKEW, SKEW],
    ),
    (
        "pod cannot be scheduled as all nodes don't have label 'rack'",
        spread_pod(FOO, spread(1, "rack", exists("foo"))),
        [
            node("node-a", {"zone": "zone1", "node": "node-a"}),
            node("node-x", {"zone": "zone2", "node": "node-x"}),
        ],
        [],
        [MISSING, MISSING],
    ),
    (
        "pods spread across nodes as 2/1/0/3, only node-x fits",
        spread_pod(FOO, spread(1, "node", exists("foo"))),
        four_nodes(),
        SPREAD_2103,
        [SKEW, SKEW, OK, SKEW],
    ),
    (
        "pods spread across nodes as 2/1/0/3, maxSkew is 2, node-b and node-x fit",
        spread_pod(FOO, spread(2, "node", exists("foo"))),
        four_nodes(),
        SPREAD_2103,
        [SKEW, OK, OK, SKEW],
    ),
    (
        "pods spread across nodes as 2/1/0/3, but pod doesn't match itself",
        spread_pod({"bar": ""}, spread(1, "node", exists("foo"))),
        four_nodes(),
        SPREAD_2103,
        [SKEW, OK, OK, SKEW],
    ),
    (
        "incoming pod has nodeAffinity, pods spread as 2/~1~/~0~/3, hence node-a fits",
        spread_pod(
            FOO,
            spread(1, "node", exists("foo")),
            node_affinity=[
                {"matchExpressions": [{"key": "node", "operator": "In", "values": ["node-a", "node-y"]}]}
            ],
        ),
        four_nodes(),
        SPREAD_2103,
        [OK, OK, OK, SKEW],  # node-b and node-x: "in real case, it's false" (NodeAffinity)
    ),
    (
        "terminating Pods should be excluded",
        spread_pod(FOO, spread(1, "node", exists("foo"))),
        [node("node-a", {"node": "node-a"}), node("node-b", {"node": "node-b"})],
        [on("node-a", "p-a", "foo", deleting=True), on("node-b", "p-b", "foo")],
        [OK, SKEW],
    ),
]


@pytest.mark.parametrize(
    ("incoming", "nodes", "existing", "want"),
    [pytest.param(p, n, e, w, id=name) for name, p, n, e, w in SINGLE_CONSTRAINT],
)
def test_single_constraint_from_filtering_test_go(
    incoming: dict[str, Any], nodes: list[Any], existing: list[dict[str, Any]], want: list[tuple[str, ...]]
) -> None:
    assert list(verdicts(incoming, nodes, existing).values()) == want


ZONE_FOO = spread(1, "zone", exists("foo"))
NODE_FOO = spread(1, "node", exists("foo"))
NODE_BAR = spread(1, "node", exists("bar"))
FOO_BAR = {"foo": "", "bar": ""}

MULTIPLE_CONSTRAINTS: list[
    tuple[str, dict[str, Any], list[Any], list[dict[str, Any]], list[tuple[str, ...]]]
] = [
    (
        "two Constraints on zone and node, spreads = [3/3, 2/1/0/3]",
        spread_pod(FOO, ZONE_FOO, NODE_FOO),
        four_nodes(),
        SPREAD_2103,
        [SKEW, SKEW, OK, SKEW],
    ),
    (
        "two Constraints on zone and node, spreads = [3/4, 2/1/0/4]",
        spread_pod(FOO, ZONE_FOO, NODE_FOO),
        four_nodes(),
        [*SPREAD_2103, on("node-y", "p-y4", "foo")],
        [SKEW, SKEW, SKEW, SKEW],
    ),
    (
        "Constraints hold different labelSelectors, spreads = [1/0, 1/0/0/1]",
        spread_pod(FOO_BAR, ZONE_FOO, NODE_BAR),
        four_nodes(),
        [on("node-a", "p-a1", "foo"), on("node-y", "p-y1", "bar")],
        [SKEW, SKEW, OK, SKEW],
    ),
    (
        "Constraints hold different labelSelectors, spreads = [1/0, 0/0/1/1]",
        spread_pod(FOO_BAR, ZONE_FOO, NODE_BAR),
        four_nodes(),
        [on("node-a", "p-a1", "foo"), on("node-x", "p-x1", "bar"), on("node-y", "p-y1", "bar")],
        [SKEW, SKEW, SKEW, SKEW],
    ),
    (
        "Constraints hold different labelSelectors, spreads = [2/3, 1/0/0/1]",
        spread_pod(FOO_BAR, ZONE_FOO, NODE_BAR),
        four_nodes(),
        [
            on("node-a", "p-a1", "foo"),
            on("node-a", "p-a2", "foo", "bar"),
            on("node-y", "p-y1", "foo"),
            on("node-y", "p-y2", "foo", "bar"),
            on("node-y", "p-y3", "foo"),
        ],
        [SKEW, OK, SKEW, SKEW],
    ),
    (
        "Constraints hold different labelSelectors but pod doesn't match itself on 'zone' constraint",
        spread_pod({"bar": ""}, ZONE_FOO, NODE_BAR),
        four_nodes(),
        [on("node-a", "p-a1", "foo"), on("node-x", "p-x1", "bar"), on("node-y", "p-y1", "bar")],
        [OK, OK, SKEW, SKEW],
    ),
    (
        "two Constraints on zone and node, absence of label 'node' on node-x, spreads = [1/1, 1/0/0/1]",
        spread_pod(FOO, ZONE_FOO, NODE_FOO),
        [
            node("node-a", {"zone": "zone1", "node": "node-a"}),
            node("node-b", {"zone": "zone1", "node": "node-b"}),
            node("node-x", {"zone": "zone2"}),
            node("node-y", {"zone": "zone2", "node": "node-y"}),
        ],
        [on("node-a", "p-a1", "foo"), on("node-y", "p-y3", "foo")],
        [SKEW, OK, MISSING, SKEW],
    ),
]


@pytest.mark.parametrize(
    ("incoming", "nodes", "existing", "want"),
    [pytest.param(p, n, e, w, id=name) for name, p, n, e, w in MULTIPLE_CONSTRAINTS],
)
def test_multiple_constraints_from_filtering_test_go(
    incoming: dict[str, Any], nodes: list[Any], existing: list[dict[str, Any]], want: list[tuple[str, ...]]
) -> None:
    assert list(verdicts(incoming, nodes, existing).values()) == want


# --- domains -------------------------------------------------------------------------------------

WEB = {"app": "web"}
BY_ZONE = spread(1, "zone", {"matchLabels": WEB})
GPU = {"pool": "gpu"}


def zoned(name: str, zone: str, **labels: str) -> Any:
    return node(name, {"zone": zone, "kubernetes.io/hostname": name, **labels})


def web_on(node_name: str, name: str, labels: dict[str, str] | None = None, **kw: Any) -> dict[str, Any]:
    return pod(name, node=node_name, labels=labels or WEB, **kw)


def test_max_skew_by_hostname() -> None:
    nodes = [zoned("h1", "a"), zoned("h2", "a"), zoned("h3", "b")]
    incoming = spread_pod(WEB, spread(1, "kubernetes.io/hostname", {"matchLabels": WEB}))
    existing = [web_on("h1", "w1"), web_on("h2", "w2")]
    assert verdicts(incoming, nodes, existing) == {"h1": SKEW, "h2": SKEW, "h3": OK}
    existing.append(web_on("h3", "w3"))
    assert verdicts(incoming, nodes, existing) == {"h1": OK, "h2": OK, "h3": OK}


def test_max_skew_by_zone_allows_up_to_max_skew_more_than_the_emptiest_zone() -> None:
    nodes = [zoned("a1", "a"), zoned("b1", "b"), zoned("c1", "c")]
    existing = [web_on("a1", "w1"), web_on("a1", "w2"), web_on("b1", "w3")]
    incoming = spread_pod(WEB, spread(2, "zone", {"matchLabels": WEB}))
    assert verdicts(incoming, nodes, existing) == {"a1": SKEW, "b1": OK, "c1": OK}


def test_domains_come_only_from_nodes_matching_the_node_selector() -> None:
    # Zone c has no gpu node: it is not a domain, so its emptiness does not set the minimum.
    nodes = [zoned("a1", "a", **GPU), zoned("b1", "b", **GPU), zoned("c1", "c")]
    existing = [web_on("a1", "w1"), web_on("b1", "w2")]
    with_selector = spread_pod(WEB, BY_ZONE, nodeSelector=GPU)
    assert verdicts(with_selector, nodes, existing) == {"a1": OK, "b1": OK, "c1": OK}
    without = spread_pod(WEB, BY_ZONE)
    assert verdicts(without, nodes, existing) == {"a1": SKEW, "b1": SKEW, "c1": OK}


def test_domains_come_only_from_nodes_matching_required_node_affinity() -> None:
    nodes = [zoned("a1", "a", **GPU), zoned("b1", "b", **GPU), zoned("c1", "c")]
    existing = [web_on("a1", "w1"), web_on("b1", "w2")]
    terms = [{"matchExpressions": [{"key": "pool", "operator": "Exists"}]}]
    incoming = spread_pod(WEB, BY_ZONE, node_affinity=terms)
    assert verdicts(incoming, nodes, existing) == {"a1": OK, "b1": OK, "c1": OK}


def test_1_20_counts_pods_on_non_eligible_nodes_whose_value_names_an_eligible_domain() -> None:
    # a2 does not match the selector, but its zone "a" is a domain (a1 matches): its pods count
    # there (calPreFilterState walks every node; the pair exists). Zone c has no eligible node.
    nodes = [zoned("a1", "a", **GPU), zoned("a2", "a"), zoned("b1", "b", **GPU), zoned("c1", "c")]
    existing = [web_on("a2", "w1"), web_on("a2", "w2"), web_on("c1", "w3"), web_on("c1", "w4")]
    incoming = spread_pod(WEB, BY_ZONE, nodeSelector=GPU)
    snapshot = Snapshot({n.name: n for n in nodes}, workloads(existing))
    state = pod_topology_spread.PLUGIN.prepare(pod_facts(incoming), snapshot)
    assert state is not None and not isinstance(state, Refusal)
    assert [c.counts for c in state] == [Counter({"a": 2, "b": 0})]
    assert [c.minimum for c in state] == [0]  # the critical path, computed once per pod
    result = verdicts(incoming, nodes, existing)
    assert result["a1"] == SKEW  # zone a counts 2 (from a2), zone b 0
    assert result["b1"] == OK


def test_terminating_pods_and_other_namespaces_are_not_counted() -> None:
    nodes = [zoned("a1", "a"), zoned("b1", "b")]
    existing = [
        web_on("a1", "w1", deleting=True),
        web_on("a1", "w2", namespace="other"),
        web_on("b1", "w3"),
    ]
    assert verdicts(spread_pod(WEB, BY_ZONE), nodes, existing) == {"a1": OK, "b1": SKEW}


def test_a_missing_topology_label_is_its_own_reason() -> None:
    nodes = [zoned("a1", "a"), node("bare", {"kubernetes.io/hostname": "bare"})]
    assert verdicts(spread_pod(WEB, BY_ZONE), nodes) == {"a1": OK, "bare": MISSING}
    assert MISSING_LABEL == "node(s) didn't match pod topology spread constraints (missing required label)"


def test_a_node_needs_every_constraints_key_to_be_a_domain() -> None:
    # b1 has a zone but no rack: zone b is no domain, so zone a's count is the minimum.
    nodes = [node("a1", {"zone": "a", "rack": "r1"}), node("b1", {"zone": "b"})]
    incoming = spread_pod(WEB, BY_ZONE, spread(5, "rack", {"matchLabels": WEB}))
    existing = [web_on("a1", "w1")]
    assert verdicts(incoming, nodes, existing) == {"a1": OK, "b1": MISSING}


def test_no_eligible_domain_passes() -> None:
    # The node selector matches no node: no domain, the minimum is MaxInt32, nothing exceeds it.
    nodes = [zoned("a1", "a"), zoned("b1", "b")]
    incoming = spread_pod(WEB, BY_ZONE, nodeSelector={"pool": "none"})
    assert verdicts(incoming, nodes, [web_on("a1", "w1"), web_on("a1", "w2")]) == {"a1": OK, "b1": OK}


def test_schedule_anyway_constraints_are_not_filters() -> None:
    soft = spread(1, "zone", {"matchLabels": WEB}, whenUnsatisfiable="ScheduleAnyway")
    nodes = [zoned("a1", "a"), zoned("b1", "b"), node("bare")]
    existing = [web_on("a1", "w1"), web_on("a1", "w2")]
    assert verdicts(spread_pod(WEB, soft), nodes, existing) == {"a1": OK, "b1": OK, "bare": OK}
    assert pod_facts(spread_pod(WEB, soft)).spread == ()


def test_a_constraint_without_label_selector_matches_no_pod_not_even_itself() -> None:
    nodes = [zoned("a1", "a"), zoned("b1", "b")]
    existing = [web_on("a1", "w1"), web_on("a1", "w2")]
    assert verdicts(spread_pod(WEB, spread(1, "zone", None)), nodes, existing) == {"a1": OK, "b1": OK}


def test_match_label_keys_narrow_the_selector_to_the_pods_own_values() -> None:
    nodes = [zoned("a1", "a"), zoned("b1", "b")]
    existing = [
        web_on("a1", "old-1", labels={"app": "web", "pod-template-hash": "old"}),
        web_on("a1", "old-2", labels={"app": "web", "pod-template-hash": "old"}),
    ]
    incoming = spread_pod(
        {"app": "web", "pod-template-hash": "new"},
        spread(1, "zone", {"matchLabels": WEB}, matchLabelKeys=["pod-template-hash"]),
    )
    assert verdicts(incoming, nodes, existing) == {"a1": OK, "b1": OK}
    plain = spread_pod({"app": "web", "pod-template-hash": "new"}, BY_ZONE)
    assert verdicts(plain, nodes, existing) == {"a1": SKEW, "b1": OK}


# --- later fields ----------------------------------------------------------------------------------


def test_min_domains_makes_the_global_minimum_zero_while_there_are_too_few_domains() -> None:
    nodes = [zoned("a1", "a"), zoned("b1", "b")]
    existing = [web_on("a1", "w1"), web_on("b1", "w2")]
    assert verdicts(spread_pod(WEB, BY_ZONE), nodes, existing) == {"a1": OK, "b1": OK}
    three = spread(1, "zone", {"matchLabels": WEB}, minDomains=3)
    assert verdicts(spread_pod(WEB, three), nodes, existing) == {"a1": SKEW, "b1": SKEW}
    two = spread(1, "zone", {"matchLabels": WEB}, minDomains=2)
    assert verdicts(spread_pod(WEB, two), nodes, existing) == {"a1": OK, "b1": OK}


def test_node_affinity_policy_ignore_counts_every_nodes_domain() -> None:
    # Zone b has no gpu node: Honor (default) leaves it out; Ignore makes its 0 the minimum.
    nodes = [zoned("a1", "a", **GPU), zoned("b1", "b")]
    existing = [web_on("a1", "w1")]
    honor = spread_pod(WEB, BY_ZONE, nodeSelector=GPU)
    assert verdicts(honor, nodes, existing)["a1"] == OK
    ignore = spread_pod(
        WEB, spread(1, "zone", {"matchLabels": WEB}, nodeAffinityPolicy="Ignore"), nodeSelector=GPU
    )
    assert verdicts(ignore, nodes, existing)["a1"] == SKEW


def test_node_taints_policy_honor_leaves_out_nodes_whose_taints_the_pod_does_not_tolerate() -> None:
    taint = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}
    nodes = [zoned("a1", "a"), node("b1", {"zone": "b"}, taints=[taint])]
    existing = [web_on("a1", "w1")]
    ignore = spread_pod(WEB, BY_ZONE)  # nodeTaintsPolicy Ignore is the default
    assert verdicts(ignore, nodes, existing)["a1"] == SKEW
    honor = spread(1, "zone", {"matchLabels": WEB}, nodeTaintsPolicy="Honor")
    assert verdicts(spread_pod(WEB, honor), nodes, existing)["a1"] == OK
    tolerated = spread_pod(
        WEB,
        honor,
        tolerations=[{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}],
    )
    assert verdicts(tolerated, nodes, existing)["a1"] == SKEW


def test_node_taints_policy_honor_ignores_prefer_no_schedule_taints() -> None:
    soft = {"key": "dedicated", "value": "infra", "effect": "PreferNoSchedule"}
    nodes = [zoned("a1", "a"), node("b1", {"zone": "b"}, taints=[soft])]
    honor = spread(1, "zone", {"matchLabels": WEB}, nodeTaintsPolicy="Honor")
    assert verdicts(spread_pod(WEB, honor), nodes, [web_on("a1", "w1")])["a1"] == SKEW


def test_with_the_inclusion_policies_only_eligible_nodes_pods_count() -> None:
    # As releases with nodeInclusionPolicy count: a2 is tainted, so its pods do not count in zone a.
    taint = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}
    nodes = [zoned("a1", "a"), node("a2", {"zone": "a"}, taints=[taint]), zoned("b1", "b")]
    existing = [web_on("a2", "w1"), web_on("a2", "w2"), web_on("b1", "w3")]
    honor = spread(1, "zone", {"matchLabels": WEB}, nodeTaintsPolicy="Honor")
    assert verdicts(spread_pod(WEB, honor), nodes, existing) == {"a1": OK, "a2": OK, "b1": SKEW}
    assert verdicts(spread_pod(WEB, BY_ZONE), nodes, existing) == {"a1": SKEW, "a2": SKEW, "b1": OK}


def test_facts_read_the_constraints_fields() -> None:
    facts = pod_facts(
        spread_pod(
            WEB,
            spread(
                3,
                "zone",
                {"matchLabels": WEB},
                minDomains=2,
                nodeAffinityPolicy="Ignore",
                nodeTaintsPolicy="Honor",
            ),
            spread(1, "kubernetes.io/hostname", None),
        )
    )
    first, second = facts.spread
    assert (first.max_skew, first.topology_key, first.min_domains) == (3, "zone", 2)
    assert (first.honor_node_affinity, first.honor_node_taints) == (False, True)
    assert (second.min_domains, second.honor_node_affinity, second.honor_node_taints) == (None, True, False)
    assert second.selector is None


def test_the_plugin_and_reason_are_kube_schedulers() -> None:
    assert pod_topology_spread.NAME == "PodTopologySpread"
    assert REASON == "node(s) didn't match pod topology spread constraints"
