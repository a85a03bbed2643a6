"""Volcano's write sequences per version (vgpu_guard/volcano/binder.py), as the API server sees them."""

from __future__ import annotations

import pytest

from tests.builders import gpu_node, pod
from tests.volcano.cluster import Cluster
from vgpu_guard.kube.errors import KubeError
from vgpu_guard.volcano.binder import allocate, bind, deallocate, parse_version, write_assignment

IDS = "GPU-n0-0,NVIDIA,12288,0:"
DEVICE_KEYS = {
    "volcano.sh/vgpu-node": "n0",
    "volcano.sh/vgpu-time": "1750000000",
    "volcano.sh/vgpu-ids-new": IDS,
    "volcano.sh/devices-to-allocate": IDS,
    "volcano.sh/bind-phase": "allocating",
    "volcano.sh/bind-time": "1750000000",
}


def _cluster() -> tuple[Cluster, dict[str, object]]:
    cluster = Cluster()
    _, stored = cluster.add(
        gpu_node("n0"), pod({"volcano.sh/vgpu-memory": 12288}, name="p", schedulerName="volcano")
    )
    return cluster, stored


@pytest.mark.parametrize(
    ("text", "name", "sequence"),
    [
        ("1.16", "1.16", "annotated-binding"),
        ("v1.17.0", "1.17", "annotated-binding"),
        ("1.15", "1.15", "patch-then-bind"),
        ("1.10.2", "1.10.2", "patch-then-bind"),
        ("1.15.1", "1.15.1", "patch-then-bind"),
        ("v1.12.0", "1.12", "patch-then-bind"),
    ],
)
def test_a_release_names_its_write_sequence(text: str, name: str, sequence: str) -> None:
    version = parse_version(text)
    assert (version.name, version.sequence) == (name, sequence)


@pytest.mark.parametrize("text", ["1.9", "2.0", "latest", ""])
def test_releases_outside_the_model_are_refused_with_the_range(text: str) -> None:
    with pytest.raises(ValueError, match=r"give 1\.10 to 1\.15 .* or 1\.16 and later"):
        parse_version(text)


async def test_1_16_puts_the_assignment_on_the_binding_and_writes_nothing_before() -> None:
    cluster, stored = _cluster()
    api = cluster.client()
    await write_assignment(api, stored, node="n0", ids=IDS, version=parse_version("1.16"), now=1_750_000_000)
    [write] = cluster.recorder.writes
    assert (write.operation, write.subresource, write.user) == (
        "CREATE",
        "binding",
        "system:serviceaccount:volcano-system:volcano-scheduler",
    )
    assert DEVICE_KEYS.items() <= write.annotations.items()
    bound = cluster.pod("p")
    assert bound["spec"]["nodeName"] == "n0"
    assert bound["metadata"]["annotations"]["volcano.sh/vgpu-ids-new"] == IDS


async def test_1_15_patches_the_pod_then_binds() -> None:
    cluster, stored = _cluster()
    await write_assignment(
        cluster.client(), stored, node="n0", ids=IDS, version=parse_version("1.15"), now=1_750_000_000
    )
    patch, binding = cluster.recorder.writes
    assert (patch.operation, patch.subresource) == ("UPDATE", "")
    assert DEVICE_KEYS.items() <= patch.annotations.items()
    assert (binding.operation, binding.subresource) == ("CREATE", "binding")
    # The Binding carries the pod as the scheduler's cache holds it: no assignment (#5532's gap).
    assert "volcano.sh/vgpu-ids-new" not in binding.annotations
    assert cluster.pod("p")["spec"]["nodeName"] == "n0"


async def test_1_15_a_refused_patch_sends_no_binding() -> None:
    cluster, stored = _cluster()
    cluster.recorder.refuse = lambda write: write.operation == "UPDATE"
    with pytest.raises(KubeError, match="denied the request"):
        await write_assignment(
            cluster.client(), stored, node="n0", ids=IDS, version=parse_version("1.15"), now=1_750_000_000
        )
    assert [(w.operation, w.subresource) for w in cluster.recorder.writes] == [("UPDATE", "")]
    assert not cluster.pod("p")["spec"].get("nodeName")


@pytest.mark.parametrize(
    ("release", "writes"),
    [
        ("1.16", []),
        ("1.15", [("UPDATE", "")]),
        ("1.12", [("UPDATE", "")]),
        ("1.15.1", [("UPDATE", ""), ("UPDATE", "")]),
    ],
)
async def test_a_discarded_statement_undoes_only_what_it_wrote(
    release: str, writes: list[tuple[str, str]]
) -> None:
    """v1.10.0-v1.15.0's Release does nothing, so the PATCHed assignment stays on the pod (issue 43
    (a)); v1.15.1's patches it away; >= 1.16 wrote nothing to undo."""
    cluster, stored = _cluster()
    api, version = cluster.client(), parse_version(release)
    task = await allocate(api, stored, node="n0", ids=IDS, version=version, now=1_750_000_000)
    # The task in memory carries the assignment only from 1.16 (1.10-1.15 patched the pod instead).
    held = (task["metadata"].get("annotations") or {}).get("volcano.sh/vgpu-ids-new")
    assert held == (IDS if release == "1.16" else None)
    await deallocate(api, task, version)
    assert [(w.operation, w.subresource) for w in cluster.recorder.writes] == writes
    left = (cluster.pod("p")["metadata"].get("annotations") or {}).get("volcano.sh/vgpu-ids-new")
    assert left == (IDS if release in ("1.15", "1.12") else None)


async def test_the_binding_carries_the_pods_uid_precondition() -> None:
    cluster, stored = _cluster()
    task = {**stored, "metadata": {**stored["metadata"], "uid": "someone-else"}}  # type: ignore[dict-item]
    with pytest.raises(KubeError) as error:
        await bind(cluster.client(), task, "n0")
    assert error.value.code == 409
