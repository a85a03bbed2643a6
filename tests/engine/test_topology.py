"""IB cluster membership, pins, and stamping into every nodeSelectorTerm."""

from __future__ import annotations

import copy
from typing import Any

from tests.builders import gpu_node, pod, view_of
from vgpu_guard.engine.config import TopologySettings
from vgpu_guard.engine.topology import allowed_clusters, ib_clusters, stamp_cluster

LABEL = "example.com/ib-cluster"
SETTINGS = TopologySettings(ib_cluster_label=LABEL)


def two_clusters() -> Any:
    nodes = [gpu_node(f"a{i}", labels={LABEL: "ib-a"}) for i in range(4)]
    nodes += [gpu_node(f"b{i}", labels={LABEL: "ib-b"}) for i in range(2)]
    nodes.append(gpu_node("loose"))
    return view_of(nodes)


def test_clusters_from_labels() -> None:
    clusters = ib_clusters(two_clusters(), SETTINGS)
    assert dict(clusters.members) == {
        "ib-a": frozenset({"a0", "a1", "a2", "a3"}),
        "ib-b": frozenset({"b0", "b1"}),
    }


def test_clusters_from_hypernodes_of_a_tier() -> None:
    hypernodes = [
        {
            "apiVersion": "topology.volcano.sh/v1alpha1",
            "kind": "HyperNode",
            "metadata": {"name": "s0"},
            "spec": {
                "tier": 1,
                "members": [{"type": "Node", "selector": {"regexMatch": {"pattern": "a[01]"}}}],
            },
        },
        {
            "apiVersion": "topology.volcano.sh/v1alpha1",
            "kind": "HyperNode",
            "metadata": {"name": "s1"},
            "spec": {
                "tier": 1,
                "members": [
                    {"type": "Node", "selector": {"exactMatch": {"name": "a2"}}},
                    {"type": "Node", "selector": {"labelMatch": {"matchLabels": {"rack": "r9"}}}},
                ],
            },
        },
        {
            "apiVersion": "topology.volcano.sh/v1alpha1",
            "kind": "HyperNode",
            "metadata": {"name": "ib-x"},
            "spec": {
                "tier": 2,
                "members": [{"type": "HyperNode", "selector": {"regexMatch": {"pattern": "s.*"}}}],
            },
        },
        {
            "apiVersion": "topology.volcano.sh/v1alpha1",
            "kind": "HyperNode",
            "metadata": {"name": "loop"},
            "spec": {
                "tier": 2,
                "members": [{"type": "HyperNode", "selector": {"exactMatch": {"name": "loop"}}}],
            },
        },
    ]
    nodes = [gpu_node(n) for n in ("a0", "a1", "a2")] + [gpu_node("z", labels={"rack": "r9"})]
    view = view_of([*nodes, *hypernodes])
    clusters = ib_clusters(view, TopologySettings(hyper_node_tier=2))
    assert dict(clusters.members) == {"ib-x": frozenset({"a0", "a1", "a2", "z"})}
    assert clusters.by_label is None


def test_stamp_into_a_pod_without_affinity() -> None:
    clusters = ib_clusters(two_clusters(), SETTINGS)
    obj = pod({"cpu": "1"})
    assert stamp_cluster(obj, "ib-b", clusters) is True
    assert obj["spec"]["affinity"] == {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": LABEL, "operator": "In", "values": ["ib-b"]}]}
                ]
            }
        }
    }
    again = copy.deepcopy(obj)
    assert stamp_cluster(again, "ib-b", clusters) is False and again == obj


def test_stamp_is_anded_into_every_existing_term_and_keeps_everything_else() -> None:
    clusters = ib_clusters(two_clusters(), SETTINGS)
    obj = pod({"cpu": "1"})
    obj["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b0"]}]},
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 1,
                    "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]},
                }
            ],
        },
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []},
    }
    stamp_cluster(obj, "ib-a", clusters)
    terms = obj["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    wanted = {"key": LABEL, "operator": "In", "values": ["ib-a"]}
    assert terms[0]["matchExpressions"] == [{"key": "gpu", "operator": "In", "values": ["a100"]}, wanted]
    assert terms[1] == {
        "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b0"]}],
        "matchExpressions": [wanted],
    }
    assert (
        obj["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0][
            "weight"
        ]
        == 1
    )
    assert "podAntiAffinity" in obj["spec"]["affinity"]


def test_stamp_by_hypernode_uses_node_names() -> None:
    hypernode = {
        "apiVersion": "topology.volcano.sh/v1alpha1",
        "kind": "HyperNode",
        "metadata": {"name": "ib-x"},
        "spec": {"tier": 1, "members": [{"type": "Node", "selector": {"regexMatch": {"pattern": "a.*"}}}]},
    }
    view = view_of([gpu_node("a0"), gpu_node("a1"), gpu_node("b0"), hypernode])
    clusters = ib_clusters(view, TopologySettings(hyper_node_tier=1))
    obj = pod({"cpu": "1"})
    stamp_cluster(obj, "ib-x", clusters)
    assert obj["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a0", "a1"]}]}
        ]
    }


def test_allowed_clusters_follow_pins() -> None:
    clusters = ib_clusters(two_clusters(), SETTINGS)
    assert allowed_clusters(pod({"cpu": "1"}), clusters) == {"ib-a", "ib-b"}
    assert allowed_clusters(pod({"cpu": "1"}, nodeSelector={LABEL: "ib-b"}), clusters) == {"ib-b"}
    obj = pod({"cpu": "1"})
    obj["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": LABEL, "operator": "NotIn", "values": ["ib-a"]}]}
                ]
            }
        }
    }
    assert allowed_clusters(obj, clusters) == {"ib-b"}
    # Terms are ORed: a second term without a cluster requirement leaves every cluster open.
    obj["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ].append({"matchExpressions": [{"key": "gpu", "operator": "Exists"}]})
    assert allowed_clusters(obj, clusters) == {"ib-a", "ib-b"}


def test_garbage_affinity_is_not_stamped_and_never_raises() -> None:
    clusters = ib_clusters(two_clusters(), SETTINGS)
    obj = pod({"cpu": "1"})
    obj["spec"]["affinity"] = "nonsense"
    assert stamp_cluster(obj, "ib-a", clusters) is False
    assert allowed_clusters(obj, clusters) == {"ib-a", "ib-b"}
