"""``vgpu-guard sandbox --with-guard`` as a user runs it: a real process, the official ``kubernetes``
client on the kubeconfig it writes, our webhook answering through the registered configurations,
our controller binding, and Ctrl-C stopping everything."""

from __future__ import annotations

import argparse
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

BIN = Path(sys.executable).with_name("vgpu-guard")
NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "t4-0",
        "labels": {"kubernetes.io/hostname": "t4-0"},
        "annotations": {"volcano.sh/node-vgpu-register": "GPU-t4-0-0,10,15360,NVIDIA-Tesla T4,true,hami-core:"},
    },
    "status": {
        "allocatable": {"cpu": "4", "memory": "64Gi", "pods": "110", "volcano.sh/vgpu-number": "10",
                        "volcano.sh/vgpu-memory": "15360", "volcano.sh/vgpu-cores": "100"},
        "conditions": [{"type": "Ready", "status": "True"}],
    },
}  # fmt: skip


def _pod(name: str, memory: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {
                        "limits": {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": memory}
                    },
                }
            ]
        },
    }


def _wait_for_line(log: Path, process: subprocess.Popen[bytes], text: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = log.read_text()
        if text in out:
            return out
        if process.poll() is not None:
            raise AssertionError(f"sandbox exited with {process.returncode}:\n{out}")
        time.sleep(0.1)
    raise AssertionError(f"no {text!r} from the sandbox within {timeout}s:\n{log.read_text()}")


def _refuses(url: str) -> bool:
    host, port = url.removeprefix("https://").rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return False
    except OSError:
        return True


def _assert_logs_kept(banner: str, out: str) -> None:
    """The children's logs outlive the sandbox, in the directory it names at start and at exit."""
    started = re.search(r"^logs: +(\S+) \(kept when the sandbox stops\)$", banner, flags=re.MULTILINE)
    assert started, banner
    logs = Path(started.group(1))
    try:
        kept = rf"^logs kept: +{re.escape(str(logs))}: control-plane/, controller.log, webhook.log$"
        assert re.search(kept, out, flags=re.MULTILINE), out
        assert '"msg": "serving"' in (logs / "webhook.log").read_text()
        assert "leading: holds Lease" in (logs / "controller.log").read_text()
    finally:
        shutil.rmtree(logs, ignore_errors=True)


def _args(tmp_path: Path, **given: object) -> argparse.Namespace:
    values: dict[str, object] = {
        "build": False,
        "kubeconfig": str(tmp_path / "kc"),
        "with_guard": False,
        "config": None,
        "volcano_model": False,
        "volcano_version": "1.16",
        "volcano_stale_cache": False,
    }
    return argparse.Namespace(**{**values, **given})


def test_without_a_control_plane_the_sandbox_says_why_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """No cached control plane and no --build: one line saying why and what runs without one."""
    import vgpu_guard.controlplane
    import vgpu_guard.controlplane.build
    from vgpu_guard.cli import sandbox

    monkeypatch.setattr(vgpu_guard.controlplane, "cached_binaries", lambda: None)
    monkeypatch.setattr(vgpu_guard.controlplane.build, "unavailable_reason", lambda: "needs root")
    assert sandbox.run(_args(tmp_path)) == 2
    assert capsys.readouterr() == (
        "",
        "error: no control plane to run: needs root; `vgpu-guard simulate` runs vgpu-guard without one\n",
    )
    assert not (tmp_path / "kc").exists()


def _no_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    import vgpu_guard.controlplane

    monkeypatch.setattr(vgpu_guard.controlplane, "cached_binaries", lambda: None)


def test_build_flag_builds_the_real_control_plane(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``--build`` with nothing cached calls the build (no real build here) and picks its result."""
    import vgpu_guard.controlplane
    from vgpu_guard.cli import sandbox
    from vgpu_guard.controlplane import Binaries

    built = Binaries("1.20.2", tmp_path / "bin", tmp_path / "src", tmp_path / "etcd")
    calls: list[object] = []

    def ensure_built(log: object) -> Binaries:
        calls.append(log)
        return built

    _no_cache(monkeypatch)
    monkeypatch.setattr(vgpu_guard.controlplane, "ensure_built", ensure_built)
    assert sandbox._binaries(_args(tmp_path, build=True)) is built
    assert len(calls) == 1
    with pytest.raises(RuntimeError, match=r"^no control plane to run: "):
        sandbox._binaries(_args(tmp_path))
    assert len(calls) == 1, "without --build nothing is built"


def test_failed_build_prints_one_line_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A build the user asked for that fails is an error: one line, exit 2."""
    import vgpu_guard.controlplane
    from vgpu_guard.cli import sandbox
    from vgpu_guard.controlplane import BuildError

    def ensure_built(log: object) -> object:
        raise BuildError("make failed (exit 2); last output of /cache/.build-1/build.log:\nline 1\nline 2")

    _no_cache(monkeypatch)
    monkeypatch.setattr(vgpu_guard.controlplane, "ensure_built", ensure_built)
    assert sandbox.run(_args(tmp_path, build=True)) == 2
    out, err = capsys.readouterr()
    assert (out, err) == (
        "",
        "error: --build failed: make failed (exit 2); last output of /cache/.build-1/build.log; "
        "`vgpu-guard simulate` runs vgpu-guard without one\n",
    )
    assert not (tmp_path / "kc").exists()


@pytest.mark.parametrize(
    ("git_version", "scope", "release"),
    [
        ("v1.20.2", "allNamespaces", "1.20"),
        ("v1.27.9-gke.1", "allNamespaces", "1.27"),
        ("v1.28.0", "matchConditions", "1.28"),
        ("v1.33.0", "matchConditions", "1.33"),
        ("", "namespaceOptIn", "unknown"),
    ],
)
def test_pod_scope_follows_the_charts_auto_scope(git_version: str, scope: str, release: str) -> None:
    from vgpu_guard.cli.sandbox import pod_scope

    assert pod_scope({"gitVersion": git_version}) == (scope, release)


def test_all_namespaces_configurations_are_the_charts_for_servers_before_1_28() -> None:
    """No matchConditions (1.20 drops them), every namespace but the excluded ones, no label asked of
    any; the pod CREATE webhooks fail open; what the sandbox labels below 1.21 is what they exclude."""
    from vgpu_guard.cli.sandbox import ALL_NAMESPACES, excluded_namespaces, webhook_configurations

    configs = webhook_configurations("https://127.0.0.1:1234", b"CA", ALL_NAMESPACES)
    hooks = {(c["kind"], h["name"]): h for c in configs for h in c["webhooks"]}
    assert not any("matchConditions" in h for h in hooks.values())
    for (kind, name), hook in hooks.items():
        if name == "queues.vgpu-guard.io":
            continue
        keys = [e["key"] for e in hook["namespaceSelector"]["matchExpressions"]]
        assert keys == ["kubernetes.io/metadata.name"], name
        if name == "pods.vgpu.vgpu-guard.io":
            assert (hook["failurePolicy"], hook["timeoutSeconds"]) == ("Ignore", 3), kind
    assert excluded_namespaces(configs) == ("kube-system", "kube-node-lease", "vgpu-guard")


def test_opt_in_configurations_are_the_charts_preset() -> None:
    """The fail-closed preset below 1.28 (webhooks.scope=namespaceOptIn): no matchConditions, every
    pod-side webhook limited to opted-in namespaces, the pod-allocations UPDATE entry included; queues are
    cluster-scoped and keep no namespaceSelector."""
    from vgpu_guard.cli.sandbox import OPT_IN, opt_in_label, webhook_configurations

    configs = webhook_configurations("https://127.0.0.1:1234", b"CA", OPT_IN)
    hooks = {(c["kind"], h["name"]): h for c in configs for h in c["webhooks"]}
    assert sorted(hooks) == [
        ("MutatingWebhookConfiguration", "pod-updates.vgpu.vgpu-guard.io"),
        ("MutatingWebhookConfiguration", "pods.vgpu.vgpu-guard.io"),
        ("ValidatingWebhookConfiguration", "pod-allocations.vgpu-guard.io"),
        ("ValidatingWebhookConfiguration", "pods.vgpu.vgpu-guard.io"),
        ("ValidatingWebhookConfiguration", "queues.vgpu-guard.io"),
        ("ValidatingWebhookConfiguration", "workloads.vgpu.vgpu-guard.io"),
    ]
    assert not any("matchConditions" in h for h in hooks.values())
    assert opt_in_label(configs) == ("vgpu-guard.io/admission", "enabled")
    required = {"key": "vgpu-guard.io/admission", "operator": "In", "values": ["enabled"]}
    for (_, name), hook in hooks.items():
        assert hook["clientConfig"]["url"].startswith("https://127.0.0.1:1234/"), name
        if name != "queues.vgpu-guard.io":
            assert required in hook["namespaceSelector"]["matchExpressions"], name
    allocations = hooks[("ValidatingWebhookConfiguration", "pod-allocations.vgpu-guard.io")]
    assert [r["operations"] for r in allocations["rules"]] == [["UPDATE"], ["CREATE"]]


def test_scope_lines_say_which_pods_reach_the_webhook() -> None:
    from vgpu_guard.cli.sandbox import scope_lines

    assert scope_lines("matchConditions", "1.33", "", ("default",)) == [
        "scope:      matchConditions (Kubernetes 1.33): only vGPU pods reach the pod webhooks"
    ]
    assert scope_lines(
        "allNamespaces", "1.20", "kubernetes.io/metadata.name", ("kube-system", "kube-node-lease")
    ) == [
        "scope:      all namespaces (Kubernetes 1.20 has no matchConditions): every pod of every namespace but "
        "the excluded ones reaches the pod webhooks, which fail open",
        "labelled:   kube-system, kube-node-lease with kubernetes.io/metadata.name=<name> (1.21+ sets it), which "
        "keeps them out",
    ]
    assert len(scope_lines("allNamespaces", "1.25", "kubernetes.io/metadata.name", ())) == 1
    assert scope_lines("namespaceOptIn", "1.20", "vgpu-guard.io/admission=enabled", ("default",)) == [
        "scope:      namespace opt-in (Kubernetes 1.20 has no matchConditions): only pods in namespaces "
        "labelled vgpu-guard.io/admission=enabled reach the pod webhooks",
        "labelled:   default (`kubectl label namespace NAME vgpu-guard.io/admission=enabled` opts in another)",
    ]


def test_the_readme_shows_the_lines_the_sandbox_prints() -> None:
    """The README's example of the sandbox's first lines is what ``banner`` prints for its command."""
    from vgpu_guard.cli.sandbox_settings import settings_from

    settings = settings_from(None, volcano_model=True, volcano_version="1.16", stale_cache=False)
    lines = settings.banner(with_guard=True)
    assert lines[0].startswith("runs:       kube-apiserver, kube-controller-manager, kube-scheduler, etcd; ")
    assert lines[-1].startswith(
        "mode:       volcano (scheduling.routing off: the default with --volcano-model"
    )
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert "\n".join(lines) in readme
