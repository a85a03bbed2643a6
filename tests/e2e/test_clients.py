"""kubectl and Helm, the way users meet vgpu-guard, on the real control plane (``conftest.guard``).

Every assertion is on what the user's terminal shows: exit code, stdout and stderr of the real
``kubectl`` (``golden/KUBECTL_VERSION`` records which), and the release Helm v4 reports
(``clients.Helm``). Golden files live in ``golden/``; only volatile bits are normalised (the
story's namespace, the admin's username, ages, column padding). ``UPDATE_GOLDEN=1`` rewrites them
for review. The last test runs the README's sandbox block verbatim against ``vgpu-guard sandbox``.

The cluster backend only (``conftest.REAL_CLIENTS_ONLY``): the API double serves JSON only
(docs/apidouble.md).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.clients import GOLDEN, REPO, Helm, Kubectl, Run, assert_golden, kubectl_binary, normalise
from tests.e2e.conftest import WEBHOOK_0, Env, gpu_pod, plain_pod
from tests.e2e.harness import CONTROLLER_SA, IB_LABEL, NAMESPACE, POOL_LABEL, WEBHOOK_SA, Guard, until
from tests.manifests.chart import render_objects, render_templates
from vgpu_guard.cli.documents import parse_documents

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.real_clients_only]

EXAMPLES = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "examples").rglob("*.yaml"))
HELM_RELEASE = HELM_NAMESPACE = "helm-e2e"


@pytest.fixture
def kubectl(env: Env, tmp_path: Path) -> Kubectl:
    return Kubectl(env.backend.admin_kubeconfig, tmp_path / "kube-cache")


def transcript(run: Run, env: Env) -> str:
    """The run as the golden files keep it: the story's namespace and the admin's name (which
    differs between backends and clusters) replaced."""
    return normalise(run.transcript(), {env.ns: "NAMESPACE", env.backend.admin_user: "ADMIN"})


async def test_kubectl_version_is_the_golden_one() -> None:
    """The golden files hold kubectl's wording: they were written with this client version."""
    out = await asyncio.to_thread(
        subprocess.run, [kubectl_binary(), "version", "--client"], capture_output=True, text=True, check=True
    )
    first = out.stdout.splitlines()[0]
    assert first == (GOLDEN / "KUBECTL_VERSION").read_text().strip()


# -- kubectl apply of every example -----------------------------------------------------------------
async def _delete_file(kubectl: Kubectl, path: str, ns: str) -> None:
    """Cluster-scoped objects of an example (Nodes, Queues, PriorityClasses) outlive the story's
    namespace: delete them, not waiting for pods a kubelet-less node never finishes."""
    await kubectl("delete", "-n", ns, "-f", path, "--ignore-not-found", "--wait=false")


def _golden_name(path: str) -> str:
    return path.removeprefix("examples/").replace("/", "-").removesuffix(".yaml")


@pytest.mark.parametrize("path", EXAMPLES)
async def test_kubectl_apply_example(env: Env, kubectl: Kubectl, path: str) -> None:
    """``kubectl apply --dry-run=server`` then ``kubectl apply`` of one example, twice: the denials'
    exact stderr, the mutations' ``Warning:`` lines; the dry run says the same and creates nothing;
    applying the file again changes nothing and fails on nothing new."""
    golden = _golden_name(path)
    env.undo.append(lambda: _delete_file(kubectl, path, env.ns))
    dry = await kubectl("apply", "-n", env.ns, "-f", path, "--dry-run=server")
    assert_golden(f"apply-{golden}.dry-run.txt", transcript(dry, env))
    listed = await kubectl("get", "-n", env.ns, "-f", path, "--ignore-not-found", "-o", "name")
    assert (listed.code, listed.stdout) == (0, ""), listed.transcript()
    real = await kubectl("apply", "-n", env.ns, "-f", path)
    assert_golden(f"apply-{golden}.txt", transcript(real, env))
    if not _judged_together(path):
        assert real.code == dry.code
        assert real.stderr == dry.stderr
        assert real.stdout == dry.stdout.replace(" (server dry run)", "")
    # The same file again (issue 38): every object it created is "unchanged" or "configured", never
    # refused for the fields admission normalised (pod spec is immutable); denied objects are
    # denied again with the same words.
    again = await kubectl("apply", "-n", env.ns, "-f", path)
    assert_golden(f"apply-{golden}.again.txt", transcript(again, env))
    assert "may not change fields" not in again.stderr, again.transcript()


async def test_a_key_given_twice_is_applied_with_its_last_value(
    env: Env, kubectl: Kubectl, tmp_path: Path
) -> None:
    """What ``review`` says of a repeated YAML key ("the last value is used, as kubectl applies
    it") holds for the real client and server: kubectl sends the last value without a word."""
    path = tmp_path / "twice.yaml"
    path.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: twice\ndata:\n  k: first\n  k: last\n"
    )
    env.undo.append(lambda: kubectl("delete", "-n", env.ns, "-f", str(path), "--ignore-not-found"))
    applied = await kubectl("apply", "-n", env.ns, "-f", str(path))
    assert (applied.code, applied.stderr) == (0, ""), applied.transcript()
    stored = await kubectl("get", "configmap", "twice", "-n", env.ns, "-o", "jsonpath={.data.k}")
    assert stored.stdout == "last"
    [document] = parse_documents(path.read_text(), str(path))
    assert document.object["data"]["k"] == "last"
    assert document.warnings == (
        'line 7: key "k" is given twice in one mapping (first on line 6); the last value is used, '
        "as kubectl applies it",
    )


def _judged_together(path: str) -> bool:
    """Files of several Queues: each Queue is judged against the guarantees stored, and a dry run
    stores nothing, so the dry run of the third Queue does not count the first two (as on any API
    server); their dry run differs from the real apply by design, and both are golden files."""
    kinds = [str(d.get("kind")) for d in yaml.safe_load_all((REPO / path).read_text()) if d]
    return kinds.count("Queue") > 1


# -- a vGPU pod left to kube-scheduler while Volcano schedules vGPU pods (issue 43 item 9) ---------
@pytest.mark.parametrize("setting", ["", "volcano"], ids=["warned", "admission.schedulerName"])
async def test_kubectl_apply_of_a_vgpu_pod_naming_no_scheduler_in_volcano_mode(
    env: Env, kubectl: Kubectl, tmp_path: Path, setting: str
) -> None:
    """The webhook as a Volcano user runs it (routing off). A vGPU pod file without
    ``schedulerName`` was admitted without a word, and kube-scheduler would bind it with no GPU
    assignment; kubectl now prints the warning with the fix, or, with ``admission.schedulerName:
    volcano``, what was set. The stored pod shows which scheduler it was left to (on the project's
    control plane kube-scheduler runs, and binds the warned pod with no GPU assignment)."""
    await env.guard.processes[WEBHOOK_0].stop()
    overrides = {"VGPU_GUARD__SCHEDULING__ROUTING": "false"}
    if setting:
        overrides["VGPU_GUARD__ADMISSION__SCHEDULER_NAME"] = setting
    # One identity per setting: the harness keeps a process (and its environment) by identity.
    await env.guard.ensure("webhook", "e2e-webhook-volcano" + (f"-{setting}" if setting else ""), overrides)
    pod = gpu_pod("forgot-scheduler", 1000, pool="seed-000")
    del pod["spec"]["schedulerName"]
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(pod))
    applied = await kubectl("apply", "-n", env.ns, "-f", str(path))
    name = "volcano-mode-no-scheduler" + ("-set" if setting else "") + ".txt"
    assert_golden(name, normalise(transcript(applied, env), {str(path): "pod.yaml"}))
    stored = await kubectl(
        "get", "pod", "forgot-scheduler", "-n", env.ns, "-o", "jsonpath={.spec.schedulerName}"
    )
    assert stored.stdout == (setting or "default-scheduler"), stored.transcript()


# -- what kubectl shows of our objects -------------------------------------------------------------
def _printer_header(crd_file: str) -> list[str]:
    """The columns ``kubectl get`` prints for a CRD: NAME, then every priority-0 printer column."""
    crd = yaml.safe_load((REPO / "manifests" / "crds" / crd_file).read_text())
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    columns = [
        c["name"].upper() for c in version.get("additionalPrinterColumns") or [] if not c.get("priority")
    ]
    return ["NAME", *columns]


async def test_kubectl_get_ledgers_and_placements(env: Env, kubectl: Kubectl) -> None:
    """``kubectl get gpuledgers`` prints the CRD's printer columns, one row per node with a ledger;
    ``gangplacements`` (namespaced) prints its own header once a gang has one."""
    pod = gpu_pod("ledger-maker", 1000, pool="seed-000")
    applied = await kubectl("apply", "-n", env.ns, "-f", "-", stdin=yaml.safe_dump(pod))
    assert applied.code == 0, applied.transcript()
    await until("a ledger for e2e-a10-0", lambda: env.ledger("e2e-a10-0"))
    ledgers = await kubectl("get", "gpuledgers")
    assert ledgers.code == 0, ledgers.transcript()
    lines = ledgers.stdout.splitlines()
    assert lines[0].split() == _printer_header("gpuledgers.vgpu-guard.io.yaml")
    assert any(line.split()[0] == "e2e-a10-0" for line in lines[1:]), ledgers.stdout
    placements = await kubectl("get", "gangplacements", "-A")
    assert placements.code == 0, placements.transcript()
    if placements.stdout:
        header = placements.stdout.splitlines()[0].split()
        assert header == ["NAMESPACE", *_printer_header("gangplacements.vgpu-guard.io.yaml")]
    else:
        assert placements.stderr == "No resources found\n"


async def test_kubectl_describe_pending_pod(env: Env, kubectl: Kubectl) -> None:
    """A vGPU pod no card can hold stays Pending: ``kubectl describe`` shows our PodScheduled
    condition and the FailedScheduling Event with the reason."""
    pod = gpu_pod("too-big", 30000, pool="seed-000")
    applied = await kubectl("apply", "-n", env.ns, "-f", "-", stdin=yaml.safe_dump(pod))
    assert applied.code == 0, applied.transcript()

    async def event_shown() -> tuple[str, tuple[int, int]] | None:
        """The description once it has the event, with the node counts of the same moment (a
        node another story deleted may still be in the controller's view for a moment)."""
        out = await kubectl("describe", "pod", "-n", env.ns, "too-big")
        if "FailedScheduling" not in out.stdout:
            return None
        counted = await _node_counts(kubectl, "seed-000")
        found = _NODE_COUNTS.search(out.stdout)
        shown = tuple(int(g) for g in found.groups()) if found else ()
        return (out.stdout, counted) if shown[:1] == counted[:1] else None

    described, counted = await until("the FailedScheduling event in kubectl describe", event_shown)
    sections = _sections(described, ("Conditions:", "Events:"))
    text = normalise(sections, {env.ns: "NAMESPACE"})
    assert_golden("describe-pending-pod.txt", _node_counts_out(text, counted))


async def _node_counts(kubectl: Kubectl, pool: str) -> tuple[int, int]:
    """(all Nodes, Nodes outside ``pool``) as the cluster has them: an ``E2E_KUBECONFIG`` cluster
    may have nodes of its own, which the scheduling message counts too."""
    listed = await kubectl("get", "nodes", "-o", "json")
    assert listed.code == 0, listed.transcript()
    nodes = json.loads(listed.stdout)["items"]
    in_pool = sum(1 for n in nodes if (n["metadata"].get("labels") or {}).get(POOL_LABEL) == pool)
    return len(nodes), len(nodes) - in_pool


_NODE_COUNTS = re.compile(
    r"0/(\d+) nodes are available: (\d+) nodes don't match the pod's node selector/affinity, "
    r"(\d+) nodes have no vGPU devices"
)


def _node_counts_out(text: str, counted: tuple[int, int]) -> str:
    """The message's node counts checked against ``counted`` and replaced by placeholders, so the
    golden file holds on any cluster: every node outside the pool is either GPU-less (counted
    first) or does not match the pod's node selector."""
    total, elsewhere = counted
    found = _NODE_COUNTS.search(text)
    assert found, text
    shown, unmatched, gpu_less = (int(g) for g in found.groups())
    assert (shown, unmatched + gpu_less) == (total, elsewhere), (counted, text)
    start, end = found.span()
    placeholders = (
        "0/<nodes> nodes are available: <n> nodes don't match the pod's node selector/affinity, "
        "<n> nodes have no vGPU devices"
    )
    return text[:start] + placeholders + text[end:]


async def test_kubectl_wait(env: Env, kubectl: Kubectl) -> None:
    """``kubectl wait`` for our PodScheduled=False condition, then for the pod's deletion: each
    prints ``condition met`` and returns long before its timeout (a watch the server neither serves
    nor refuses would hang it). A finalizer holds the deleted pod until the wait is watching."""
    name, finalizer = "wait-for-me", "e2e.vgpu-guard.io/held"
    pod = gpu_pod(name, 30000, pool="seed-000")
    pod["metadata"]["finalizers"] = [finalizer]
    release = ("patch", "pod", "-n", env.ns, name, "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    env.undo.append(lambda: kubectl(*release))
    applied = await kubectl("apply", "-n", env.ns, "-f", "-", stdin=yaml.safe_dump(pod))
    assert applied.code == 0, applied.transcript()

    condition = await _timed(kubectl, "--for=condition=PodScheduled=false", name, env.ns)
    assert (condition.code, condition.stdout, condition.stderr) == (0, f"pod/{name} condition met\n", "")
    deleted = await kubectl("delete", "pod", "-n", env.ns, name, "--wait=false")
    assert (deleted.code, deleted.stdout) == (0, f'pod "{name}" deleted\n'), deleted.transcript()
    waiting = asyncio.create_task(_timed(kubectl, "--for=delete", name, env.ns))
    await asyncio.sleep(2)  # the wait's GET and watch are under way (the pod is still there)
    assert not waiting.done(), waiting.result().transcript()
    released = await kubectl(*release)
    assert (released.code, released.stdout) == (0, f"pod/{name} patched\n"), released.transcript()
    gone = await waiting
    assert (gone.code, gone.stdout, gone.stderr) == (0, f"pod/{name} condition met\n", "")


WAIT_TIMEOUT = 20


async def _timed(kubectl: Kubectl, condition: str, name: str, ns: str) -> Run:
    """``kubectl wait`` for one pod, asserted to end well within its ``--timeout``."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    out = await kubectl(
        "wait", "-n", ns, condition, f"pod/{name}", f"--timeout={WAIT_TIMEOUT}s", within=WAIT_TIMEOUT + 10
    )
    took = loop.time() - started
    assert took < WAIT_TIMEOUT / 2, f"kubectl wait {condition} took {took:.1f}s: {out.transcript()}"
    return out


def _sections(text: str, headings: tuple[str, ...]) -> str:
    """The named top-level sections of ``kubectl describe`` (heading line and its indented body)."""
    out: list[str] = []
    keep = False
    for line in text.splitlines():
        if line and not line[0].isspace():
            keep = line.startswith(headings)
        if keep:
            out.append(line.rstrip())
    return "\n".join(out) + "\n"


async def test_kubectl_explain_ledger_spec(env: Env, kubectl: Kubectl) -> None:
    """``kubectl explain gpuledger.spec`` describes our fields from the CRD's schema."""
    out = await kubectl("explain", "gpuledger.spec")
    assert_golden("explain-gpuledger-spec.txt", transcript(out, env))


INSTALL_DOC = REPO / "docs" / "install.md"


def documented_rights() -> list[tuple[str, str, str]]:
    """(account, question, answer) from docs/install.md's "What the ServiceAccounts may do"."""
    text = INSTALL_DOC.read_text()
    table = text[text.index("<!-- can-i:begin -->") : text.index("<!-- can-i:end -->")]
    out = []
    for line in table.splitlines():
        if line.startswith("| `"):
            account, question, answer = (cell.strip().strip("`") for cell in line.split("|")[1:4])
            out.append((account, question, answer))
    return out


async def test_kubectl_auth_can_i(env: Env, kubectl: Kubectl) -> None:
    """``kubectl auth can-i --as`` for the chart's ServiceAccounts answers what the docs claim."""
    claims = documented_rights()
    assert {account for account, _, _ in claims} == {WEBHOOK_SA, CONTROLLER_SA}
    answers = []
    for account, question, _ in claims:
        identity = f"system:serviceaccount:{NAMESPACE}:{account}"
        out = await kubectl("auth", "can-i", *question.split(), "--as", identity, "-n", env.ns)
        answers.append((account, question, out.stdout.strip()))
    assert answers == claims


# -- Helm -----------------------------------------------------------------------------------------
README_PLACEHOLDERS = {
    "<your registry>": "registry.example.internal",
    "<your IB cluster node label>": IB_LABEL,
}
# Nothing runs the chart's pods here (no kubelet): a node label no node has keeps kube-scheduler from
# binding them to the suite's nodes, where their deletion on uninstall would never finish.
UNSCHEDULABLE = {"e2e.vgpu-guard.io/no-kubelet-here": "true"}


def _set_value(values: dict[str, Any], key: str, text: str) -> None:
    """``helm --set key=text``: dotted keys nest, true/false/null and integers are typed."""
    value: Any = {"true": True, "false": False, "null": None}.get(text, text)
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value):
        value = int(value)
    *parents, leaf = key.split(".")
    for part in parents:
        values = values.setdefault(part, {})
    values[leaf] = value


def readme_helm_values() -> dict[str, Any]:
    """The ``--set`` values of the README's ``helm install`` line, placeholders filled in."""
    text = README.read_text()
    section = text[text.index("## Install with Helm") :]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "the README's Install with Helm section has no sh block"
    # The placeholders are filled in as the reader would, before the shell reads the line.
    line = block.group(1).replace("\\\n", " ")
    for placeholder, stand_in in README_PLACEHOLDERS.items():
        line = line.replace(placeholder, stand_in)
    assert "<" not in line, f"README placeholder without a stand-in: {line}"
    words = shlex.split(line)
    assert words[:2] == ["helm", "install"], words
    values: dict[str, Any] = {}
    for flag, assignment in itertools.pairwise(words):
        if flag == "--set":
            key, _, value = assignment.partition("=")
            _set_value(values, key, value)
    assert values, "the README's helm install sets no value"
    return values


def _helm_values(guard: Guard, **config: Any) -> dict[str, Any]:
    """The README's values, installed beside the suite's own release, its webhooks pointed at the
    suite's local webhook.

    What the suite must add: ``crds.install=false`` (the suite's release already installed the CRDs
    and Helm never adopts objects another owner created); ``cleanup.enabled=false`` and, below 1.21,
    ``nameLabelHook.enabled=false`` (the pre-delete and pre-install hooks are Jobs that no kubelet
    runs, so Helm would wait for them; their objects are judged by the server with a dry run
    instead, and the suite's own install ran the name-label hook's command already); the Deployments' pods kept off
    the kubelet-less nodes.
    """
    return _values_for(f"https://{guard.host}:{guard.port}", guard.ca_pem, **config)


def _values_for(url: str, ca_pem: bytes, **config: Any) -> dict[str, Any]:
    """``_helm_values`` for a webhook at ``url`` with the CA ``ca_pem``."""
    values = readme_helm_values()
    values["crds"] = {"install": False}
    values["cleanup"] = {"enabled": False}
    values["nameLabelHook"] = {"enabled": False}
    values["webhooks"] = {"urlOverride": url, "caBundle": base64.b64encode(ca_pem).decode()}
    for component in ("webhook", "controller"):
        values[component] = {"nodeSelector": UNSCHEDULABLE}
    for key, value in config.items():
        values.setdefault("config", {}).setdefault(key, {}).update(value)
    return values


async def _webhook_configs(kubectl: Kubectl) -> list[str]:
    out = await kubectl("get", "mutatingwebhookconfigurations,validatingwebhookconfigurations", "-o", "name")
    assert out.code == 0, out.transcript()
    return [line for line in out.stdout.splitlines() if HELM_RELEASE in line]


def _dropped(sent: Any, stored: Any, path: str = "") -> list[str]:
    """Paths of ``sent`` that ``stored`` lacks: fields the server dropped (it keeps what it knows;
    a zero value such as ``value: ""`` is left out by the server's ``omitempty``, not dropped)."""
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            return [path or "."]
        out: list[str] = []
        for key, value in sent.items():
            if key in stored:
                out += _dropped(value, stored[key], f"{path}.{key}")
            elif value not in ("", 0, False, None, {}, []):
                out.append(f"{path}.{key}")
        return out
    if isinstance(sent, list):
        if not isinstance(stored, list) or len(stored) != len(sent):
            return [path]
        return [
            p
            for i, (a, b) in enumerate(zip(sent, stored, strict=True))
            for p in _dropped(a, b, f"{path}[{i}]")
        ]
    return []


def _as_stored(run: Run) -> list[dict[str, Any]]:
    """The objects of ``-o json`` output: a List (``get``), or one document per object (``create``)."""
    decoder, text = json.JSONDecoder(), run.stdout
    out: list[dict[str, Any]] = []
    index = 0
    while text[index:].strip():
        doc, index = decoder.raw_decode(text, len(text) - len(text[index:].lstrip()))
        out.extend(doc["items"] if doc.get("kind") == "List" else [doc])
    return out


async def _server_keeps_every_field(kubectl: Kubectl, objects: list[dict[str, Any]], *verb: str) -> None:
    """``kubectl <verb> -f -`` of ``objects`` (``get`` what Helm installed, or a server-side dry-run
    ``create``) succeeds and the server's copies hold every field the chart rendered."""
    manifest = "---\n".join(yaml.safe_dump(o) for o in objects)
    run = await kubectl(*verb, "-f", "-", "-o", "json", stdin=manifest)
    assert run.code == 0, run.transcript()
    stored = _as_stored(run)
    assert [(o["kind"], o["metadata"]["name"]) for o in stored] == [
        (o["kind"], o["metadata"]["name"]) for o in objects
    ]
    dropped = {
        f"{o['kind']}/{o['metadata']['name']}": paths
        for o, s in zip(objects, stored, strict=True)
        if (paths := _dropped(o, s))
    }
    assert not dropped, f"the server dropped fields it does not know: {dropped}"


async def test_helm_install_upgrade_uninstall(env: Env, kubectl: Kubectl) -> None:
    """``helm install`` of the README's values / ``upgrade`` / ``uninstall`` / ``install`` again of
    the chart (Helm v4): on the real server with the Deployments enabled, every object (the
    pre-delete hook's by a server-side dry run) accepted and kept whole; the upgrade's values reach
    the cluster, the uninstall leaves no webhook configuration of the release behind and nothing the
    next install trips on, and a non-GPU pod is admitted after."""
    helm = Helm(env.backend.admin_kubeconfig)
    config_map = f"{HELM_RELEASE}-vgpu-guard-config"
    env.undo.append(
        lambda: kubectl("delete", "namespace", HELM_NAMESPACE, "--ignore-not-found", "--wait=false")
    )
    env.undo.append(lambda: helm.uninstall(HELM_RELEASE, HELM_NAMESPACE))
    values = _helm_values(env.guard)
    installed = await helm.install(HELM_RELEASE, HELM_NAMESPACE, values)
    assert (installed["status"], installed["revision"]) == ("deployed", 1)
    url = values["webhooks"]["urlOverride"]
    # The notes follow the scope the chart picks for the server: matchConditions from 1.28 (an
    # E2E_KUBECONFIG cluster; Helm renders them from the chart), every namespace but the excluded
    # ones before (kube-apiserver 1.20), failing open.
    minor = int("".join(ch for ch in env.backend.kube_version.split(".")[1] if ch.isdigit()))
    notes = "helm-install-notes.txt" if minor >= 28 else "helm-install-notes-all-namespaces.txt"
    assert_golden(notes, normalise(installed["notes"], {url: "https://WEBHOOK"}))
    assert await _webhook_configs(kubectl) == [
        f"mutatingwebhookconfiguration.admissionregistration.k8s.io/{HELM_RELEASE}-vgpu-guard",
        f"validatingwebhookconfiguration.admissionregistration.k8s.io/{HELM_RELEASE}-vgpu-guard",
    ]
    # What Helm sent is what the chart renders for this server; the server kept all of it.
    rendered = render_objects(
        values, name=HELM_RELEASE, namespace=HELM_NAMESPACE, kube_version=env.backend.kube_version
    )
    await _server_keeps_every_field(kubectl, [r.obj for r in rendered if not r.is_hook], "get")
    kinds = sorted({r.kind for r in rendered if not r.is_hook})
    assert {"Deployment", "Service", "PodDisruptionBudget"} <= set(kinds), kinds
    with_hook = {**values, "cleanup": {"enabled": True}, "nameLabelHook": {"enabled": True}}
    hook = [
        r.obj
        for r in render_objects(
            with_hook, name=HELM_RELEASE, namespace=HELM_NAMESPACE, kube_version=env.backend.kube_version
        )
        if r.is_hook
    ]
    # The pre-delete cleanup, and below 1.21 the pre-install name-label hook: the same four kinds.
    copies = 2 if minor < 21 else 1
    assert sorted(o["kind"] for o in hook) == sorted(
        ["ClusterRole", "ClusterRoleBinding", "Job", "ServiceAccount"] * copies
    )
    await _server_keeps_every_field(kubectl, hook, "create", "--dry-run=server")
    label = "example.com/ib-cluster"
    changed = _helm_values(env.guard, topology={"ibClusterLabel": label})
    changed["webhooks"]["mutatePods"] = {"timeoutSeconds": 7}
    upgraded = await helm.upgrade(HELM_RELEASE, HELM_NAMESPACE, changed)
    assert (upgraded["status"], upgraded["revision"]) == ("deployed", 2)
    shown = await kubectl(
        "get", "configmap", "-n", HELM_NAMESPACE, config_map, "-o", "jsonpath={.data.config\\.yaml}"
    )
    assert shown.code == 0, shown.transcript()
    stored_config = yaml.safe_load(shown.stdout)
    assert stored_config["topology"]["ibClusterLabel"] == label, shown.transcript()
    # The README installs the default mode: Volcano schedules, the arbiter reserves what it writes.
    assert stored_config["scheduling"]["routing"] is False, shown.transcript()
    assert stored_config["arbiter"]["unboundReleaseSeconds"] == 90, shown.transcript()
    timeout = await kubectl(
        "get", "mutatingwebhookconfiguration", f"{HELM_RELEASE}-vgpu-guard",
        "-o", "jsonpath={.webhooks[0].timeoutSeconds}",
    )  # fmt: skip
    assert (timeout.code, timeout.stdout) == (0, "7"), timeout.transcript()
    for revision in (1, 2):
        removed = await helm.uninstall(HELM_RELEASE, HELM_NAMESPACE)
        assert removed["release"]["status"] == "uninstalled", removed
        assert await _webhook_configs(kubectl) == []
        if revision == 1:
            again = await helm.install(HELM_RELEASE, HELM_NAMESPACE, values)
            assert (again["status"], again["revision"]) == ("deployed", 1)
    applied = await kubectl("apply", "-n", env.ns, "-f", "-", stdin=yaml.safe_dump(plain_pod("no-gpu")))
    assert (applied.code, applied.stdout, applied.stderr) == (0, "pod/no-gpu created\n", "")


# -- the README's sandbox, verbatim -----------------------------------------------------------------
README = REPO / "README.md"
README_KUBECONFIG = "/tmp/sandbox.kubeconfig"
SANDBOX_BIN = Path(sys.executable).with_name("vgpu-guard")


# What the sandbox registers (the chart's ``webhooks.scope: auto``): 1.20 has no matchConditions,
# so every namespace but the excluded ones reaches the pod webhooks, and it has no name label, so
# the sandbox labels the excluded ones as the chart's install hook does.
SCOPE_LINES = (
    "scope:      all namespaces (Kubernetes 1.20 has no matchConditions): every pod of every namespace "
    "but the excluded ones reaches the pod webhooks, which fail open\n"
    "labelled:   kube-system, kube-node-lease, vgpu-guard with kubernetes.io/metadata.name=<name> (1.21+ sets "
    "it), which keeps them out\n"
)


def readme_try_it() -> list[str]:
    """The command lines of the first ``bash`` block of the README's Sandbox section."""
    text = README.read_text()
    section = text[text.index("## Sandbox: `vgpu-guard sandbox`") :]
    section = section[: section.index("\n## ", 1)]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the README's Sandbox section has no bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


async def _sandbox_ready(process: asyncio.subprocess.Process) -> list[str]:
    """The sandbox's lines up to ``ready``; fails with what it printed if it exits first."""
    assert process.stdout is not None
    lines: list[str] = []
    async with asyncio.timeout(180):
        while not lines or not lines[-1].startswith("ready;"):
            line = await process.stdout.readline()
            if not line:
                raise AssertionError("the sandbox exited before ready:\n" + "".join(lines))
            lines.append(line.decode())
    return lines


async def test_readme_sandbox_commands(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """The README's "try it" block, line by line as a user types it, on the real control plane: the
    sandbox names it in its first line, every ``kubectl`` line finishes (never a hang) and succeeds, except the
    line the README says is denied, which prints the webhook's denial."""
    request.getfixturevalue("real_api")  # builds the control plane under CI=true
    kubeconfig = str(tmp_path / "sandbox.kubeconfig")
    sandbox, *commands = readme_try_it()
    argv = shlex.split(sandbox.replace(README_KUBECONFIG, kubeconfig), comments=True)
    assert argv[0] == "vgpu-guard" and argv[-1] == "&", sandbox
    # The sandbox keeps its processes' logs in a new directory under TMPDIR: the test's, not /tmp.
    process = await asyncio.create_subprocess_exec(
        str(SANDBOX_BIN), *argv[1:-1],
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )  # fmt: skip
    try:
        banner = await _sandbox_ready(process)
        assert banner[0] == (
            "cluster:    real control plane, Kubernetes 1.20.2 "
            "(kube-apiserver, kube-controller-manager, kube-scheduler, etcd)\n"
        ), banner
        assert SCOPE_LINES in "".join(banner), banner
        await _run_readme_lines(commands, kubeconfig, tmp_path)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
        rest, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0 and rest.decode().rstrip().endswith("stopped"), rest.decode()


async def _run_readme_lines(commands: list[str], kubeconfig: str, tmp_path: Path) -> None:
    environment: dict[str, str] = {}
    for line in commands:
        words = shlex.split(line.replace(README_KUBECONFIG, kubeconfig), comments=True)
        if words[0] == "export":
            name, _, value = words[1].partition("=")
            environment[name] = value
            continue
        assert words[0] == "kubectl", f"the README's sandbox block runs only kubectl: {line}"
        assert environment.get("KUBECONFIG") == kubeconfig, "the README exports KUBECONFIG first"
        out = await Kubectl(Path(kubeconfig), tmp_path / "kube-cache")(*words[1:])
        if "# denied" in line:
            assert out.code == 1 and "denied the request" in out.stderr, (line, out.transcript())
        else:
            assert out.code == 0 and "rror" not in out.stderr, (line, out.transcript())


async def test_every_apply_golden_file_has_its_example() -> None:
    """An example renamed or removed leaves no golden file behind that nothing checks."""
    expected = {f"apply-{_golden_name(p)}{kind}.txt" for p in EXAMPLES for kind in ("", ".dry-run", ".again")}
    assert {p.name for p in GOLDEN.glob("apply-*.txt")} == expected


async def test_the_helm_notes_golden_of_1_28_and_later_is_what_helm_renders() -> None:
    """``helm-install-notes.txt`` is what the Helm story compares only on a server of 1.28 or later:
    an E2E_KUBECONFIG cluster, never the control plane (1.20.2) nor, since the Helm story left it
    (issue 37 item 6), the API double (1.33). Helm's own render of the notes for the story's release
    and values keeps that golden checked in every run; the 1.20 one beside it too."""
    values = _values_for("https://WEBHOOK", b"ca")
    for kube_version, golden in (
        ("1.28.0", "helm-install-notes.txt"),
        ("1.33.0", "helm-install-notes.txt"),
        ("1.20.2", "helm-install-notes-all-namespaces.txt"),
    ):
        rendered = render_templates(
            values, name=HELM_RELEASE, namespace=HELM_NAMESPACE, kube_version=kube_version
        )
        notes = next(text for path, text in rendered.items() if path.endswith("NOTES.txt"))
        assert_golden(golden, normalise(notes))
