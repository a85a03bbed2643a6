"""``vgpu-guard cleanup``, the chart's pre-delete hook, against the API double over HTTPS with RBAC on,
as the hook's ServiceAccount with exactly the ClusterRole the chart renders: both webhook
configurations deleted, a second run finds them gone and still succeeds, another release's are out of
reach (exit 1 with the server's reason), and an unusable kubeconfig is one line and exit 2."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.apidouble_support.http.server import serve_double
from tests.apidouble_support.rbac import RBACAuthorizer
from tests.apidouble_support.tokens import kubeconfig_for
from tests.manifests.chart import render_objects
from vgpu_guard.apidouble.identity import UserInfo
from vgpu_guard.cli.app import run as run_cli
from vgpu_guard.kube.resources import MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS, Resource

NAME = "vgpu-guard"
HOOK_SA = UserInfo(
    "system:serviceaccount:vgpu-guard:vgpu-guard-cleanup",
    ("system:serviceaccounts", "system:serviceaccounts:vgpu-guard", "system:authenticated"),
)
_RBAC = "rbac.authorization.k8s.io"
CLUSTER_ROLES = Resource(_RBAC, "v1", "clusterroles", "ClusterRole", namespaced=False)
CLUSTER_ROLE_BINDINGS = Resource(_RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False)


def _configuration(resource: Resource, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": resource.kind,
        "metadata": {"name": name},
        "webhooks": [],
    }


def _names(api: Any, resource: Resource) -> list[str]:
    return sorted(o["metadata"]["name"] for o in api.store.list(resource).items)


async def _cli(argv: list[str]) -> int:
    # asyncio.run inside the command needs a thread of its own: this test's loop is running.
    code: int = await asyncio.to_thread(run_cli, argv)
    return code


async def test_cleanup_with_the_hooks_own_rights(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hook = [r.obj for r in render_objects() if r.is_hook]
    async with serve_double(tmp_path, authorizer=RBACAuthorizer) as api:
        for obj in hook:
            if obj["kind"] == "ClusterRole":
                api.store.create(CLUSTER_ROLES, obj)
            elif obj["kind"] == "ClusterRoleBinding":
                api.store.create(CLUSTER_ROLE_BINDINGS, obj)
        for resource in (MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS):
            for name in (NAME, "kyverno-resource"):
                api.store.create(resource, _configuration(resource, name))
        kubeconfig = str(kubeconfig_for(api, HOOK_SA))
        argv = ["cleanup", "--webhook-configuration", NAME, "--kubeconfig", kubeconfig]

        assert await _cli(argv) == 0
        out = capsys.readouterr()
        assert (out.out, out.err) == (
            f"mutatingwebhookconfiguration/{NAME} deleted\nvalidatingwebhookconfiguration/{NAME} deleted\n",
            "",
        )
        for resource in (MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS):
            assert _names(api, resource) == ["kyverno-resource"]

        # A retried Job (or a second uninstall) finds nothing to do and succeeds.
        assert await _cli(argv) == 0
        out = capsys.readouterr()
        assert (out.out, out.err) == (
            f"mutatingwebhookconfiguration/{NAME} not found (already gone)\n"
            f"validatingwebhookconfiguration/{NAME} not found (already gone)\n",
            "",
        )

        # The role names our two objects only: someone else's webhooks stay, and the Job fails
        # with the server's reason (both are tried).
        other = ["cleanup", "--webhook-configuration", "kyverno-resource", "--kubeconfig", kubeconfig]
        assert await _cli(other) == 1
        out = capsys.readouterr()
        assert out.out == ""
        errors = out.err.splitlines()
        assert len(errors) == 2, out.err
        for line, plural in zip(
            errors, ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"), strict=True
        ):
            assert line.startswith(
                f"error: delete admissionregistration.k8s.io/v1/{plural} kyverno-resource:"
            )
            assert "403 Forbidden" in line and f'cannot delete resource "{plural}"' in line, line
        for resource in (MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS):
            assert _names(api, resource) == ["kyverno-resource"]


def test_cleanup_without_a_kubeconfig_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    missing = tmp_path / "nothing-here"
    assert run_cli(["cleanup", "--webhook-configuration", NAME, "--kubeconfig", str(missing)]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.startswith(f"error: cannot load kubeconfig {missing}:") and out.err.count("\n") == 1


def test_cleanup_refuses_a_name_kubernetes_would_not_accept(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        run_cli(["cleanup", "--webhook-configuration", "Vgpu_Guard"])
    assert exit_.value.code == 2
    assert (
        "argument --webhook-configuration: 'Vgpu_Guard' is not a valid object name" in capsys.readouterr().err
    )
