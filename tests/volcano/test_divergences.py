"""Issue 43 item 7: each divergence of Volcano from vgpu-guard shows in Volcano's model, on the
scenario that tells it (examples/simulate/volcano/). The model is driven alone here (no arbiter:
the recorder admits every write), so these assert what Volcano does; what the arbiter then makes
of it is simulate's business (tests/cli)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.volcano.cluster import EPOCH, Cluster
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.kube.resources import PODS
from vgpu_guard.volcano.binder import parse_version
from vgpu_guard.volcano.device_cache import go_parse_bool, node_devices
from vgpu_guard.volcano.session import VolcanoScheduler

SCENARIOS = Path(__file__).resolve().parents[2] / "examples" / "simulate" / "volcano"
IDS = "volcano.sh/vgpu-ids-new"


def _load(cluster: Cluster, name: str) -> None:
    """The scenario's objects stored as they are; pods already on a node marked Running."""
    for obj in yaml.safe_load_all((SCENARIOS / name).read_text()):
        obj["metadata"].setdefault("namespace", "default")
        if obj["kind"] == "Node":
            obj["metadata"].pop("namespace")
        cluster.add(obj)
        if obj["kind"] == "Pod" and obj["spec"].get("nodeName"):
            patch = {"status": {"phase": "Running"}}
            cluster.store.patch(
                PODS, obj["metadata"]["name"], patch, namespace="default", subresource="status"
            )


def _volcano(cluster: Cluster, release: str) -> VolcanoScheduler:
    return VolcanoScheduler(
        cluster.client(), GuardConfig(), version=parse_version(release), clock=lambda: EPOCH
    )


@pytest.mark.parametrize(("release", "carrying"), [("1.15", 2), ("1.12", 2), ("1.15.1", 0), ("1.16", 0)])
async def test_a_discarded_gang_leaves_its_assignments_on_pending_pods_until_1_15_1(
    release: str, carrying: int
) -> None:
    """(a) Two of the gang's three members are PATCHed, the statement is discarded; v1.10-v1.15.0's
    Release leaves both assignments on the Pending pods, and the next session (its cache counts
    pods on a node only) places them again on the same cards."""
    cluster = Cluster()
    _load(cluster, "discarded-gang.yaml")
    volcano = _volcano(cluster, release)
    for _ in range(2):
        record = await volcano.session()
        assert record.discarded == ("default/trio",) and record.binds == ()
    pods = [cluster.pod(f"trio-{i}") for i in range(3)]
    assert all(not p["spec"].get("nodeName") for p in pods)
    held = [p["metadata"].get("annotations", {}).get(IDS) for p in pods]
    assert sum(h is not None for h in held) == carrying
    if carrying:  # v1.10-v1.14 try the highest position first, 1.15's binpack the lowest
        assert sorted(held[:2]) == ["GPU-gang-0-0,NVIDIA,16384,0:", "GPU-gang-0-1,NVIDIA,16384,0:"]


@pytest.mark.parametrize(
    ("release", "placed"),
    [("1.12", True), ("1.15", True), ("1.16", True), ("1.11", False), ("1.13", False), ("1.14", False)],
)
async def test_a_pod_with_two_containers_on_one_card_is_counted_once_in_1_12_and_from_1_15(
    release: str, placed: bool
) -> None:
    """(b) pair holds 16 GiB of the 24 GiB card in two containers; v1.12.x and from v1.15.0 the
    cache counts 8 GiB and sends the 16 GiB pod to the card; v1.10/v1.11 (AddResource) and
    v1.13/v1.14 (hami-core AddPod counts every call) count both and do not."""
    cluster = Cluster()
    _load(cluster, "two-containers-one-card.yaml")
    record = await _volcano(cluster, release).session()
    if placed:
        assert [(b.pod, b.node, b.ids) for b in record.binds] == [
            ("default/big", "pair-0", "GPU-pair-0-0,NVIDIA,16384,0:")
        ]
    else:
        assert record.binds == ()
        assert record.unplaced == (
            (
                "default/big",
                "0/1 nodes are unavailable: 1 hami-vgpuDeviceSharing not enough gpu fitted on this node.",
            ),
        )


async def test_exclusive_cores_wait_for_an_unused_card_whatever_the_free_memory() -> None:
    """(d) 100 cores: the shared card (10 %) and the full card (100 %) both refuse it."""
    cluster = Cluster()
    _load(cluster, "exclusive-cores.yaml")
    record = await _volcano(cluster, "1.16").session()
    assert record.binds == ()
    assert [pod for pod, _ in record.unplaced] == ["default/exclusive"]


def test_a_zero_core_pod_never_gets_a_card_at_100_percent() -> None:
    """(d) the other rule: 0 cores on the card at 100 % is refused, on the 10 % card it fits."""
    from vgpu_guard.volcano.device_usage import volcano_cache
    from vgpu_guard.volcano.deviceshare import fit

    docs = list(yaml.safe_load_all((SCENARIOS / "exclusive-cores.yaml").read_text()))
    nodes, pods = (
        [d for d in docs if d["kind"] == "Node"],
        [d for d in docs if d.get("spec", {}).get("nodeName")],
    )
    for i, p in enumerate(pods):
        p["metadata"]["uid"] = f"uid-{i}"
    version, nvidia = parse_version("1.16"), GuardConfig().nvidia
    cache = volcano_cache(nodes, pods, version=version, known_mig=(), factor=1)
    zero: dict[str, Any] = {
        "metadata": {"name": "z", "annotations": {}},
        "spec": {
            "containers": [
                {"resources": {"limits": {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 1024}}}
            ]
        },
    }
    node = cache["cores-0"].copy()
    del node.cards[0]  # leave only the card at 100 %
    assert (
        fit(zero, node, nvidia=nvidia, version=version, policy="binpack")
        == "not enough gpu fitted on this node"
    )
    result = fit(zero, cache["cores-0"].copy(), nvidia=nvidia, version=version, policy="binpack")
    assert not isinstance(result, str) and result.containers[0][0].uuid == "GPU-cores-0-0"


def test_registration_reads_health_as_parsebool_and_keeps_a_duplicate_uuid_twice() -> None:
    """(c) "True" is healthy (strconv.ParseBool), health is never looked at, and a UUID registered
    twice is two cards by position; vgpu-guard refuses such a registration."""
    assert [go_parse_bool(v) for v in ("True", "TRUE", "t", "1", "yes", "")] == [True] * 4 + [False] * 2
    raw = "GPU-a,10,24576,NVIDIA-NVIDIA A10,True,hami-core:GPU-a,10,24576,NVIDIA-NVIDIA A10,false,hami-core:"
    allocatable = {
        "volcano.sh/vgpu-number": "20",
        "volcano.sh/vgpu-memory": "49152",
        "volcano.sh/vgpu-cores": "200",
    }
    devices = node_devices(
        "n", {"volcano.sh/node-vgpu-register": raw}, allocatable, version=parse_version("1.16"), known_mig=()
    )
    assert devices is not None
    assert [(c.index, c.uuid, c.healthy) for c in devices.cards.values()] == [
        (0, "GPU-a", True),
        (1, "GPU-a", False),
    ]
    short = "GPU-a,10,24576,NVIDIA-NVIDIA A10,true:"  # plugin v1.9's five fields: v1.12+ ignore the node
    args = ({"volcano.sh/node-vgpu-register": short}, allocatable)
    assert node_devices("n", *args, version=parse_version("1.12"), known_mig=()) is None
    assert node_devices("n", *args, version=parse_version("1.11"), known_mig=()) is not None
