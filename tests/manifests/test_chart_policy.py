"""The chart's promises, checked on what it renders for every value set in conftest.SCENARIOS.

Webhooks: exact rules (never `*`), selectors, sideEffects None (NoneOnDryRun for the pod mutation), short timeouts, names under our
domain. RBAC: no wildcards, names where Kubernetes allows them, and enough for what each process
does (the API double enforces these very Roles in the end-to-end run). Pods: hardened
securityContext. HA: webhook replicas >= 2 with a PDB. Uninstall: the pre-delete hook.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.manifests.chart import Rendered, render_objects
from tests.manifests.conftest import CA_BUNDLE, SCENARIOS, of_kind, one, pod_specs
from vgpu_guard.configfile import load_config

NS = "vgpu-guard"
WEBHOOK_CONFIGS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")

# (configuration kind, webhook name) -> (path, [(group, version, resources, operations, scope)])
EXPECTED_WEBHOOKS: dict[tuple[str, str], tuple[str, list[tuple[str, str, list[str], list[str], str]]]] = {
    ("MutatingWebhookConfiguration", "pods.vgpu.vgpu-guard.io"): (
        "/mutate/pods",
        [("", "v1", ["pods"], ["CREATE"], "Namespaced")],
    ),
    # Re-applied pod files (kubectl apply of an unchanged file; issue 38).
    ("MutatingWebhookConfiguration", "pod-updates.vgpu.vgpu-guard.io"): (
        "/mutate/pods",
        [("", "v1", ["pods"], ["UPDATE"], "Namespaced")],
    ),
    ("ValidatingWebhookConfiguration", "pods.vgpu.vgpu-guard.io"): (
        "/validate/pods",
        [("", "v1", ["pods"], ["CREATE"], "Namespaced")],
    ),
    ("ValidatingWebhookConfiguration", "workloads.vgpu.vgpu-guard.io"): (
        "/validate/workloads",
        [
            (
                "apps",
                "v1",
                ["deployments", "statefulsets", "replicasets", "daemonsets"],
                ["CREATE", "UPDATE"],
                "Namespaced",
            ),
            ("batch", "v1", ["jobs", "cronjobs"], ["CREATE", "UPDATE"], "Namespaced"),
            ("batch.volcano.sh", "v1alpha1", ["jobs"], ["CREATE", "UPDATE"], "Namespaced"),
        ],
    ),
    ("ValidatingWebhookConfiguration", "queues.vgpu-guard.io"): (
        "/validate/queues",
        [("scheduling.volcano.sh", "v1beta1", ["queues"], ["CREATE", "UPDATE", "DELETE"], "Cluster")],
    ),
    ("ValidatingWebhookConfiguration", "pod-allocations.vgpu-guard.io"): (
        "/validate/pod-allocations",
        [
            ("", "v1", ["pods", "pods/status"], ["UPDATE"], "Namespaced"),
            ("", "v1", ["pods/binding", "bindings"], ["CREATE"], "Namespaced"),
        ],
    ),
    # The ledger arbiter's fail-closed entry, where matchConditions exist (1.28+).
    ("ValidatingWebhookConfiguration", "pod-assignments.vgpu-guard.io"): (
        "/validate/pod-allocations",
        [
            ("", "v1", ["pods", "pods/status"], ["UPDATE"], "Namespaced"),
            ("", "v1", ["pods/binding", "bindings"], ["CREATE"], "Namespaced"),
        ],
    ),
}
# The entries that may write (NoneOnDryRun): the pod mutation (a gang's GangPlacement) and both
# allocation entries (the arbiter's reservations in the GPULedger).
WRITING_WEBHOOKS = {
    ("MutatingWebhookConfiguration", "pods.vgpu.vgpu-guard.io"),
    ("ValidatingWebhookConfiguration", "pod-allocations.vgpu-guard.io"),
    ("ValidatingWebhookConfiguration", "pod-assignments.vgpu-guard.io"),
}


def webhooks(objects: list[Rendered]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (cfg["kind"], cfg["metadata"]["name"], w)
        for kind in WEBHOOK_CONFIGS
        for cfg in of_kind(objects, kind)
        for w in cfg["webhooks"]
    ]


# --- webhooks -------------------------------------------------------------------------------------


def test_webhooks_match_exactly_what_we_handle(scenario: tuple[str, dict[str, Any]]) -> None:
    objects = render_objects(scenario[1])
    seen = {}
    for kind, config_name, w in webhooks(objects):
        assert config_name == "vgpu-guard"
        path, rules = EXPECTED_WEBHOOKS[(kind, w["name"])]
        got = [
            (r["apiGroups"][0], r["apiVersions"][0], r["resources"], r["operations"], r["scope"])
            for r in w["rules"]
        ]
        assert got == rules
        for r in w["rules"]:
            assert len(r["apiGroups"]) == 1 and len(r["apiVersions"]) == 1
            for field in ("apiGroups", "apiVersions", "resources", "operations"):
                assert not any("*" in item for item in r[field]), (w["name"], field)
        seen[(kind, w["name"])] = path
    arbiter = ("ValidatingWebhookConfiguration", "pod-assignments.vgpu-guard.io")
    cel = any(w.get("matchConditions") for _, _, w in webhooks(objects))
    assert seen.keys() == EXPECTED_WEBHOOKS.keys() - (set() if cel else {arbiter})


def test_webhook_safety_settings(scenario: tuple[str, dict[str, Any]]) -> None:
    for kind, _, w in webhooks(render_objects(scenario[1])):
        # Only the pod mutation and the allocation entries write, and never on dry run.
        expected = "NoneOnDryRun" if (kind, w["name"]) in WRITING_WEBHOOKS else "None"
        assert w["sideEffects"] == expected, w["name"]
        assert w["admissionReviewVersions"] == ["v1"]
        assert w["failurePolicy"] in {"Fail", "Ignore"}
        assert 1 <= w["timeoutSeconds"] <= 10, w["name"]
        if w["failurePolicy"] == "Ignore":
            assert w["timeoutSeconds"] <= 3, f"{w['name']} fails open: keep its timeout short"
        if kind == "MutatingWebhookConfiguration":
            assert w["reinvocationPolicy"] == "IfNeeded"
        cluster_scoped = all(r["scope"] == "Cluster" for r in w["rules"])
        if cluster_scoped:
            assert "namespaceSelector" not in w, (
                f"{w['name']}: a namespaceSelector never applies to cluster-scoped objects"
            )
        else:
            excluded = next(
                e["values"]
                for e in w["namespaceSelector"]["matchExpressions"]
                if e["key"] == "kubernetes.io/metadata.name" and e["operator"] == "NotIn"
            )
            assert {"kube-system", "kube-node-lease", NS} <= set(excluded)
            # No label opts a namespace out (issue 22): the label can only opt one in (namespaceOptIn).
            labels = [
                e for e in w["namespaceSelector"]["matchExpressions"] if e["key"] == "vgpu-guard.io/admission"
            ]
            assert labels in (
                [],
                [{"key": "vgpu-guard.io/admission", "operator": "In", "values": ["enabled"]}],
            )


def test_pod_webhooks_only_see_gpu_pods_by_default() -> None:
    # With failurePolicy Fail, the matchCondition is what keeps non-GPU pods unaffected by an outage.
    # The re-apply entry fails open, and sees only GPU pods whose spec an update changes.
    for _, _, w in webhooks(render_objects()):
        if w["rules"][0]["resources"] == ["pods"]:
            updates = w["rules"][0]["operations"] == ["UPDATE"]
            assert w["failurePolicy"] == ("Ignore" if updates else "Fail")
            assert len(w["matchConditions"]) == 1
            assert "volcano.sh/vgpu-number" in w["matchConditions"][0]["expression"]
            assert ("object.spec != oldObject.spec" in w["matchConditions"][0]["expression"]) == updates


def test_release_namespace_is_excluded_whatever_it_is() -> None:
    for _, _, w in webhooks(render_objects({}, name="guard", namespace="gpu-system")):
        if "namespaceSelector" in w:
            assert "gpu-system" in w["namespaceSelector"]["matchExpressions"][0]["values"]


def test_in_cluster_client_config_and_per_webhook_values() -> None:
    values = {
        "webhooks": {
            "validateWorkloads": {
                "failurePolicy": "Fail",
                "timeoutSeconds": 7,
                "objectSelector": {"matchLabels": {"a": "b"}},
            },
            "mutatePods": {
                "reinvocationPolicy": "Never",
                "matchConditions": [{"name": "x", "expression": "true"}],
            },
            "validateQueues": {"enabled": False},
        }
    }
    objects = render_objects(values)
    found = {w["name"] + "/" + kind: w for kind, _, w in webhooks(objects)}
    assert "queues.vgpu-guard.io/ValidatingWebhookConfiguration" not in found
    workloads = found["workloads.vgpu.vgpu-guard.io/ValidatingWebhookConfiguration"]
    assert (workloads["failurePolicy"], workloads["timeoutSeconds"]) == ("Fail", 7)
    assert workloads["objectSelector"] == {"matchLabels": {"a": "b"}}
    mutate = found["pods.vgpu.vgpu-guard.io/MutatingWebhookConfiguration"]
    assert mutate["reinvocationPolicy"] == "Never"
    assert [c["name"] for c in mutate["matchConditions"]] == ["vgpu-pods-only", "x"]
    for _, _, w in webhooks(objects):
        service = w["clientConfig"]["service"]
        assert (service["name"], service["namespace"], service["port"]) == ("vgpu-guard-webhook", NS, 443)
        assert "caBundle" not in w["clientConfig"]  # builtin mode: the controller leader injects it
    svc = one(objects, "Service", "vgpu-guard-webhook")
    assert svc["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}]


def test_url_override_points_every_webhook_at_the_process() -> None:
    objects = render_objects(SCENARIOS["url-override"])
    for kind, _, w in webhooks(objects):
        path = EXPECTED_WEBHOOKS[(kind, w["name"])][0]
        assert w["clientConfig"] == {"url": f"https://127.0.0.1:9443{path}", "caBundle": CA_BUNDLE}
        assert base64.b64decode(w["clientConfig"]["caBundle"]).startswith(b"-----BEGIN CERTIFICATE-----")
    assert not of_kind(objects, "Deployment") and not of_kind(objects, "PodDisruptionBudget")
    # The identities the out-of-cluster processes run as are still there.
    assert {sa["metadata"]["name"] for sa in of_kind(objects, "ServiceAccount")} >= {
        "vgpu-guard-webhook",
        "vgpu-guard-controller",
    }


def test_per_webhook_client_config_override() -> None:
    override = {"url": "https://10.0.0.5:8443/only-this", "caBundle": CA_BUNDLE}
    objects = render_objects({"webhooks": {"validateQueues": {"clientConfig": override}}})
    for _, _, w in webhooks(objects):
        assert (w["clientConfig"] == override) == (w["name"] == "queues.vgpu-guard.io")


def test_cert_manager_mode() -> None:
    objects = render_objects(SCENARIOS["cert-manager"])
    cert = one(objects, "Certificate")
    assert cert["spec"]["secretName"] == "vgpu-guard-tls"
    assert "vgpu-guard-webhook.vgpu-guard.svc" in cert["spec"]["dnsNames"]
    assert "guard.example.internal" in cert["spec"]["dnsNames"]
    assert cert["spec"]["issuerRef"]["name"] == one(objects, "Issuer")["metadata"]["name"]
    for kind in WEBHOOK_CONFIGS:
        annotations = one(objects, kind)["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == f"{NS}/{cert['metadata']['name']}"
    assert not of_kind(objects, "Secret"), "cert-manager owns the Secret"
    # The processes follow the mounted files and never touch the Secret or the configurations.
    deployment = one(objects, "Deployment", "vgpu-guard-webhook")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "vgpu-guard-tls"
    for rule in _all_rules(objects):
        assert "secrets" not in rule.get("resources", []) or rule.get("_hook")
        assert "admissionregistration.k8s.io" not in rule.get("apiGroups", []) or rule.get("_hook")
    own_issuer = render_objects(SCENARIOS["cert-manager-own-issuer"])
    assert not of_kind(own_issuer, "Issuer")
    assert one(own_issuer, "Certificate")["spec"]["issuerRef"] == {"name": "corp-ca", "kind": "ClusterIssuer"}


# --- RBAC -----------------------------------------------------------------------------------------


def _all_rules(objects: list[Rendered]) -> list[dict[str, Any]]:
    out = []
    for r in objects:
        if r.kind in {"ClusterRole", "Role"}:
            for rule in r.obj["rules"]:
                out.append({**rule, "_role": f"{r.kind}/{r.name}", "_hook": r.is_hook})
    return out


def test_no_wildcards_in_rbac(scenario: tuple[str, dict[str, Any]]) -> None:
    for rule in _all_rules(render_objects(scenario[1])):
        for field in ("apiGroups", "resources", "verbs", "resourceNames"):
            assert not any("*" in item for item in rule.get(field, [])), (rule["_role"], field)
        assert "deletecollection" not in rule["verbs"]
        assert (
            "escalate" not in rule["verbs"]
            and "bind" not in rule["verbs"]
            and "impersonate" not in rule["verbs"]
        )


class Authorizer:
    """Kubernetes RBAC evaluation (reference/access-authn-authz/rbac) over the rendered objects."""

    def __init__(self, objects: list[Rendered]) -> None:
        self.objects = objects

    def _roles_of(self, user: str) -> list[tuple[dict[str, Any], str | None]]:
        sa_ns, sa_name = user.split(":")[2:4]
        out = []
        for binding_kind, role_kind in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
            for binding in of_kind(self.objects, binding_kind):
                subjects = binding.get("subjects", [])
                if not any(
                    s["kind"] == "ServiceAccount" and (s["namespace"], s["name"]) == (sa_ns, sa_name)
                    for s in subjects
                ):
                    continue
                ref = binding["roleRef"]
                role = one(self.objects, ref["kind"], ref["name"])
                assert ref["kind"] == role_kind or binding_kind == "RoleBinding"
                out.append((role, binding["metadata"].get("namespace")))
        return out

    def allowed(
        self,
        user: str,
        verb: str,
        group: str,
        resource: str,
        *,
        namespace: str | None = None,
        name: str | None = None,
    ) -> bool:
        for role, bound_ns in self._roles_of(user):
            if bound_ns is not None and bound_ns != namespace:
                continue
            for rule in role["rules"]:
                if (
                    group not in rule["apiGroups"]
                    or resource not in rule["resources"]
                    or verb not in rule["verbs"]
                ):
                    continue
                names = rule.get("resourceNames")
                if names is None or (name is not None and name in names):
                    return True
        return False


WEBHOOK_SA = f"system:serviceaccount:{NS}:vgpu-guard-webhook"
CONTROLLER_SA = f"system:serviceaccount:{NS}:vgpu-guard-controller"
CLEANUP_SA = f"system:serviceaccount:{NS}:vgpu-guard-cleanup"

# What each process does against the API (the brief of issue 7, certs/_store.py, certs/_inject.py).
# (user, verb, group, resource, namespace, name); namespace "*" = any namespace (cluster-wide).
NEEDS: list[tuple[str, str, str, str, str | None, str | None]] = [
    *[(WEBHOOK_SA, v, "", r, None, None) for r in ("nodes", "pods") for v in ("get", "list", "watch")],
    *[
        (WEBHOOK_SA, v, "scheduling.volcano.sh", r, None, None)
        for r in ("queues", "podgroups")
        for v in ("list", "watch")
    ],
    *[(WEBHOOK_SA, v, "topology.volcano.sh", "hypernodes", None, None) for v in ("list", "watch")],
    # The arbiter reserves an allocation writer's assignment in the node's ledger (issue 35).
    *[
        (WEBHOOK_SA, v, "vgpu-guard.io", "gpuledgers", None, None)
        for v in ("get", "list", "watch", "create", "update")
    ],
    *[
        (WEBHOOK_SA, v, "vgpu-guard.io", "gangplacements", "team-a", None)
        for v in ("get", "list", "watch", "create", "update")
    ],
    *[(WEBHOOK_SA, v, "", "secrets", NS, "vgpu-guard-tls") for v in ("get", "update")],
    # A pod the arbiter keeps refusing is told why (issue 43, webhook/stuck_refusals.py).
    (WEBHOOK_SA, "create", "", "events", "team-a", None),
    *[(CONTROLLER_SA, v, "", "pods", "team-a", None) for v in ("get", "list", "watch")],
    (CONTROLLER_SA, "create", "", "pods/binding", "team-a", None),
    *[(CONTROLLER_SA, v, "", "pods/status", "team-a", None) for v in ("patch", "update")],
    *[
        (CONTROLLER_SA, v, g, "events", "team-a", None)
        for g in ("", "events.k8s.io")
        for v in ("create", "patch")
    ],
    *[(CONTROLLER_SA, v, "", "nodes", None, None) for v in ("get", "list", "watch")],
    *[(CONTROLLER_SA, v, "topology.volcano.sh", "hypernodes", None, None) for v in ("list", "watch")],
    *[
        (CONTROLLER_SA, v, "scheduling.volcano.sh", r, None, None)
        for r in ("queues", "podgroups")
        for v in ("list", "watch")
    ],
    *[
        (CONTROLLER_SA, v, "vgpu-guard.io", r, "team-a", None)
        for r in ("gpuledgers", "gangplacements")
        for v in ("get", "list", "watch", "create", "update", "patch", "delete")
    ],
    (CONTROLLER_SA, "create", "coordination.k8s.io", "leases", NS, None),
    *[
        (CONTROLLER_SA, v, "coordination.k8s.io", "leases", NS, "vgpu-guard-controller")
        for v in ("get", "update")
    ],
    *[(CONTROLLER_SA, v, "", "secrets", NS, "vgpu-guard-tls") for v in ("get", "update")],
    *[
        (CONTROLLER_SA, v, "admissionregistration.k8s.io", r, None, "vgpu-guard")
        for r in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
        for v in ("get", "update")
    ],
    *[
        (CLEANUP_SA, "delete", "admissionregistration.k8s.io", r, None, "vgpu-guard")
        for r in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
    ],
]

# Least privilege: things none of them may do.
FORBIDDEN: list[tuple[str, str, str, str, str | None, str | None]] = [
    (WEBHOOK_SA, "delete", "vgpu-guard.io", "gpuledgers", None, None),  # releases are the controller's
    (WEBHOOK_SA, "create", "", "pods/binding", "team-a", None),
    (WEBHOOK_SA, "delete", "", "events", "team-a", None),
    (WEBHOOK_SA, "get", "", "secrets", NS, "someone-elses-secret"),
    (WEBHOOK_SA, "get", "", "secrets", "team-a", "vgpu-guard-tls"),
    (CONTROLLER_SA, "list", "", "secrets", NS, None),
    (CONTROLLER_SA, "create", "", "secrets", NS, None),
    (
        CONTROLLER_SA,
        "update",
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        None,
        "kyverno",
    ),
    (CONTROLLER_SA, "list", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", None, None),
    (CONTROLLER_SA, "update", "coordination.k8s.io", "leases", NS, "another-lease"),
    (CONTROLLER_SA, "create", "coordination.k8s.io", "leases", "team-a", None),
    (CONTROLLER_SA, "deletecollection", "vgpu-guard.io", "gpuledgers", "team-a", None),
    (CONTROLLER_SA, "delete", "", "pods", "team-a", None),
    (
        CLEANUP_SA,
        "delete",
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        None,
        "kyverno",
    ),
    (CLEANUP_SA, "list", "admissionregistration.k8s.io", "validatingwebhookconfigurations", None, None),
    # `vgpu-guard cleanup` deletes by name without reading first (kubectl delete needed get).
    (CLEANUP_SA, "get", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", None, "vgpu-guard"),
]


@pytest.mark.parametrize("need", NEEDS, ids=lambda n: f"{n[0].rsplit(':', 1)[1]}-{n[1]}-{n[3]}")
def test_rbac_is_enough(need: tuple[str, str, str, str, str | None, str | None]) -> None:
    user, verb, group, resource, namespace, name = need
    assert Authorizer(render_objects()).allowed(user, verb, group, resource, namespace=namespace, name=name)


@pytest.mark.parametrize("deny", FORBIDDEN, ids=lambda n: f"{n[0].rsplit(':', 1)[1]}-{n[1]}-{n[3]}-{n[5]}")
def test_rbac_is_least_privilege(deny: tuple[str, str, str, str, str | None, str | None]) -> None:
    user, verb, group, resource, namespace, name = deny
    assert not Authorizer(render_objects()).allowed(
        user, verb, group, resource, namespace=namespace, name=name
    )


def test_every_rule_is_justified_in_the_templates() -> None:
    # Each rule in the RBAC templates sits under a comment that says why (the brief: every verb justified).
    chart = Path(__file__).resolve().parents[2] / "manifests" / "charts" / "vgpu-guard" / "templates"
    for template in ("rbac-webhook.yaml", "rbac-controller.yaml", "cleanup-hook.yaml"):
        lines = (chart / template).read_text("utf-8").splitlines()
        for index, line in enumerate(lines):
            if line.strip().startswith("- apiGroups:"):
                above = lines[index - 1].strip()
                assert above.startswith(("#", "- apiGroups", "verbs:")) or lines[
                    index - 2
                ].strip().startswith("#"), f"{template}:{index + 1}: rule without a comment"


# --- pods ------------------------------------------------------------------------------------------


def test_every_container_is_hardened(scenario: tuple[str, dict[str, Any]]) -> None:
    for where, spec in pod_specs(render_objects(scenario[1])):
        assert spec["securityContext"]["runAsNonRoot"] is True, where
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert spec.get("hostNetwork") is not True and spec.get("hostPID") is not True, where
        for container in spec["containers"] + spec.get("initContainers", []):
            sc = container["securityContext"]
            assert sc["runAsNonRoot"] is True and sc["runAsUser"] > 0, where
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc.get("privileged", False) is False, where
            assert sc["capabilities"] == {"drop": ["ALL"]}, where
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, where
            assert "limits" in container["resources"] and "requests" in container["resources"], where
            mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
            writable = [p for p, m in mounts.items() if not m.get("readOnly")]
            assert writable in ([], ["/tmp"]), f"{where}: writable mounts {writable}"


def test_high_availability(scenario: tuple[str, dict[str, Any]]) -> None:
    name, values = scenario
    objects = render_objects(values)
    want = values.get("webhook", {}).get("replicas", 2)
    for component in ("webhook", "controller"):
        deployments = [
            d for d in of_kind(objects, "Deployment") if d["metadata"]["name"] == f"vgpu-guard-{component}"
        ]
        if values.get(component, {}).get("enabled", True) is False:
            assert not deployments
            continue
        (deployment,) = deployments
        replicas = deployment["spec"]["replicas"]
        pdbs = [
            p
            for p in of_kind(objects, "PodDisruptionBudget")
            if p["metadata"]["name"] == f"vgpu-guard-{component}"
        ]
        if replicas > 1:
            (pdb,) = pdbs
            assert pdb["spec"]["minAvailable"] == 1
            assert pdb["spec"]["selector"] == deployment["spec"]["selector"]
            term = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
            assert term["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"][
                "topologyKey"
            ] == ("kubernetes.io/hostname")
        else:
            assert not pdbs, "a PDB over one pod blocks every drain"
        if component == "webhook":
            assert replicas == want
            if name != "single-replica":
                assert replicas >= 2
            assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_defaults_run_two_webhooks_and_two_controllers() -> None:
    objects = render_objects()
    assert one(objects, "Deployment", "vgpu-guard-webhook")["spec"]["replicas"] == 2
    assert one(objects, "Deployment", "vgpu-guard-controller")["spec"]["replicas"] == 2


def test_processes_get_the_names_they_manage() -> None:
    objects = render_objects()
    env = {
        e["name"]: e.get("value")
        for e in one(objects, "Deployment", "vgpu-guard-controller")["spec"]["template"]["spec"][
            "containers"
        ][0]["env"]
    }
    assert env["VGPU_GUARD_TLS_SECRET"] == one(objects, "Secret")["metadata"]["name"] == "vgpu-guard-tls"
    assert (
        env["VGPU_GUARD_MUTATING_WEBHOOK_CONFIGURATIONS"]
        == one(objects, "MutatingWebhookConfiguration")["metadata"]["name"]
    )
    assert (
        env["VGPU_GUARD_VALIDATING_WEBHOOK_CONFIGURATIONS"]
        == one(objects, "ValidatingWebhookConfiguration")["metadata"]["name"]
    )
    assert env["VGPU_GUARD_WEBHOOK_SERVICE"] == "vgpu-guard-webhook"
    assert env["VGPU_GUARD_CERT_MODE"] == "builtin"
    assert not any(k.startswith("VGPU_GUARD__") for k in env), "double underscore means a config override"
    secret = one(objects, "Secret")
    assert "data" not in secret and secret["type"] == "Opaque"


# --- uninstall ----------------------------------------------------------------------------------------


def test_pre_delete_hook_removes_our_webhook_configurations() -> None:
    objects = render_objects()
    hooks = [r for r in objects if r.is_hook]
    assert {r.kind for r in hooks} == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Job"}
    for r in hooks:
        assert r.obj["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    job = one(objects, "Job")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    # The product's own image and CLI (tests/cli/test_cleanup.py runs it with this role): an
    # air-gapped fleet has no second image to mirror.
    deployment = one(objects, "Deployment", "vgpu-guard-webhook")
    assert container["image"] == deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert "command" not in container
    names = {one(objects, kind)["metadata"]["name"] for kind in WEBHOOK_CONFIGS}
    assert container["args"] == ["cleanup", "--webhook-configuration", *names]
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == "vgpu-guard-cleanup"
    # The hook's role reaches nothing but those two objects.
    (role,) = [r.obj for r in hooks if r.kind == "ClusterRole"]
    assert role["rules"] == [
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
            "resourceNames": ["vgpu-guard"],
            "verbs": ["delete"],
        }
    ]
    assert not [r for r in render_objects({"cleanup": {"enabled": False}}) if r.is_hook]


# --- config ----------------------------------------------------------------------------------------------


def _write_config(objects: list[Rendered], root: Path) -> Path:
    config_map = one(objects, "ConfigMap", "vgpu-guard-config")
    path = root / "config" / "config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(config_map["data"]["config.yaml"], "utf-8")
    return path


def test_rendered_config_loads(scenario: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    name, values = scenario
    objects = render_objects(values)
    path = _write_config(objects, tmp_path)
    if name == "device-config-configmap":
        # The plugin's ConfigMap, mounted beside the config as the Deployment mounts it.
        plugin = tmp_path / "device-config" / "device-config.yaml"
        plugin.parent.mkdir()
        plugin.write_text(
            "nvidia:\n  resourceCountName: volcano.sh/vgpu-number\n  deviceSplitCount: 7\n", "utf-8"
        )
    config = load_config(path, env={})
    assert config.webhook.port == 9443 and config.webhook.metrics_port == 8080
    if name == "device-config-configmap":
        assert config.nvidia.device_split_count == 7
        deployment = one(objects, "Deployment", "vgpu-guard-webhook")
        mounts = {
            m["name"]: m["mountPath"]
            for m in deployment["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
        }
        assert (
            mounts["config"] == "/etc/vgpu-guard/config"
            and mounts["device-config"] == "/etc/vgpu-guard/device-config"
        )
    if name == "device-config-inline":
        assert config.nvidia.resource_count_name == "example.com/vgpu"
        assert str(config.nvidia.device_memory_scaling) == "1.5"
    if name == "routing-and-ib":
        assert config.scheduling.routing is True and config.scheduling.policy == "spread"
        assert config.topology.ib_cluster_label == "network.example.internal/ib-cluster"
        assert config.topology.hyper_node_tier == 2
        assert config.admission.trusted_users == ("system:admin",)


def test_invalid_config_values_fail_to_load(tmp_path: Path) -> None:
    objects = render_objects({"config": {"scheduling": {"policy": "random"}}})
    with pytest.raises(Exception, match=r"scheduling\.policy"):
        load_config(_write_config(objects, tmp_path), env={})


def test_values_mirror_every_config_field() -> None:
    # A field added to GuardConfig must appear in values.yaml (documented), or users cannot set it.
    from vgpu_guard.engine.config import GuardConfig

    values = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "manifests/charts/vgpu-guard/values.yaml").read_text()
    )
    chart_owned = {"webhook"}  # ports, TLS paths and shutdown come from webhook.*/metrics.* values
    for section, field in GuardConfig.model_fields.items():
        alias = field.alias or section
        if alias in chart_owned or alias == "deviceConfig":
            continue
        model = field.annotation
        assert model is not None and hasattr(model, "model_fields")
        expected = {f.alias or n for n, f in model.model_fields.items()}
        assert set(values["config"][alias]) == expected, alias
