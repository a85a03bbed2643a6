"""The real ``kubectl`` (1.32, on PATH) against the served double: what the user's terminal shows.

Each command's exit code and output are asserted exactly where they are ours to keep stable.
kubectl must be present under CI (the image ships it); elsewhere the module says why it is left
out. The e2e suite (tests/e2e) runs the user stories on both backends; this module pins the
double's side of the client contract: content negotiation, OpenAPI (validation, explain),
strategic merge patch, watches (wait), SelfSubjectAccessReview and impersonation (auth can-i).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator
from importlib import resources
from pathlib import Path

import pytest

from tests.real_cluster import in_ci
from vgpu_guard.apidouble import RunningDouble, serve_double

RECORDED = {("1", "32"), ("1", "33")}  # kubectl versions the texts asserted here were checked with
KUBECTL = shutil.which("kubectl")
if KUBECTL is None and not in_ci():
    pytest.skip("kubectl is not on PATH (the CI image has it)", allow_module_level=True)

POD = """apiVersion: v1
kind: Pod
metadata: {name: p1, namespace: default, labels: {app: demo}}
spec:
  containers: [{name: c, image: nginx, resources: {limits: {cpu: 500m, memory: 1024Mi}}}]
"""
LEDGER = """apiVersion: vgpu-guard.io/v1alpha1
kind: GPULedger
metadata: {name: node-a}
spec: {nodeName: node-a, summary: {pods: 1, gpus: 2}}
"""


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[RunningDouble]:
    async with serve_double(tmp_path / "double", rbac=True) as running:
        yield running


async def kubectl(api: RunningDouble, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    """Run kubectl against the double (async: the double serves on this event loop)."""
    assert KUBECTL is not None, "kubectl must be on PATH under CI"
    env = {**os.environ, "KUBECONFIG": str(api.kubeconfig), "KUBECACHEDIR": str(api.directory / "cache")}
    proc = await asyncio.create_subprocess_exec(
        KUBECTL,
        *args,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin else None), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_kubectl_is_a_version_these_outputs_were_recorded_with(api: RunningDouble) -> None:
    # The image's kubectl (v1.32.4-dispatcher) hands over to a kubectl matching the server's minor
    # where it has one: against the double (v1.33) that is v1.33.1. The texts below are both's.
    code, out, _ = await kubectl(api, "version", "--client", "-o", "json")
    client = json.loads(out)["clientVersion"]
    minor = client["minor"].rstrip("+")  # vendor builds add "+"
    assert code == 0 and (client["major"], minor) in RECORDED, f"kubectl {client['gitVersion']}"


def crd_file() -> str:
    return str(resources.files("vgpu_guard").joinpath("data/crds/gpuledgers.vgpu-guard.io.yaml"))


async def test_apply_validates_with_openapi_and_dry_run_creates_nothing(api: RunningDouble) -> None:
    assert await kubectl(api, "apply", "-f", crd_file()) == (
        0,
        "customresourcedefinition.apiextensions.k8s.io/gpuledgers.vgpu-guard.io created\n",
        "",
    )
    assert await kubectl(api, "apply", "-f", "-", stdin=POD) == (0, "pod/p1 created\n", "")
    dry = POD.replace("name: p1", "name: p2")
    assert await kubectl(api, "apply", "--dry-run=server", "-f", "-", stdin=dry) == (
        0,
        "pod/p2 created (server dry run)\n",
        "",
    )
    assert (await kubectl(api, "get", "pod", "p2"))[0] == 1
    bad = POD.replace("containers:", "containerz:")
    code, out, err = await kubectl(api, "apply", "-f", "-", stdin=bad)
    assert (code, out) == (1, "")
    assert err == (
        'error: error validating "STDIN": error validating data: [ValidationError(Pod.spec): unknown field '
        '"containerz" in io.k8s.api.core.v1.PodSpec, ValidationError(Pod.spec): missing required field '
        '"containers" in io.k8s.api.core.v1.PodSpec]; if you choose to ignore these errors, turn validation '
        "off with --validate=false\n"
    )


async def test_get_prints_printer_columns_and_explain_describes_our_fields(api: RunningDouble) -> None:
    await kubectl(api, "apply", "-f", crd_file())
    assert (await kubectl(api, "apply", "-f", "-", stdin=LEDGER))[0] == 0
    code, out, err = await kubectl(api, "get", "gpuledgers")
    assert (code, err) == (0, "")
    header, row = out.splitlines()
    assert header.split() == [
        "NAME",
        "NODE",
        "PODS",
        "GPUS",
        "FULL",
        "MEMORY-MIB",
        "FREE-MIB",
        "FULLEST-MEM%",
        "FULLEST-GPU",
        "AGE",
    ]
    assert row.split()[:4] == ["node-a", "node-a", "1", "2"]
    code, out, err = await kubectl(api, "explain", "gpuledger.spec.nodeName")
    assert (code, err) == (0, "")
    assert out.splitlines()[:4] == [
        "KIND:     GPULedger",
        "VERSION:  vgpu-guard.io/v1alpha1",
        "",
        "FIELD:    nodeName <string>",
    ]


async def test_label_describe_wait_and_delete(api: RunningDouble) -> None:
    await kubectl(api, "apply", "-f", "-", stdin=POD)
    assert await kubectl(api, "label", "pod", "p1", "tier=gpu") == (0, "pod/p1 labeled\n", "")
    code, out, _ = await kubectl(api, "get", "pod", "p1", "-o", "jsonpath={.metadata.labels}")
    assert (code, out) == (0, '{"app":"demo","tier":"gpu"}')
    code, out, _ = await kubectl(api, "describe", "pod", "p1")
    assert code == 0 and out.splitlines()[0].split() == ["Name:", "p1"]
    assert "QoS Class:                   Guaranteed" in out

    async def ready_soon() -> None:
        await asyncio.sleep(1)
        status = '{"status":{"conditions":[{"type":"Ready","status":"True"}]}}'
        await kubectl(api, "patch", "pod", "p1", "--subresource=status", "--type=merge", "-p", status)

    waiter = asyncio.create_task(ready_soon())
    assert await kubectl(api, "wait", "--for=condition=Ready", "pod/p1", "--timeout=20s") == (
        0,
        "pod/p1 condition met\n",
        "",
    )
    await waiter
    assert await kubectl(api, "delete", "pod", "p1", "--grace-period=0") == (0, 'pod "p1" deleted\n', "")


async def test_auth_can_i_answers_for_the_caller_and_impersonated_accounts(api: RunningDouble) -> None:
    assert await kubectl(api, "auth", "can-i", "create", "pods") == (0, "yes\n", "")
    sa = "--as=system:serviceaccount:default:default"
    assert await kubectl(api, "auth", "can-i", "list", "pods", sa) == (1, "no\n", "")
    assert await kubectl(api, "auth", "can-i", "get", "/healthz", sa) == (0, "yes\n", "")
