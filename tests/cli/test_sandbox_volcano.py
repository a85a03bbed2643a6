"""``vgpu-guard sandbox --with-guard --config FILE --volcano-model`` as a user runs it, on the real
control plane (1.20.2; the sandbox has no other).

The sandbox's first lines say what runs and what does not; the children read the user's file (a
rule set to warn shows it); Volcano's model makes a Volcano Job's PodGroup ``<job>-<uid>`` and
then its pods, and binds vGPU pods the way Volcano does, through whatever the mode registers: in
volcano mode (1.20: the all-namespaces scope, one fail-open allocation entry that arbitrates) the
arbiter refuses the stale session's third 12 GiB assignment to a 24 GiB card; with
``scheduling.routing: true`` in the file the pods, the Job's included, are routed to vgpu-guard's
controller; the official client works on the kubeconfig, and Ctrl-C stops everything.
"""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client, config

from tests.builders import gpu_node
from tests.cli.test_sandbox import BIN, _assert_logs_kept, _refuses, _wait_for_line
from vgpu_guard.cli.sandbox_settings import settings_from

Obj = dict[str, Any]
CARD = 24576


def _node(name: str) -> Obj:
    """One 24 GiB A10 node in its own pool (the pool label is what the pods select)."""
    return gpu_node(name, count=1, memory=CARD, card_type="NVIDIA-NVIDIA A10", labels={"pool": name}, cpu="8")


def _spec(memory: str, pool: str) -> Obj:
    limits = {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": memory}
    return {
        "schedulerName": "volcano",
        "nodeSelector": {"pool": pool},
        "containers": [{"name": "main", "image": "busybox", "resources": {"limits": limits}}],
    }


def _pod(name: str, memory: str, pool: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": _spec(memory, pool)}


def _job(name: str, pool: str) -> Obj:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "minAvailable": 1,
            "schedulerName": "volcano",
            "tasks": [{"name": "worker", "replicas": 1, "template": {"spec": _spec("8192", pool)}}],
        },
    }


def _until(what: str, check: Callable[[], Any], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout:.0f}s: {what}")


@contextmanager
def _sandbox(tmp_path: Path, *flags: str, config_text: str) -> Iterator[tuple[str, Path, client.ApiClient]]:
    """A running sandbox (its output so far, its log, an API client), stopped with Ctrl-C after; the
    processes' logs in tmp_path/logs."""
    (tmp_path / "config.yaml").write_text(config_text)
    kubeconfig, log = tmp_path / "kubeconfig", tmp_path / "sandbox.log"
    argv = [str(BIN), "sandbox", "--kubeconfig", str(kubeconfig), "--with-guard", "--volcano-model"]
    argv += ["--config", str(tmp_path / "config.yaml"), "--logs", str(tmp_path / "logs"), *flags]
    with log.open("wb") as sink:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT)
    try:
        banner = _wait_for_line(log, process, "ready; Ctrl-C stops everything", timeout=180)
        api = config.new_client_from_config(str(kubeconfig))  # type: ignore[no-untyped-call]  # unannotated in kubernetes
        try:
            yield banner, log, api
        finally:
            api.close()
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        code = process.wait(timeout=60)
    assert code == 0 and log.read_text().rstrip().endswith("stopped"), log.read_text()


def _pods(api: client.ApiClient) -> dict[str, Obj]:
    """The default namespace's pods by name, as plain objects (the client's models are all-optional)."""
    listed = client.CoreV1Api(api).list_namespaced_pod("default").items
    plain = (api.sanitize_for_serialization(item) for item in listed)  # type: ignore[no-untyped-call]  # unannotated in kubernetes
    return {p["metadata"]["name"]: p for p in plain}


def _node_of(api: client.ApiClient, pod: str) -> str | None:
    found = _pods(api).get(pod)
    return found["spec"].get("nodeName") if found else None


def _custom(api: client.ApiClient, group: str, version: str, plural: str, name: str = "") -> Obj:
    custom = client.CustomObjectsApi(api)
    if name:
        return cast(Obj, custom.get_namespaced_custom_object(group, version, "default", plural, name))
    return cast(Obj, custom.list_namespaced_custom_object(group, version, "default", plural))


def _job_pods(api: client.ApiClient, job: str) -> tuple[str, list[Obj]]:
    """The Job's PodGroup name, once its pods exist (Volcano's job controller waits for Inqueue)."""

    def made() -> tuple[str, list[Obj]] | None:
        groups = _custom(api, "scheduling.volcano.sh", "v1beta1", "podgroups")["items"]
        named = [g["metadata"]["name"] for g in groups if g["metadata"]["name"].startswith(f"{job}-")]
        pods = [p for name, p in _pods(api).items() if name.startswith(f"{job}-")]
        return (named[0], pods) if named and pods else None

    found: tuple[str, list[Obj]] = _until(f"the PodGroup and pods of Job {job}", made)
    return found


def test_the_real_control_plane_with_config_and_volcano_model(tmp_path: Path) -> None:
    """1.20.2: the children read --config (the unit rule only warns), Volcano's model runs in volcano
    mode: a Job gets PodGroup <job>-<uid> then its pod, bound; from a stale session three 12 GiB
    pods go to one 24 GiB card, the arbiter refuses the third, which stays Pending."""
    rules = "admission:\n  rules:\n    vgpu-memory-unit: warn\n"
    with _sandbox(tmp_path, "--volcano-stale-cache", config_text=rules) as (
        banner,
        log,
        api,
    ):
        lines = banner.splitlines()
        assert lines[0].startswith("cluster:    real control plane, Kubernetes 1.20.2")
        assert lines[1].startswith(
            "runs:       kube-apiserver, kube-controller-manager, kube-scheduler, etcd; "
        )
        assert "a model of Volcano 1.16 (job controller: PodGroups and pods of Volcano Jobs;" in lines[1]
        assert lines[2].startswith("not run:    kubelets (a bound pod keeps phase Pending); Volcano itself")
        assert lines[3].startswith(
            "mode:       volcano (scheduling.routing off: the default with --volcano-model"
        )
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        core.create_node(_node("sbx-0"))  # type: ignore[arg-type]  # a dict body
        typo = core.create_namespaced_pod("default", _pod("typo", "12Gi", "none"))  # type: ignore[arg-type]  # a dict body
        assert (
            typo.metadata is not None and typo.metadata.name == "typo"
        )  # warned, not denied: the file's rule
        for i in range(3):
            core.create_namespaced_pod("default", _pod(f"web-{i}", "12288", "sbx-0"))  # type: ignore[arg-type]  # a dict body
        refused = _until(
            "the arbiter's refusal in the sandbox's output", lambda: "denied (Binding)" in log.read_text()
        )
        assert refused
        out = log.read_text()
        assert (
            "[vgpu-assignment-capacity] metadata.annotations[volcano.sh/vgpu-ids-new]: GPU GPU-sbx-0-0" in out
        )
        web = [f"web-{i}" for i in range(3)]
        assert _until("two of the three bound", lambda: sum(1 for w in web if _node_of(api, w)) == 2)
        time.sleep(2)  # later sessions decide the third again: still no room
        assert sum(1 for w in web if _node_of(api, w)) == 2
        custom.create_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", "default", "jobs", _job("train", "sbx-1")
        )
        core.create_node(_node("sbx-1"))  # type: ignore[arg-type]  # a dict body
        group, pods = _job_pods(api, "train")
        job = _custom(api, "batch.volcano.sh", "v1alpha1", "jobs", "train")
        assert group == f"train-{job['metadata']['uid']}"
        name = pods[0]["metadata"]["name"]
        assert pods[0]["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == group
        assert _until("the Job's pod bound", lambda: _node_of(api, name) == "sbx-1")
    # The processes' logs outlive the sandbox (the control plane's directory does not).
    logs = tmp_path / "logs"
    assert sorted(p.name for p in logs.iterdir()) == ["control-plane", "controller.log", "webhook.log"]
    assert (logs / "control-plane" / "kube-apiserver.log").stat().st_size > 0
    assert (
        f"logs kept:  {logs}: control-plane/, controller.log, webhook.log"
        in (tmp_path / "sandbox.log").read_text()
    )


def test_a_config_that_routes_with_the_official_client_and_ctrl_c(tmp_path: Path) -> None:
    """The file's scheduling.routing: true wins over --volcano-model's default: a vGPU pod and the
    Job's pods made by Volcano's job controller are routed to, and bound by, vgpu-guard's
    controller; a typo is denied with the rule's text; the webhook serves metrics; after Ctrl-C no
    child is left and the logs are kept."""
    routing = "scheduling:\n  routing: true\n"
    with _sandbox(tmp_path, config_text=routing) as (banner, _log, api):
        lines = banner.splitlines()
        assert lines[0].startswith("cluster:    real control plane, Kubernetes 1.20.2")
        assert lines[3] == (
            "mode:       routing (scheduling.routing on, from --config): vgpu-guard's controller places vGPU pods"
        )
        webhook_match = re.search(r"webhook: +(https://[^,\s]+), metrics (http://\S+/metrics)", banner)
        assert webhook_match, banner
        webhook = webhook_match.group(1)
        with urllib.request.urlopen(webhook_match.group(2), timeout=10) as response:
            assert b"vgpu_guard_admission_requests_total" in response.read()
        hooks = client.AdmissionregistrationV1Api(api).list_validating_webhook_configuration()
        urls = {h.client_config.url for c in hooks.items for h in c.webhooks or []}
        assert f"{webhook}/validate/pods" in urls

        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        core.create_node(_node("sbx-0"))  # type: ignore[arg-type]  # a dict body
        created = core.create_namespaced_pod("default", _pod("slice", "3000", "sbx-0"))  # type: ignore[arg-type]  # a dict body
        assert created.spec is not None and created.spec.scheduler_name == "vgpu-guard"
        assert _until("the routed pod bound", lambda: _node_of(api, "slice") == "sbx-0")
        ids = _pods(api)["slice"]["metadata"]["annotations"]["volcano.sh/vgpu-ids-new"]
        assert ids.startswith("GPU-sbx-0-0,NVIDIA,3000,"), ids
        with pytest.raises(client.ApiException) as denied:
            core.create_namespaced_pod("default", _pod("typo", "12Gi", "sbx-0"))  # type: ignore[arg-type]  # a dict body
        assert denied.value.status == 403
        assert 'admission webhook \\"pods.vgpu.vgpu-guard.io\\" denied the request: [vgpu-memory-unit]' in (
            denied.value.body or ""
        )
        custom.create_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", "default", "jobs", _job("train", "sbx-0")
        )
        _, pods = _job_pods(api, "train")
        name = pods[0]["metadata"]["name"]
        assert pods[0]["spec"]["schedulerName"] == "vgpu-guard"  # routed by the webhook
        assert _until("the routed Job pod bound", lambda: _node_of(api, name) == "sbx-0")
    assert _refuses(webhook), "the webhook child outlived the sandbox"
    _assert_logs_kept(banner, (tmp_path / "sandbox.log").read_text())


@pytest.mark.parametrize(
    ("file", "volcano", "routing", "env_routing"),
    [
        (None, False, True, "true"),
        (None, True, False, "false"),
        ("scheduling:\n  routing: false\n", False, False, None),
        ("scheduling:\n  routing: true\n", True, True, None),
    ],
)
def test_the_mode_follows_the_file_then_the_volcano_model(
    tmp_path: Path, file: str | None, volcano: bool, routing: bool, env_routing: str | None
) -> None:
    path = None
    if file is not None:
        path = tmp_path / "config.yaml"
        path.write_text(file)
    settings = settings_from(
        str(path) if path else None, volcano_model=volcano, volcano_version="1.15", stale_cache=False
    )
    assert settings.routing is routing
    env = settings.child_env(host="127.0.0.1", port=1, cert=tmp_path / "c", key=tmp_path / "k")
    assert (
        env.get("VGPU_GUARD__SCHEDULING__ROUTING") == env_routing
    )  # a file's own setting is never overridden
    assert env["VGPU_GUARD__WEBHOOK__PORT"] == "1"
    assert (settings.volcano is not None) is volcano


def test_a_bad_config_or_volcano_version_exits_2_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from vgpu_guard.cli import sandbox

    bad = tmp_path / "config.yaml"
    bad.write_text("scheduling:\n  policy: random\n")
    base = {"build": False, "kubeconfig": str(tmp_path / "kc"), "with_guard": True}
    args = argparse.Namespace(
        **base, config=str(bad), volcano_model=False, volcano_version="1.16", volcano_stale_cache=False
    )
    assert sandbox.run(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"error: {bad}") and "scheduling.policy" in err
    args = argparse.Namespace(
        **base, config=None, volcano_model=True, volcano_version="0.9", volcano_stale_cache=False
    )
    assert sandbox.run(args) == 2
    assert capsys.readouterr().err.startswith("error: Volcano version '0.9' is not modelled")
    assert not (tmp_path / "kc").exists()
