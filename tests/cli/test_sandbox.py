"""``vgpu-guard sandbox --with-guard`` as a user runs it: a real process, the official ``kubernetes``
client on the kubeconfig it writes, our webhook answering through the registered configurations,
our controller binding, and Ctrl-C stopping everything."""

from __future__ import annotations

import argparse
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kubernetes import client, config

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


def test_sandbox_with_guard_serves_the_official_client_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    pytest.importorskip("celpy")
    kubeconfig, log = tmp_path / "kubeconfig", tmp_path / "sandbox.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [str(BIN), "sandbox", "--kubeconfig", str(kubeconfig), "--with-guard", "--backend", "double"],
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        banner = _wait_for_line(log, process, "ready; Ctrl-C stops everything")
        assert "in memory: everything is lost when it stops" in banner
        webhook_match = re.search(r"webhook: +(https://\S+)", banner)
        assert webhook_match, banner
        webhook = webhook_match.group(1)

        api = config.new_client_from_config(str(kubeconfig))
        try:
            core = client.CoreV1Api(api)
            crds = client.ApiextensionsV1Api(api).list_custom_resource_definition()
            names = {c.metadata.name for c in crds.items}
            assert {
                "gpuledgers.vgpu-guard.io",
                "queues.scheduling.volcano.sh",
                "podgroups.scheduling.volcano.sh",
            } <= names
            hooks = client.AdmissionregistrationV1Api(api).list_validating_webhook_configuration()
            urls = {h.client_config.url for c in hooks.items for h in c.webhooks}
            assert f"{webhook}/validate/pods" in urls

            core.create_node(NODE)
            created = core.create_namespaced_pod("default", _pod("slice", "3000"))
            assert created.spec.scheduler_name == "vgpu-guard"  # routed to our controller
            assert created.metadata.annotations["volcano.sh/vgpu-mode"] == "hami-core"
            deadline = time.monotonic() + 30
            pod = core.read_namespaced_pod("slice", "default")
            while pod.spec.node_name is None and time.monotonic() < deadline:
                time.sleep(0.1)
                pod = core.read_namespaced_pod("slice", "default")
            assert pod.spec.node_name == "t4-0"
            assert pod.metadata.annotations["volcano.sh/vgpu-ids-new"] == "GPU-t4-0-0,NVIDIA,3000,0:"

            with pytest.raises(client.ApiException) as denied:
                core.create_namespaced_pod("default", _pod("typo", "12Gi"))
            assert denied.value.status == 403
            assert (
                'admission webhook \\"pods.vgpu.vgpu-guard.io\\" denied the request: [vgpu-memory-unit]'
                in denied.value.body
            )
        finally:
            api.close()
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        code = process.wait(timeout=30)
    out = log.read_text()
    assert code == 0, out
    assert out.rstrip().endswith("stopped"), out
    assert _refuses(webhook), "the webhook child outlived the sandbox"


def test_sandbox_says_in_its_first_line_that_it_fell_back_to_the_double(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No cached control plane and no --build: the double, and the first line says why."""
    import vgpu_guard.controlplane
    import vgpu_guard.controlplane.build
    from vgpu_guard.cli import sandbox

    monkeypatch.setattr(vgpu_guard.controlplane, "cached_binaries", lambda: None)
    monkeypatch.setattr(vgpu_guard.controlplane.build, "unavailable_reason", lambda: "needs root")
    args = argparse.Namespace(backend="auto", build=False)
    assert sandbox._choose(args) == (
        None,
        "backend: API double (in memory; no real control plane: needs root)",
    )
    args = argparse.Namespace(backend="real", build=False)
    with pytest.raises(RuntimeError, match=r"^--backend real: needs root$"):
        sandbox._choose(args)
