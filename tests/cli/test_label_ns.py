"""``vgpu-guard label-ns``, the chart's pre-install/pre-upgrade hook below Kubernetes 1.21, against the
API double over HTTPS with RBAC on, as the hook's ServiceAccount with exactly the ClusterRole the chart
renders for 1.20: the namespaces the webhooks keep out are patched with ``kubernetes.io/metadata.name``,
a second run (an upgrade) succeeds again, a namespace that does not exist yet is named and skipped,
any other namespace is out of reach (exit 1 with the server's reason). The double sets the label on
every namespace as 1.21+ does, so what the label changes is proven on kube-apiserver 1.20.2 by the
end-to-end suite (tests/e2e/test_stories.py), whose install runs this hook the same way."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.apidouble_support.http.server import serve_double
from tests.apidouble_support.rbac import RBACAuthorizer
from tests.apidouble_support.tokens import kubeconfig_for
from tests.manifests.chart import render_objects
from vgpu_guard.apidouble.identity import UserInfo
from vgpu_guard.cli.app import run as run_cli
from vgpu_guard.kube.resources import NAMESPACES, Resource

HOOK_SA = UserInfo(
    "system:serviceaccount:vgpu-guard:vgpu-guard-name-label",
    ("system:serviceaccounts", "system:serviceaccounts:vgpu-guard", "system:authenticated"),
)
_RBAC = "rbac.authorization.k8s.io"
CLUSTER_ROLES = Resource(_RBAC, "v1", "clusterroles", "ClusterRole", namespaced=False)
CLUSTER_ROLE_BINDINGS = Resource(_RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False)
EXEMPT = "batch-legacy"  # config.admission.exemptNamespaces, created after the install


async def _cli(argv: list[str]) -> int:
    code: int = await asyncio.to_thread(run_cli, argv)
    return code


def _labels(api: object, name: str) -> dict[str, str]:
    meta = api.store.get(NAMESPACES, name)["metadata"]  # type: ignore[attr-defined]
    return dict(meta.get("labels") or {})


async def test_the_hook_labels_the_excluded_namespaces_with_its_own_rights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = {"config": {"admission": {"exemptNamespaces": [EXEMPT]}}}
    hook = [
        r.obj
        for r in render_objects(values, kube_version="1.20.2")
        if r.is_hook and r.obj["metadata"]["name"] == "vgpu-guard-name-label"
    ]
    [job] = [o for o in hook if o["kind"] == "Job"]
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == ["label-ns", "kube-system", "kube-node-lease", "vgpu-guard", EXEMPT]
    async with serve_double(tmp_path, authorizer=RBACAuthorizer) as api:
        for obj in hook:
            if obj["kind"] == "ClusterRole":
                api.store.create(CLUSTER_ROLES, obj)
            elif obj["kind"] == "ClusterRoleBinding":
                api.store.create(CLUSTER_ROLE_BINDINGS, obj)
        for name in ("vgpu-guard", "team-a"):
            api.store.create(
                NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            )
        argv = [*args, "--kubeconfig", str(kubeconfig_for(api, HOOK_SA))]

        assert await _cli(argv) == 0
        out = capsys.readouterr()
        assert (out.out, out.err) == (
            "namespace/kube-system labelled kubernetes.io/metadata.name=kube-system\n"
            "namespace/kube-node-lease labelled kubernetes.io/metadata.name=kube-node-lease\n"
            "namespace/vgpu-guard labelled kubernetes.io/metadata.name=vgpu-guard\n"
            f"namespace/{EXEMPT} not found: skipped (`helm upgrade` labels it once it exists)\n",
            "",
        )
        for name in ("kube-system", "kube-node-lease", "vgpu-guard"):
            assert _labels(api, name)["kubernetes.io/metadata.name"] == name

        # An upgrade runs it again: the same write, and the namespace created since is labelled.
        api.store.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": EXEMPT}})
        assert await _cli(argv) == 0
        assert capsys.readouterr().out.splitlines()[-1] == (
            f"namespace/{EXEMPT} labelled kubernetes.io/metadata.name={EXEMPT}"
        )

        # The role names those namespaces only: a tenant's namespace cannot be taken out with it.
        other = ["label-ns", "team-a", "--kubeconfig", str(kubeconfig_for(api, HOOK_SA))]
        assert await _cli(other) == 1
        out = capsys.readouterr()
        assert out.out == ""
        assert out.err.startswith("error: patch v1/namespaces team-a:") and "403 Forbidden" in out.err


def test_label_ns_refuses_a_name_kubernetes_would_not_accept(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        run_cli(["label-ns", "Kube_System"])
    assert exit_.value.code == 2
    assert "'Kube_System' is not a namespace name" in capsys.readouterr().err


def test_label_ns_without_a_kubeconfig_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    missing = tmp_path / "nothing-here"
    assert run_cli(["label-ns", "kube-system", "--kubeconfig", str(missing)]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.startswith(f"error: cannot load kubeconfig {missing}:") and out.err.count("\n") == 1
