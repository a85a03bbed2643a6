"""``review`` answers what ``simulate`` (and so ``serve``) answers: one admission sequence.

Offline ``review_object`` runs ``engine.admission.admission_sequence`` over the rules alone;
``simulate`` runs it over the webhook's route function (cli/admission_chain.py), whose API reads
and GangPlacement go through the in-memory API server. On the same view, every object must get
the same decision, object, patch, warnings and recorded placement from both: the view is taken
from the simulated cluster's caches and given to both, so only the sequence and the webhook's
calls are compared, not how each command builds its view.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import config_with, gpu_node, pod
from tests.engine.test_pod_properties import CONFIGS, VIEW, pods
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.apidouble.store import Store
from vgpu_guard.cli.admission_chain import admit
from vgpu_guard.cli.cluster_source import choose_cluster, is_cluster_state
from vgpu_guard.cli.documents import DEFAULT_LIMITS, Document, read_documents
from vgpu_guard.cli.review import review_documents
from vgpu_guard.cli.scenario import default_scenario
from vgpu_guard.cli.simulated_cluster import SimulatedCluster
from vgpu_guard.cli.simulation_mode import Mode, simulation_config
from vgpu_guard.configfile import load_config
from vgpu_guard.engine import admission
from vgpu_guard.engine.admission import ReviewResult, register, request_for, review_object
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.decision import AdmissionDecision, AdmissionRequest
from vgpu_guard.kube.errors import KubeError
from vgpu_guard.kube.resources import CRDS, GANG_PLACEMENTS, NAMESPACES

ROOT = Path(__file__).resolve().parents[2]
# Every example file with something to judge (alone, queue-guarantees/cluster.yaml is only Nodes;
# it is the cluster queues.yaml is meant for: ``--cluster``).
EXAMPLES: list[tuple[str, str | None]] = [
    *(
        (str(path.relative_to(ROOT)), None)
        for path in sorted((ROOT / "examples").rglob("*.yaml"))
        if not all(is_cluster_state(d.object) for d in read_documents(str(path)))
    ),
    ("examples/queue-guarantees/queues.yaml", "examples/queue-guarantees/cluster.yaml"),
]
ADMIN = "kubernetes-admin"
IB = "example.com/ib-cluster"


@functools.cache
def _crds() -> tuple[dict[str, Any], ...]:
    """vgpu-guard's and Volcano's CRDs, as simulate installs them (parsed once: they are large)."""
    paths = sorted((ROOT / "vgpu_guard" / "data" / "crds").rglob("*.yaml"))
    return tuple(yaml.safe_load(path.read_text()) for path in paths)


def _api() -> Store:
    """An empty in-memory API server that serves what simulate's does."""
    store = Store(seed=6)
    for crd in _crds():
        store.create(CRDS, copy.deepcopy(crd))
    return store


def _store(store: Store, obj: Mapping[str, Any]) -> None:
    """Create ``obj`` as simulate stores an admitted object (its namespace on first use). Kinds the
    double does not serve (Deployments...: simulate expands them into pods) are not stored."""
    group = str(obj.get("apiVersion") or "").rpartition("/")[0]
    served = [i.resource() for i in store.types() if (i.group, i.kind) == (group, obj.get("kind"))]
    if not served:
        return
    metadata = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in ("uid", "resourceVersion")}
    namespace = str(metadata.get("namespace") or "default") if served[0].namespaced else None
    if namespace is not None and namespace not in {
        n["metadata"]["name"] for n in store.list(NAMESPACES).items
    }:
        store.create(NAMESPACES, {"metadata": {"name": namespace}})
    store.create(served[0], {**obj, "metadata": metadata}, namespace=namespace)


@asynccontextmanager
async def simulated(
    state: Iterable[Mapping[str, Any]], config: GuardConfig
) -> AsyncIterator[SimulatedCluster]:
    """simulate's serving parts (its caches, its webhook's client) over a store holding ``state``."""
    store = _api()
    for obj in state:
        _store(store, obj)
    cluster = SimulatedCluster(store, config, clock=lambda: 1_750_000_000.0)
    await cluster.start()
    try:
        yield cluster
    finally:
        await cluster.stop()


async def both(
    cluster: SimulatedCluster, obj: Mapping[str, Any], config: GuardConfig, *, username: str = ADMIN
) -> tuple[ReviewResult, ReviewResult]:
    """``review_object`` on the caches' view, then simulate's two webhook calls on the same view;
    what simulate admits is stored, as it stores it, for the next object."""
    request = request_for(obj, username=username)
    offline = review_object(request, await cluster.view(), config)
    simulated = await admit(request, cluster.view, config, cluster.client())
    if simulated.decision.allowed:
        # simulate reports the API's refusal; the object is not in the next view either way.
        with contextlib.suppress(KubeError):
            _store(cluster.store, simulated.object)
    return offline, simulated


# --- (1) the container cap: applied in each webhook call, after kube-apiserver's defaulting ----------


def test_a_pod_over_the_container_cap_gets_the_same_result_offline_and_in_simulate() -> None:
    limits_only = {"name": "c", "image": "busybox", "resources": {"limits": {"volcano.sh/vgpu-number": 1}}}
    many = pod(containers=[{**limits_only, "name": f"c{i}"} for i in range(501)])
    config = config_with()

    async def run() -> tuple[ReviewResult, ReviewResult]:
        async with simulated([gpu_node("n0")], config) as cluster:
            return await both(cluster, many, config)

    offline, simulated_ = asyncio.run(run())
    assert offline == simulated_
    assert offline.decision.code == 422 and offline.decision.rules == ("object-too-large",)
    # The object reported is the one the webhook was sent: defaulted (requests from limits).
    assert offline.object["spec"]["containers"][0]["resources"]["requests"] == {"volcano.sh/vgpu-number": 1}


# --- (2) a placement recorded before validation denied: it exists for the next member ----------------


@pytest.fixture
def validation_refuses_member_0(monkeypatch: pytest.MonkeyPatch) -> None:
    """A validating rule, registered as a later feature's rule module registers one, that refuses
    member ``-0`` of a gang after mutation recorded its placement. Today's pod rules never do on one
    view (the mutating call checks its result with the same rules); in a cluster the validating
    call's view can differ (a node gone between the calls), and then the placement exists."""
    monkeypatch.setattr(admission, "_HANDLERS", dict(admission._HANDLERS))  # register() into a copy
    rules, operations = admission._HANDLERS[("validate", "", "pods")]

    def refuse_member_0(
        request: AdmissionRequest, view: ClusterView, config: GuardConfig
    ) -> AdmissionDecision:
        if request.name.endswith("-0"):
            return AdmissionDecision(
                allowed=False, code=403, message="[test] member 0 refused", rules=("test",)
            )
        return rules(request, view, config)

    register("validate", "", "pods", handler=refuse_member_0, operations=operations)


def _member(index: int) -> dict[str, Any]:
    whole_card = {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 24576, "volcano.sh/vgpu-cores": 100}
    obj = pod(whole_card, name=f"train-{index}", annotations={"scheduling.k8s.io/group-name": "train"})
    obj["metadata"]["namespace"] = "ml"
    return obj


@pytest.mark.usefixtures("validation_refuses_member_0")
def test_the_placement_of_a_member_refused_after_mutation_is_seen_by_the_next_member() -> None:
    config = config_with(topology={"ibClusterLabel": IB})
    nodes = [gpu_node(f"a{i}", count=1, labels={IB: "ib-a"}) for i in range(4)]
    nodes += [gpu_node(f"b{i}", count=1, labels={IB: "ib-b"}) for i in range(2)]
    podgroup = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"minMember": 2, "queue": "default"},
    }
    members = [_member(0), _member(1)]

    async def run() -> tuple[list[ReviewResult], list[ReviewResult], list[str]]:
        async with simulated([*nodes, podgroup], config) as cluster:
            documents = [Document(f"gang.yaml#{i + 1}", m) for i, m in enumerate(members)]
            reviewed = [
                r for _, r in review_documents(documents, await cluster.view(), config, username=ADMIN)
            ]
            through = [
                await admit(request_for(m, username=ADMIN), cluster.view, config, cluster.client())
                for m in members
            ]
            stored = [p["spec"]["cluster"] for p in cluster.store.list(GANG_PLACEMENTS, namespace="ml").items]
            return reviewed, through, stored

    reviewed, through, stored = asyncio.run(run())
    assert reviewed == through
    first, second = reviewed
    assert not first.decision.allowed and first.decision.rules == ("test",)
    (placement,) = first.persist
    assert stored == [placement["spec"]["cluster"]] == ["ib-b"]
    # The second member follows the recorded placement (records nothing of its own).
    assert second.decision.allowed and second.persist == ()
    required = second.object["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert required["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": IB, "operator": "In", "values": ["ib-b"]}]}
    ]


# --- (3) every example object, both ways ---------------------------------------------------------


@pytest.mark.parametrize("routing", [False, True], ids=["volcano-mode", "routing-mode"])
@pytest.mark.parametrize(("example", "cluster_file"), EXAMPLES, ids=[e for e, _ in EXAMPLES])
def test_every_example_object_gets_the_same_result_offline_and_in_simulate(
    example: str, cluster_file: str | None, routing: bool
) -> None:
    """Each file against its cluster as ``review`` and ``simulate`` choose it, in simulate's config
    (IB pinning on) for both modes; what simulate admits is stored for the next object."""
    config, mode, _ = simulation_config(load_config(env={}), Mode(routing=routing))
    documents = read_documents(str(ROOT / example))
    cluster_path = str(ROOT / cluster_file) if cluster_file else None
    source = choose_cluster(
        documents, cluster=cluster_path, kubeconfig=None, limits=DEFAULT_LIMITS, what="file"
    )
    state = [d.object for d in source.documents] + [d.object for d in documents if is_cluster_state(d.object)]
    judged = [d for d in documents if not is_cluster_state(d.object)]

    async def run() -> list[tuple[str, ReviewResult, ReviewResult]]:
        async with simulated(state, config) as cluster:
            return [(d.source, *await both(cluster, d.object, config)) for d in judged]

    compared = asyncio.run(run())
    for where, offline, through in compared:
        assert offline == through, f"{where} ({mode})"


def test_the_built_in_scenario_gets_the_same_results_offline_and_in_simulate() -> None:
    """``simulate``'s own story (every example in one cluster: queues that see each other, gangs
    that share IB clusters), object by object."""
    config, _, _ = simulation_config(load_config(env={}))
    documents = default_scenario().documents
    state = [d.object for d in documents if is_cluster_state(d.object)]
    judged = [d for d in documents if not is_cluster_state(d.object)]

    async def run() -> list[tuple[str, ReviewResult, ReviewResult]]:
        async with simulated(state, config) as cluster:
            return [(d.source, *await both(cluster, d.object, config)) for d in judged]

    compared = asyncio.run(run())
    assert len(compared) > 10
    for where, offline, through in compared:
        assert offline == through, where


# --- generated pods: the webhook's calls on a fixed view, with a client of a fresh API ------------


async def _fixed(view: ClusterView) -> ClusterView:
    return view


def _capped(config: GuardConfig, max_containers: int) -> GuardConfig:
    return config.model_copy(
        update={"webhook": config.webhook.model_copy(update={"max_containers": max_containers})}
    )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=pods(), config_index=st.integers(0, len(CONFIGS) - 1), max_containers=st.sampled_from([500, 2]))
def test_generated_pods_get_the_same_result_offline_and_through_the_webhooks_calls(
    obj: dict[str, Any], config_index: int, max_containers: int
) -> None:
    """The generated pods of the mutation properties (gang annotations, IB and routing configs,
    bad quantities), some over a lowered container cap; the API only records a gang's placement
    and answers its PodGroup's GET (there is none)."""
    config = _capped(CONFIGS[config_index], max_containers)
    request = request_for(obj, username=ADMIN)
    offline = review_object(request, VIEW, config)
    through = asyncio.run(admit(request, lambda: _fixed(VIEW), config, MemoryClusterClient(_api())))
    assert offline == through
