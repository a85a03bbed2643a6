"""``vgpu-guard sandbox --with-guard`` as a user runs it: a real process, the official ``kubernetes``
client on the kubeconfig it writes, our webhook answering through the registered configurations,
our controller binding, and Ctrl-C stopping everything."""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import cast

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client import V1ObjectMeta, V1ValidatingWebhook

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
        assert (
            "\nscope:      matchConditions (Kubernetes 1.33): only vGPU pods reach the pod webhooks\n"
            in banner
        )
        webhook_match = re.search(r"webhook: +(https://[^,\s]+), metrics (http://\S+/metrics)", banner)
        assert webhook_match, banner
        webhook = webhook_match.group(1)
        assert re.search(r"controller: leader-elected, .*, metrics http://\S+/metrics", banner), banner
        with urllib.request.urlopen(webhook_match.group(2), timeout=10) as response:
            assert b"vgpu_guard_admission_requests_total" in response.read()

        api = config.new_client_from_config(str(kubeconfig))  # type: ignore[no-untyped-call]  # unannotated in kubernetes
        try:
            core = client.CoreV1Api(api)
            crds = client.ApiextensionsV1Api(api).list_custom_resource_definition()
            # The client's models make every field optional; a server's answers carry these.
            names = {cast(V1ObjectMeta, c.metadata).name for c in crds.items}
            assert {
                "gpuledgers.vgpu-guard.io",
                "queues.scheduling.volcano.sh",
                "podgroups.scheduling.volcano.sh",
            } <= names
            hooks = client.AdmissionregistrationV1Api(api).list_validating_webhook_configuration()
            urls = {
                h.client_config.url for c in hooks.items for h in cast(list[V1ValidatingWebhook], c.webhooks)
            }
            assert f"{webhook}/validate/pods" in urls

            # kubernetes annotates the bodies as models only; its validate_call takes a dict as the model.
            core.create_node(NODE)  # type: ignore[arg-type]  # a dict body (see above)
            created = core.create_namespaced_pod("default", _pod("slice", "3000"))  # type: ignore[arg-type]  # a dict body
            assert created.spec is not None and created.metadata is not None
            assert created.metadata.annotations is not None
            assert created.spec.scheduler_name == "vgpu-guard"  # routed to our controller
            assert created.metadata.annotations["volcano.sh/vgpu-mode"] == "hami-core"
            deadline = time.monotonic() + 30
            pod = core.read_namespaced_pod("slice", "default")
            assert pod.spec is not None
            while pod.spec.node_name is None and time.monotonic() < deadline:
                time.sleep(0.1)
                pod = core.read_namespaced_pod("slice", "default")
                assert pod.spec is not None
            assert pod.spec is not None  # (mypy does not carry the loop's narrowing past it)
            assert pod.spec.node_name == "t4-0"
            assert pod.metadata is not None and pod.metadata.annotations is not None
            assert pod.metadata.annotations["volcano.sh/vgpu-ids-new"] == "GPU-t4-0-0,NVIDIA,3000,0:"

            with pytest.raises(client.ApiException) as denied:
                core.create_namespaced_pod("default", _pod("typo", "12Gi"))  # type: ignore[arg-type]  # a dict body
            assert denied.value.status == 403
            assert denied.value.body is not None
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
    _assert_logs_kept(banner, out)


def _assert_logs_kept(banner: str, out: str) -> None:
    """The children's logs outlive the sandbox, in the directory it names at start and at exit."""
    started = re.search(r"^logs: +(\S+) \(kept when the sandbox stops\)$", banner, flags=re.MULTILINE)
    assert started, banner
    logs = Path(started.group(1))
    try:
        kept = rf"^logs kept: +{re.escape(str(logs))}: controller.log, webhook.log$"
        assert re.search(kept, out, flags=re.MULTILINE), out
        assert '"msg": "serving"' in (logs / "webhook.log").read_text()
        assert "leading: holds Lease" in (logs / "controller.log").read_text()
    finally:
        shutil.rmtree(logs, ignore_errors=True)


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
    args = argparse.Namespace(backend="auto", build=True)
    assert sandbox._choose(args) == (
        built,
        "backend: real control plane, Kubernetes 1.20.2 "
        "(kube-apiserver, kube-controller-manager, kube-scheduler, etcd)",
    )
    assert len(calls) == 1
    assert sandbox._choose(argparse.Namespace(backend="auto", build=False))[0] is None
    assert len(calls) == 1, "without --build nothing is built"


@pytest.mark.parametrize("backend", ["auto", "real"])
def test_failed_build_prints_one_line_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path, backend: str
) -> None:
    """A build the user asked for that fails is an error on any backend: one line, exit 2."""
    import vgpu_guard.controlplane
    from vgpu_guard.cli import sandbox
    from vgpu_guard.controlplane import BuildError

    def ensure_built(log: object) -> object:
        raise BuildError("make failed (exit 2); last output of /cache/.build-1/build.log:\nline 1\nline 2")

    _no_cache(monkeypatch)
    monkeypatch.setattr(vgpu_guard.controlplane, "ensure_built", ensure_built)
    args = argparse.Namespace(
        backend=backend,
        build=True,
        kubeconfig=str(tmp_path / "kc"),
        port=0,
        with_guard=False,
        config=None,
        volcano_model=False,
        volcano_version="1.16",
        volcano_stale_cache=False,
    )
    assert sandbox.run(args) == 2
    out, err = capsys.readouterr()
    assert (out, err) == (
        "",
        "error: --build failed: make failed (exit 2); last output of /cache/.build-1/build.log; "
        "--backend double runs the API double\n",
    )
    assert not (tmp_path / "kc").exists()


@pytest.mark.parametrize(
    ("git_version", "scope", "release"),
    [
        ("v1.20.2", "allNamespaces", "1.20"),
        ("v1.27.9-gke.1", "allNamespaces", "1.27"),
        ("v1.28.0", "matchConditions", "1.28"),
        ("v1.33.0+vgpu-guard-double", "matchConditions", "1.33"),
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


async def test_the_doubles_kubectl_line_is_what_kubectl_does(tmp_path: Path) -> None:
    """Each claim of the ``kubectl:`` line the sandbox prints on the double, run with the real
    kubectl against the API double: what it says works exits 0, what it says needs the real
    backend exits 1 with the double's refusal."""
    from tests.e2e.clients import Kubectl
    from vgpu_guard.apidouble import serve_double
    from vgpu_guard.cli.sandbox_settings import DOUBLE_KUBECTL

    assert DOUBLE_KUBECTL.startswith(
        "kubectl:    get (NAME and AGE columns only), describe, wait, label, annotate"
    )
    pod = yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                          "spec": {"containers": [{"name": "c", "image": "busybox"}]}})  # fmt: skip
    config_map = yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})
    changed_map = yaml.safe_dump(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}}
    )
    async with serve_double(tmp_path) as api:
        kubectl = Kubectl(api.kubeconfig, tmp_path / "cache")
        works = [
            await kubectl("create", "-f", "-", "--validate=false", stdin=pod),
            await kubectl("apply", "-n", "default", "-f", "-", "--validate=false", stdin=config_map),
            got := await kubectl("get", "pods", "-n", "default"),
            await kubectl("describe", "pod", "p", "-n", "default"),
            await kubectl("label", "pod", "p", "-n", "default", "tier=gpu"),
            await kubectl("annotate", "pod", "p", "-n", "default", "note=x"),
            await kubectl("wait", "pod/p", "-n", "default", "--for=jsonpath={.metadata.labels.tier}=gpu"),
            await kubectl("delete", "pod", "p", "-n", "default", "--wait=false"),
        ]
        refused = {
            "UnsupportedMediaType": await kubectl(
                "apply", "-n", "default", "-f", "-", "--validate=false", stdin=changed_map
            ),
            "failed to download openapi": await kubectl(
                "apply", "-n", "default", "-f", "-", stdin=config_map
            ),
            "the server could not find the requested resource": await kubectl("explain", "pods"),
            "unknown format": await kubectl("create", "namespace", "x"),
            "does not serve impersonation": await kubectl("get", "pods", "--as", "bob"),
        }
    assert [run.code for run in works] == [0] * len(works), [run.transcript() for run in works]
    assert got.stdout.split("\n")[0].split() == ["NAME", "AGE"], got.transcript()
    for words, run in refused.items():
        assert run.code == 1 and words in run.stderr, (words, run.transcript())


def test_only_the_double_prints_the_kubectl_line() -> None:
    from vgpu_guard.cli.sandbox_settings import DOUBLE_KUBECTL, settings_from

    settings = settings_from(None, volcano_model=False, volcano_version="1.16", stale_cache=False)
    double = settings.banner(real=False, with_guard=True)
    assert double[-1] == DOUBLE_KUBECTL and double[-2].startswith("mode:       routing")
    assert DOUBLE_KUBECTL not in settings.banner(real=True, with_guard=True)
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert f"\n{DOUBLE_KUBECTL}\n" in readme  # the README's example of the double's lines
