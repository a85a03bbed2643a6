"""Who may write a pod's GPU assignment (issue 21, 22): every path, exact messages.

A plain pod patched with allocation annotations, a status write that carries them, a Binding
that would copy them onto the pod, a vGPU pod created already bound: denied unless the writer
is the allocator, the device plugin or a configured allocation writer.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.builders import config_with, default_config, gpu_node, pod, view_of
from vgpu_guard.engine.admission import request_for, review_object
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.decision import AdmissionRequest
from vgpu_guard.engine.rules.pods_allocation import admit_allocation_write

IDS = "volcano.sh/vgpu-ids-new"
NODE = "volcano.sh/vgpu-node"
PHASE = "volcano.sh/bind-phase"
CONTROLLER = "system:serviceaccount:vgpu-guard:vgpu-guard-controller"
PLUGIN = "system:serviceaccount:kube-system:volcano-device-plugin"
WHO = "only the allocator and the device plugin (admission.allocationWriters) write allocation annotations"
GPU = {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 1024}


def config() -> GuardConfig:
    return config_with(admission={"allocationWriters": [CONTROLLER, PLUGIN]})


def plain(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return pod(name="web", annotations=annotations, nodeName="node-1")


def update(
    old: dict[str, Any],
    new: dict[str, Any],
    *,
    user: str = "alice",
    groups: tuple[str, ...] = ("system:authenticated",),
    sub: str = "",
) -> AdmissionRequest:
    return AdmissionRequest(
        kind="Pod",
        group="",
        resource="pods",
        operation="UPDATE",
        object=new,
        old_object=old,
        namespace="default",
        name="web",
        username=user,
        groups=groups,
        sub_resource=sub,
    )


def binding(annotations: dict[str, str], *, user: str) -> AdmissionRequest:
    obj = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "web", "namespace": "default", "annotations": annotations},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"},
    }
    return AdmissionRequest(
        kind="Binding",
        group="",
        resource="pods",
        operation="CREATE",
        object=obj,
        namespace="default",
        name="web",
        username=user,
        sub_resource="binding",
    )


def test_patching_an_assignment_into_a_plain_pod_is_denied() -> None:
    forged = plain({IDS: "GPU-0,NVIDIA,28672,100:;", NODE: "node-1"})
    decision = admit_allocation_write(update(plain(), forged), config())
    assert (decision.allowed, decision.code) == (False, 403)
    assert decision.message.splitlines() == [
        f"[allocation-annotations] metadata.annotations[{NODE}]: node-1 was added by alice on UPDATE; "
        f"{WHO}, leave it out",
        f"[allocation-annotations] metadata.annotations[{IDS}]: 'GPU-0,NVIDIA,28672,100:;' was added by alice "
        f"on UPDATE; {WHO}, leave it out",
    ]


def test_changing_and_removing_an_assignment_are_denied() -> None:
    held = plain({IDS: "GPU-0,NVIDIA,1024,10:;", PHASE: "success"})
    changed = plain({IDS: "GPU-0,NVIDIA,1,10:;"})
    decision = admit_allocation_write(update(held, changed), config())
    assert decision.message.splitlines() == [
        f"[allocation-annotations] metadata.annotations[{IDS}]: 'GPU-0,NVIDIA,1024,10:;' was changed to "
        f"'GPU-0,NVIDIA,1,10:;' by alice on UPDATE; {WHO}, keep 'GPU-0,NVIDIA,1024,10:;'",
        f"[allocation-annotations] metadata.annotations[{PHASE}]: success was removed by alice on UPDATE; "
        f"{WHO}, keep it",
    ]


def test_status_writes_are_checked_too() -> None:
    decision = admit_allocation_write(update(plain(), plain({PHASE: "success"}), sub="status"), config())
    assert decision.message == (
        f"[allocation-annotations] metadata.annotations[{PHASE}]: success was added by alice through "
        f"pods/status; {WHO}, leave it out"
    )


def test_a_binding_that_would_copy_an_assignment_is_denied() -> None:
    decision = admit_allocation_write(binding({NODE: "node-1"}, user="alice"), config())
    assert decision.message == (
        f"[allocation-annotations] metadata.annotations[{NODE}]: node-1 on a Binding by alice would be copied "
        f"onto pod default/web; {WHO}, bind without it"
    )


def test_writers_pass_on_every_path() -> None:
    forged = plain({IDS: "GPU-0,NVIDIA,1024,10:;"})
    assert admit_allocation_write(binding({NODE: "node-1"}, user=CONTROLLER), config()).allowed
    assert admit_allocation_write(update(plain(), forged, user=PLUGIN), config()).allowed
    assert admit_allocation_write(update(forged, plain(), user=CONTROLLER, sub="status"), config()).allowed
    admin = update(plain(), forged, user="kubernetes-admin", groups=("system:masters",))
    assert admit_allocation_write(admin, config()).allowed


def test_writes_that_leave_the_assignment_alone_pass() -> None:
    held = plain({IDS: "GPU-0,NVIDIA,1024,10:;"})
    relabelled = copy.deepcopy(held)
    relabelled["metadata"]["labels"] = {"team": "a"}
    assert admit_allocation_write(update(held, relabelled), config()).allowed
    kubelet = update(held, held, user="system:node:node-1", groups=("system:nodes",), sub="status")
    assert admit_allocation_write(kubelet, config()).allowed
    assert admit_allocation_write(binding({"team": "a"}, user="alice"), config()).allowed


def test_ephemeral_containers_and_other_subresources_are_not_judged() -> None:
    # The API server resets metadata on pods/ephemeralcontainers before admission sees it.
    request = update(plain(), plain({IDS: "x"}), sub="ephemeralcontainers")
    assert admit_allocation_write(request, config()).allowed


def test_the_rule_action_is_configurable() -> None:
    warn = config_with(admission={"rules": {"allocation-annotations": "warn"}})
    decision = admit_allocation_write(update(plain(), plain({NODE: "n"})), warn)
    assert decision.allowed
    # Warnings are clipped to 120 characters (engine/violations.py); the audit log keeps the whole text.
    assert decision.warnings == (
        "[allocation-annotations] metadata.annotations[volcano.sh/vgpu-node]: n was added by alice on UPDATE; "
        "only the allocator…",
    )
    assert decision.violations[0].render() == (
        f"[allocation-annotations] metadata.annotations[{NODE}]: n was added by alice on UPDATE; {WHO}, leave it out"
    )


# --- CREATE: a vGPU pod already bound -----------------------------------------------------------------


def review(obj: dict[str, Any], user: str, cfg: GuardConfig | None = None) -> Any:
    view = view_of([gpu_node("a30")])
    return review_object(request_for(obj, username=user), view, cfg or config()).decision


def test_a_vgpu_pod_created_with_node_name_is_denied() -> None:
    decision = review(pod(GPU, nodeName="a30"), "alice")
    assert decision.message == (
        "[vgpu-prebound] spec.nodeName: a30 is set at creation by alice, which skips vgpu-guard's allocator "
        "and leaves the pod's GPUs unrecorded; remove spec.nodeName and choose nodes with nodeSelector or "
        "affinity"
    )
    assert review(pod(GPU, nodeName="a30"), CONTROLLER).allowed
    assert review(pod({"cpu": 1}, nodeName="a30"), "alice").allowed  # no vGPU: not ours


def test_at_create_only_trusted_users_may_carry_annotations() -> None:
    # No allocator creates pods with an assignment (ours binds, Volcano's and the plugin patch),
    # so even allocation writers are refused at CREATE; trustedUsers are for migrations.
    assert not review(pod(GPU, annotations={NODE: "a30"}), PLUGIN).allowed
    trusted = config_with(admission={"trustedUsers": ["migrator"]})
    assert review(pod(GPU, annotations={NODE: "a30"}, nodeName="a30"), "migrator", trusted).allowed


# --- exempt namespaces (issue 22) ---------------------------------------------------------------------


def exempt() -> GuardConfig:
    return config_with(admission={"exemptNamespaces": ["lab"], "allocationWriters": [CONTROLLER]})


def in_lab(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["namespace"] = "lab"
    return obj


def test_exempt_namespaces_skip_policy_but_not_the_allocation_checks() -> None:
    odd = in_lab(pod({"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": "12Gi"}))
    assert review(odd, "alice", exempt()).allowed  # vgpu-memory-unit would deny elsewhere
    assert not review(
        pod({"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": "12Gi"}), "alice", exempt()
    ).allowed
    forged = review(in_lab(pod(GPU, annotations={IDS: "GPU-0,NVIDIA,1024,10:;"})), "alice", exempt())
    assert forged.rules == ("allocation-annotations",)
    prebound = review(in_lab(pod(GPU, nodeName="a30")), "alice", exempt())
    assert prebound.rules == ("vgpu-prebound",)


def test_exempt_namespaces_are_not_mutated() -> None:
    from tests.builders import mutate

    view = view_of([gpu_node("a30")])
    assert mutate(in_lab(pod(GPU)), view, exempt()).patch == ()
    assert mutate(pod(GPU), view, exempt()).patch != ()


def test_defaults_name_the_plugin_and_volcano_and_trust_system_masters() -> None:
    admission = default_config().admission
    assert admission.allocation_writers == (PLUGIN, "system:serviceaccount:volcano-system:volcano-scheduler")
    assert admission.allocation_writer_groups == ("system:masters",)
    assert admission.exempt_namespaces == ()


@pytest.mark.parametrize("sub", ["", "status"])
def test_a_pod_without_old_object_is_judged_on_what_it_carries(sub: str) -> None:
    request = update(plain(), plain({NODE: "n"}), sub=sub)
    request = AdmissionRequest(**{**request.__dict__, "old_object": None})
    assert not admit_allocation_write(request, config()).allowed
