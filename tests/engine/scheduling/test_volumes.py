"""VolumeBinding (bound claims only; the rest refused) and VolumeZone, as kube-scheduler 1.20 has them.

volumebinding/volume_binding.go PreFilter fails the pod on every node for a claim that does not
exist or is being deleted (``podHasPVCs``, every volume first), then for claims not fully bound
(``GetPodVolumes``: a claim is bound when it names a volume *and* carries
``pv.kubernetes.io/bind-completed``). vgpu-guard does not bind volumes, so every unbound claim is
refused. Ported cases: volume_binding_test.go (TestVolumeBinding) and volume_zone_test.go
(TestSingleZone, TestMultiZone).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.engine.scheduling.kit import node, pod, verdicts, workloads
from vgpu_guard.engine.scheduling import pod_facts
from vgpu_guard.engine.scheduling.plugin import Refusal, Snapshot, rejected
from vgpu_guard.engine.scheduling.plugins import volume_binding, volume_zone
from vgpu_guard.engine.scheduling.plugins.volume_binding import CONFLICT
from vgpu_guard.engine.scheduling.plugins.volume_zone import REASON as NO_ZONE

OK: tuple[str, ...] = ()
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"


def claim(
    name: str,
    volume: str = "",
    *,
    namespace: str = "default",
    bind_completed: bool | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    """volume_binding_test.go's ``makePVC``: a claim naming a volume is bound (annotated) by default."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if bind_completed is None:
        bind_completed = bool(volume)
    if bind_completed:
        metadata["annotations"] = {BIND_COMPLETED: "yes"}
    if deleting:
        metadata["deletionTimestamp"] = "2025-06-12T19:00:00Z"
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata,
        "spec": {"volumeName": volume, "storageClassName": "wait"}
        if volume
        else {"storageClassName": "wait"},
    }


def volume(
    name: str, labels: dict[str, str] | None = None, *, node_terms: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if node_terms is not None:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": node_terms}}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": spec,
    }


def claim_pod(*claims: str, **kw: Any) -> dict[str, Any]:
    volumes = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    return pod("pod-a", volumes=volumes, **kw)


def hostname_terms(*hosts: str) -> list[dict[str, Any]]:
    return [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": list(hosts)}]}
    ]


NODES = [node("n1", {"kubernetes.io/hostname": "n1"}), node("n2", {"kubernetes.io/hostname": "n2"})]


def everywhere(incoming: dict[str, Any], **kw: Any) -> set[tuple[str, ...]]:
    """The distinct verdicts over NODES."""
    return set(verdicts(incoming, NODES, **kw).values())


def unbound(name: str) -> str:
    return (
        f'persistentvolumeclaim "{name}" is not bound yet: binding volumes is left to kube-scheduler, '
        "so vgpu-guard does not place this pod; bind the claim first or let the pod's volumes be bound "
        "by a scheduler that provisions them"
    )


# --- VolumeBinding: refusals ---------------------------------------------------------------------


def test_pod_without_claims_is_not_checked() -> None:
    assert everywhere(pod("pod-a", volumes=[{"name": "scratch", "emptyDir": {}}])) == {OK}


def test_all_bound() -> None:
    assert everywhere(claim_pod("pvc-a"), claims=[claim("pvc-a", "pv-a")], volumes=[volume("pv-a")]) == {OK}


def test_pvc_does_not_exist() -> None:
    assert everywhere(claim_pod("pvc-a")) == {('persistentvolumeclaim "pvc-a" not found',)}


def test_part_of_pvcs_do_not_exist() -> None:
    result = everywhere(
        claim_pod("pvc-a", "pvc-b"), claims=[claim("pvc-a", "pv-a")], volumes=[volume("pv-a")]
    )
    assert result == {('persistentvolumeclaim "pvc-b" not found',)}


def test_a_claim_of_another_namespace_is_not_the_pods() -> None:
    result = everywhere(
        claim_pod("pvc-a"), claims=[claim("pvc-a", "pv-a", namespace="other")], volumes=[volume("pv-a")]
    )
    assert result == {('persistentvolumeclaim "pvc-a" not found',)}


def test_a_claim_being_deleted() -> None:
    result = everywhere(
        claim_pod("pvc-a"), claims=[claim("pvc-a", "pv-a", deleting=True)], volumes=[volume("pv-a")]
    )
    assert result == {('persistentvolumeclaim "pvc-a" is being deleted',)}


def test_an_unbound_claim_is_refused_with_words_that_say_why() -> None:
    assert everywhere(claim_pod("pvc-a"), claims=[claim("pvc-a")]) == {(unbound("pvc-a"),)}


def test_a_claim_naming_a_volume_without_bind_completed_is_not_bound_yet() -> None:
    # isPVCFullyBound: VolumeName != "" && HasAnnotation(pv.kubernetes.io/bind-completed). A claim
    # pre-bound by its author is "unbound immediate" until the PV controller completes the binding.
    prebound = claim("pvc-a", "pv-a", bind_completed=False)
    assert everywhere(claim_pod("pvc-a"), claims=[prebound], volumes=[volume("pv-a")]) == {
        (unbound("pvc-a"),)
    }


def test_missing_and_deleted_claims_are_reported_before_unbound_ones() -> None:
    # podHasPVCs walks every volume before GetPodVolumes looks at binding.
    claims = [claim("pvc-a"), claim("pvc-c", "pv-c", deleting=True)]
    incoming = claim_pod("pvc-a", "pvc-b", "pvc-c")
    assert everywhere(incoming, claims=claims, volumes=[volume("pv-c")]) == {
        ('persistentvolumeclaim "pvc-b" not found',)
    }
    incoming = claim_pod("pvc-a", "pvc-c")
    assert everywhere(incoming, claims=claims, volumes=[volume("pv-c")]) == {
        ('persistentvolumeclaim "pvc-c" is being deleted',)
    }


def test_a_bound_claims_volume_that_does_not_exist() -> None:
    result = everywhere(claim_pod("pvc-a"), claims=[claim("pvc-a", "pv-a")])
    assert result == {('persistentvolume "pv-a" of persistentvolumeclaim "pvc-a" not found',)}


def test_refusal_comes_before_every_per_node_filter() -> None:
    # kube-scheduler's PreFilter failure is every node's status, whatever else they lack.
    result = verdicts(claim_pod("pvc-a", node_name="n9", requests={"cpu": "1000"}), NODES)
    assert set(result.values()) == {('persistentvolumeclaim "pvc-a" not found',)}


def test_refusal_is_computed_once_per_pod() -> None:
    facts = pod_facts(claim_pod("pvc-a"))
    assert volume_binding.refusal(facts, workloads()) == 'persistentvolumeclaim "pvc-a" not found'
    bound = workloads(claims=[claim("pvc-a", "pv-a")], volumes=[volume("pv-a")])
    assert volume_binding.refusal(facts, bound) is None


# --- VolumeBinding: bound volumes' node affinity -------------------------------------------------


def test_bound_volume_node_affinity_selects_the_nodes() -> None:
    local = volume("pv-a", node_terms=hostname_terms("n1"))
    result = verdicts(claim_pod("pvc-a"), NODES, claims=[claim("pvc-a", "pv-a")], volumes=[local])
    assert result == {"n1": OK, "n2": (CONFLICT,)}
    assert CONFLICT == "node(s) had volume node affinity conflict"


def test_every_bound_volume_must_select_the_node() -> None:
    claims = [claim("pvc-a", "pv-a"), claim("pvc-b", "pv-b")]
    volumes = [
        volume("pv-a", node_terms=hostname_terms("n1", "n2")),
        volume("pv-b", node_terms=hostname_terms("n2")),
    ]
    result = verdicts(claim_pod("pvc-a", "pvc-b"), NODES, claims=claims, volumes=volumes)
    assert result == {"n1": (CONFLICT,), "n2": OK}


def test_volume_node_affinity_terms_are_ored_and_their_expressions_anded() -> None:
    terms: list[dict[str, Any]] = [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]},
        {
            "matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n2"]},
                {"key": "disk", "operator": "Exists"},
            ]
        },
    ]
    nodes = [*NODES, node("n3", {"kubernetes.io/hostname": "n2", "disk": "ssd"})]
    result = verdicts(
        claim_pod("pvc-a"), nodes, claims=[claim("pvc-a", "pv-a")], volumes=[volume("pv-a", node_terms=terms)]
    )
    assert result == {"n1": OK, "n2": (CONFLICT,), "n3": OK}


def test_a_volume_without_required_node_affinity_fits_everywhere() -> None:
    no_required = volume("pv-a")
    no_required["spec"]["nodeAffinity"] = {}
    assert everywhere(claim_pod("pvc-a"), claims=[claim("pvc-a", "pv-a")], volumes=[no_required]) == {OK}


def test_volume_terms_and_zones_are_read_once_per_pod_not_per_node() -> None:
    # PreFilter parses each bound volume's node affinity and zone labels; the filters read only
    # what it kept, so volumes changing afterwards (they cannot within one pod's cycle) are not
    # looked up again node by node.
    pv = volume("pv-a", {ZONE: "a"}, node_terms=hostname_terms("n1"))
    kept = workloads(claims=[claim("pvc-a", "pv-a")], volumes=[pv])
    nodes = [node("n1", {"kubernetes.io/hostname": "n1", ZONE: "a"}), node("n2", {ZONE: "b"})]
    snapshot = Snapshot({n.name: n for n in nodes}, kept)
    facts = pod_facts(claim_pod("pvc-a"))
    binding = volume_binding.PLUGIN.prepare(facts, snapshot)
    zone = volume_zone.PLUGIN.prepare(facts, snapshot)
    assert binding is not None and not isinstance(binding, Refusal) and zone is not None
    kept.set_objects(claims=[claim("pvc-a", "pv-a")], volumes=[])
    assert [volume_binding.PLUGIN.filter(binding, n) for n in nodes] == [None, rejected(CONFLICT)]
    assert [volume_zone.PLUGIN.filter(zone, n) for n in nodes] == [None, rejected(NO_ZONE)]


def test_volumes_without_node_affinity_or_zones_skip_both_filters() -> None:
    snapshot = Snapshot({}, workloads(claims=[claim("pvc-a", "pv-a")], volumes=[volume("pv-a")]))
    facts = pod_facts(claim_pod("pvc-a"))
    assert volume_binding.PLUGIN.prepare(facts, snapshot) is None
    assert volume_zone.PLUGIN.prepare(facts, snapshot) is None


def test_an_unbound_claim_is_a_prefilter_refusal() -> None:
    facts = pod_facts(claim_pod("pvc-a"))
    assert volume_binding.PLUGIN.prepare(facts, Snapshot({}, workloads())) == Refusal(
        'persistentvolumeclaim "pvc-a" not found'
    )


def test_volume_binding_comes_before_volume_zone() -> None:
    pv = volume("pv-a", {ZONE: "a"}, node_terms=hostname_terms("n1"))
    nodes = [node("n1", {"kubernetes.io/hostname": "n1", ZONE: "b"}), node("n2", {ZONE: "b"})]
    result = verdicts(claim_pod("pvc-a"), nodes, claims=[claim("pvc-a", "pv-a")], volumes=[pv])
    assert result == {"n1": (NO_ZONE,), "n2": (CONFLICT,)}


# --- VolumeZone ------------------------------------------------------------------------------------

ZONE_VOLUMES = [
    volume("Vol_1", {BETA_ZONE: "us-west1-a"}),
    volume("Vol_2", {BETA_REGION: "us-west1", "uselessLabel": "none"}),
    volume("Vol_3", {BETA_REGION: "us-west1"}),
    volume("Vol_Stable_1", {ZONE: "us-west1-a"}),
    volume("Vol_Stable_2", {REGION: "us-west1", "uselessLabel": "none"}),
    volume("Multi_1", {BETA_ZONE: "us-west1-b", "uselessLabel": "none"}),
    volume("Multi_3", {BETA_ZONE: "us-west1-c__us-west1-a"}),
    volume("Multi_Stable_2", {ZONE: "us-west1-c__us-west1-a"}),
    volume("Plain", {"uselessLabel": "none"}),
]
ZONE_CLAIMS = [
    claim("PVC_1", "Vol_1"),
    claim("PVC_2", "Vol_2"),
    claim("PVC_3", "Vol_3"),
    claim("PVC_Stable_1", "Vol_Stable_1"),
    claim("PVC_Stable_2", "Vol_Stable_2"),
    claim("PVC_Multi_3", "Multi_3"),
    claim("PVC_Multi_Stable_2", "Multi_Stable_2"),
    claim("PVC_Plain", "Plain"),
]

ZONE_CASES: list[tuple[str, str | None, dict[str, str], tuple[str, ...]]] = [
    # TestSingleZone
    ("pod without volume", None, {BETA_ZONE: "us-west1-a"}, OK),
    ("node without labels", "PVC_1", {}, OK),
    ("beta zone label matched", "PVC_1", {BETA_ZONE: "us-west1-a", "uselessLabel": "none"}, OK),
    ("beta region label matched", "PVC_2", {BETA_REGION: "us-west1", "uselessLabel": "none"}, OK),
    (
        "beta region label doesn't match",
        "PVC_2",
        {BETA_REGION: "no_us-west1", "uselessLabel": "none"},
        (NO_ZONE,),
    ),
    (
        "beta zone label doesn't match",
        "PVC_1",
        {BETA_ZONE: "no_us-west1-a", "uselessLabel": "none"},
        (NO_ZONE,),
    ),
    ("zone label matched", "PVC_Stable_1", {ZONE: "us-west1-a", "uselessLabel": "none"}, OK),
    ("region label matched", "PVC_Stable_2", {REGION: "us-west1", "uselessLabel": "none"}, OK),
    (
        "region label doesn't match",
        "PVC_Stable_2",
        {REGION: "no_us-west1", "uselessLabel": "none"},
        (NO_ZONE,),
    ),
    ("zone label doesn't match", "PVC_Stable_1", {ZONE: "no_us-west1-a", "uselessLabel": "none"}, (NO_ZONE,)),
    # TestMultiZone
    ("multi: node without labels", "PVC_Multi_3", {}, OK),
    ("multi: beta zone label matched", "PVC_Multi_3", {BETA_ZONE: "us-west1-a", "uselessLabel": "none"}, OK),
    (
        "multi: beta zone label doesn't match",
        "PVC_1",
        {BETA_ZONE: "us-west1-b", "uselessLabel": "none"},
        (NO_ZONE,),
    ),
    ("multi: zone label matched", "PVC_Multi_Stable_2", {ZONE: "us-west1-a", "uselessLabel": "none"}, OK),
    (
        "multi: zone label doesn't match",
        "PVC_Stable_1",
        {ZONE: "us-west1-b", "uselessLabel": "none"},
        (NO_ZONE,),
    ),
    # More
    ("zone set, the other member", "PVC_Multi_Stable_2", {ZONE: "us-west1-c"}, OK),
    ("zone set, no member", "PVC_Multi_Stable_2", {ZONE: "us-west1-b"}, (NO_ZONE,)),
    ("node has a zone but not the volume's region", "PVC_2", {BETA_ZONE: "us-west1-a"}, (NO_ZONE,)),
    ("node zone labels of another generation only", "PVC_1", {ZONE: "us-west1-a"}, (NO_ZONE,)),
    ("volume without zone labels", "PVC_Plain", {BETA_ZONE: "us-west1-a", ZONE: "us-west1-a"}, OK),
]


@pytest.mark.parametrize(
    ("claim_name", "labels", "want"),
    [pytest.param(c, lab, w, id=name) for name, c, lab, w in ZONE_CASES],
)
def test_volume_zone_from_volume_zone_test_go(
    claim_name: str | None, labels: dict[str, str], want: tuple[str, ...]
) -> None:
    incoming = claim_pod(claim_name) if claim_name else pod("pod_1")
    host = node("host1", labels)
    assert verdicts(incoming, [host], claims=ZONE_CLAIMS, volumes=ZONE_VOLUMES)["host1"] == want


def test_a_zone_set_with_an_empty_member_is_ignored() -> None:
    # LabelZonesToSet fails on an empty member; VolumeZone logs it and skips the label.
    pv = volume("pv-a", {ZONE: "us-west1-a__"})
    zoned = node("host1", {ZONE: "us-west1-b"})
    assert verdicts(claim_pod("pvc-a"), [zoned], claims=[claim("pvc-a", "pv-a")], volumes=[pv])["host1"] == OK


def test_zone_set_members_are_trimmed() -> None:
    pv = volume("pv-a", {ZONE: "us-west1-a__ us-west1-b"})
    hosts = [node("b", {ZONE: "us-west1-b"}), node("c", {ZONE: "us-west1-c"})]
    result = verdicts(claim_pod("pvc-a"), hosts, claims=[claim("pvc-a", "pv-a")], volumes=[pv])
    assert result == {"b": OK, "c": (NO_ZONE,)}


def test_the_plugins_are_kube_schedulers() -> None:
    assert volume_binding.NAME == "VolumeBinding"
    assert volume_zone.NAME == "VolumeZone"
    assert NO_ZONE == "node(s) had no available volume zone"
