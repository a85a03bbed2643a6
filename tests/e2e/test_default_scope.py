"""A default install guards every namespace but the excluded ones, on both backends (issue 38 item 2).

On kube-apiserver 1.20.2 the chart renders the allNamespaces scope (no matchConditions there): an
unlabelled namespace's bad pods (``examples/denials/pods.yaml``, applied with kubectl as a user would)
are denied, where the opt-in scope the chart used to pick left them unchecked. 1.20 also sets no
``kubernetes.io/metadata.name`` label, by which every selector keeps kube-system, kube-node-lease and
the release namespace out: the suite's install ran the chart's pre-install hook (``vgpu-guard
label-ns`` under the hook's own ServiceAccount, as Helm runs it), and a pod the validating webhook
would refuse anywhere (a forged allocation annotation) is admitted in those namespaces, because
they are never sent to the webhooks, as it is on the double (which labels namespaces as 1.21+ does).
The kubectl story runs on the real control plane only (conftest.REAL_CLIENTS_ONLY); the other on both.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.clients import Kubectl
from tests.e2e.conftest import Env, drop_namespace, new_namespace, plain_pod
from tests.e2e.harness import NAMESPACE, OPT_IN_LABEL
from vgpu_guard.kube.errors import KubeError, NotFound
from vgpu_guard.kube.resources import NAMESPACES, PODS

pytestmark = pytest.mark.asyncio(loop_scope="session")

Obj = dict[str, Any]
NAME_LABEL = "kubernetes.io/metadata.name"
# Denied by pods.vgpu.vgpu-guard.io in any namespace it sees, exempt ones included; kept Pending.
FORGED = {"volcano.sh/vgpu-node": "e2e-nowhere"}
NOWHERE = {"e2e.vgpu-guard.io/no-kubelet-here": "true"}
DENIED = 'admission webhook "pods.vgpu.vgpu-guard.io" denied the request: [allocation-annotations] '


@pytest.fixture
def kubectl(env: Env, tmp_path: Path) -> Kubectl:
    return Kubectl(env.backend.admin_kubeconfig, tmp_path / "kube-cache")


def _forged(name: str) -> Obj:
    pod = plain_pod(name, FORGED)
    pod["spec"]["nodeSelector"] = NOWHERE
    return pod


async def _labels(env: Env, namespace: str) -> dict[str, str]:
    return dict((await env.api.get(NAMESPACES, namespace))["metadata"].get("labels") or {})


@pytest.mark.real_clients_only  # kubectl apply: the cluster backend only
async def test_an_unlabelled_namespaces_bad_pods_are_denied_by_default(env: Env, kubectl: Kubectl) -> None:
    """A namespace created with no label at all, as most are: before, below 1.28, the chart picked
    the opt-in scope, and this apply created all three objects without a word."""
    ns = await new_namespace(env.guard, env.api, opt_in=False)
    env.undo.append(lambda: drop_namespace(env.api, ns))
    assert OPT_IN_LABEL not in await _labels(env, ns)
    pod_hooks = [
        w
        for o in env.guard.objects
        if o["kind"].endswith("WebhookConfiguration")
        for w in o["webhooks"]
        if w["name"] == "pods.vgpu.vgpu-guard.io"
    ]
    assert len(pod_hooks) == 2 and all(OPT_IN_LABEL not in str(w["namespaceSelector"]) for w in pod_hooks)
    run = await kubectl("apply", "-n", ns, "-f", "examples/denials/pods.yaml")
    assert run.code == 1, run.transcript()
    denials = [line for line in run.stderr.splitlines() if line.startswith("Error from server (Forbidden)")]
    assert [line.split(" denied the request: ", 1)[1].split("]", 1)[0] for line in denials] == [
        "[vgpu-memory-unit",
        "[allocation-annotations",
        "[vgpu-cores-range",
    ], run.transcript()
    assert (await env.api.list(PODS, namespace=ns)).items == []
    with pytest.raises(KubeError) as error:
        await env.api.create(PODS, _forged("forged-here"), namespace=ns)
    assert error.value.code == 403 and error.value.message.startswith(DENIED), error.value.message


async def test_kube_system_and_our_namespace_never_reach_the_webhooks(env: Env) -> None:
    """Below 1.21 the hook labelled them (the API server does from 1.21); a pod our validating
    webhook refuses in every namespace it sees is admitted there: the API server never asked it.
    With the webhook down and failing open or closed, nothing of theirs can wait on it."""
    minor = int("".join(ch for ch in env.backend.kube_version.split(".")[1] if ch.isdigit()))
    output = env.guard.hook_output.get(f"{NAMESPACE}-name-label")
    if minor < 21:
        assert output == (
            "namespace/kube-system labelled kubernetes.io/metadata.name=kube-system\n"
            "namespace/kube-node-lease labelled kubernetes.io/metadata.name=kube-node-lease\n"
            f"namespace/{NAMESPACE} labelled {NAME_LABEL}={NAMESPACE}\n"
        )
    else:
        assert output is None  # the chart renders no such hook: the server labels every namespace
    for namespace in ("kube-system", "kube-node-lease", NAMESPACE):
        assert (await _labels(env, namespace)).get(NAME_LABEL) == namespace
    for namespace in ("kube-system", NAMESPACE):

        async def remove(namespace: str = namespace) -> None:
            with contextlib.suppress(NotFound):
                await env.api.delete(PODS, "e2e-not-sent", namespace=namespace, grace_period_seconds=0)

        env.undo.append(remove)
        created = await env.api.create(PODS, _forged("e2e-not-sent"), namespace=namespace)
        assert created["metadata"]["annotations"] == FORGED
