"""PODS (and nodes): defaults and built-in admission on create, canonical quantities, validation
texts, pod spec immutability, pods/binding, the status subresource, and graceful deletion.

Pods that must stay unbound name a scheduler that does not exist (``contract-none``): the real
control plane runs kube-scheduler. Nodes are cluster-scoped, so each probe names its own with a
random suffix and deletes them at the end (no kubelet: the real node lifecycle controller taints
them later, which no probe waits for).
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import string
from typing import Any

import pytest

from tests.contract.conftest import Contract, Side
from tests.contract.raw import Reply

pytestmark = pytest.mark.asyncio(loop_scope="session")

Obj = dict[str, Any]
NONE = "contract-none"  # no such scheduler: the pod stays unbound on the real cluster
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
FORMAT_WRONG = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
SUFFIX_WRONG = "unable to parse quantity's suffix"
GRACE_ZERO = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}


def unique(prefix: str) -> str:
    return prefix + "".join(random.choices(string.ascii_lowercase + string.digits, k=8))


def renamed(observation: Any, names: dict[str, str]) -> Any:
    """The observation with this side's random names (cluster-scoped objects) as placeholders."""
    text = json.dumps(observation, sort_keys=True)
    for name, placeholder in sorted(names.items(), key=lambda item: -len(item[0])):
        text = text.replace(name, placeholder)
    return json.loads(text)


def container(name: str = "a", image: str = "busybox:1.36", **fields: Any) -> Obj:
    return {"name": name, "image": image, **fields}


def pod(name: str, containers: list[Obj] | None = None, **spec: Any) -> Obj:
    spec.setdefault("schedulerName", NONE)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": containers if containers is not None else [container()], **spec},
    }


def node(name: str, **status: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": status}


def pods(ns: str) -> str:
    return f"/api/v1/namespaces/{ns}/pods"


def binding(name: str, target: str, **meta: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, **meta},
        "target": {"apiVersion": "v1", "kind": "Node", "name": target},
    }


def refusal(reply: Reply) -> Obj:
    """A refusal as clients act on it: the Status shape and each cause (field, reason, message)."""
    shape = reply.status_shape
    body = reply.body if isinstance(reply.body, dict) else {}
    shape["causes"] = [
        [c.get("field"), c.get("reason"), c.get("message")]
        for c in (body.get("details") or {}).get("causes") or []
    ]
    return shape


def fields_of(reply: Reply) -> Obj:
    """A refusal without its texts: code, reason, and which fields failed why."""
    shape = refusal(reply)
    return {"http": shape["http"], "reason": shape["reason"], "causes": [c[:2] for c in shape["causes"]]}


async def create(side: Side, ns: str, body: Obj) -> Reply:
    return await side.admin.post(pods(ns), body)


async def created(side: Side, ns: str, body: Obj) -> Obj:
    reply = await create(side, ns, body)
    assert reply.status == 201, reply.body
    result: Obj = reply.body
    return result


async def account_ready(side: Side, ns: str, name: str) -> None:
    """Before 1.24 a ServiceAccount takes a moment to get its token Secret (pods need it)."""
    for _ in range(600):
        reply = await side.admin.get(f"/api/v1/namespaces/{ns}/serviceaccounts/{name}")
        if reply.status == 200 and (side.minor >= 24 or reply.body.get("secrets")):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{side.name}: ServiceAccount {ns}/{name} never got ready")


def without_token(spec: Obj) -> Obj:
    """The spec minus what the ServiceAccount admission plugin mounts (compared on its own)."""
    out = {k: v for k, v in spec.items() if k != "volumes"}
    for key in ("containers", "initContainers"):
        if key in out:
            out[key] = [{k: v for k, v in c.items() if k != "volumeMounts"} for c in out[key]]
    return out


def token_volumes(spec: Obj, own: set[str]) -> list[Obj]:
    return [v for v in spec.get("volumes") or [] if v["name"] not in own]


# -- defaults and built-in admission on create ------------------------------------------------
async def test_pod_spec_defaults_on_create(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        body = pod("p")
        del body["spec"]["schedulerName"]  # the default; the create reply is read before any binding
        made = await created(side, ns, body)
        return {"spec": without_token(made["spec"]), "status": made["status"]}

    await contract.agree(probe)


async def test_image_pull_policy_defaults_by_tag(contract: Contract) -> None:
    images = [
        "busybox",
        "busybox:latest",
        "busybox:1.36",
        "localhost:5000/busybox",
        "localhost:5000/busybox:latest",
        "busybox@sha256:" + "a" * 64,
        "busybox:latest@sha256:" + "a" * 64,
        "docker.io/library/busybox:LATEST",
        "BusyBox",
        "registry.example/team/app:v1",
    ]

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        containers = [container(f"c{i}", image) for i, image in enumerate(images)]
        explicit = container("set", "busybox", imagePullPolicy="Never")
        made = await created(
            side, ns, pod("p", [*containers, explicit], initContainers=[container("init", "busybox")])
        )
        spec = made["spec"]
        return {c["image"]: c["imagePullPolicy"] for c in [*spec["containers"], *spec["initContainers"]]}

    await contract.agree(probe)


async def test_requests_default_from_limits_and_the_qos_class(contract: Contract) -> None:
    cases = {
        "best-effort": [container()],
        "burstable-requests": [container(resources={"requests": {"cpu": "100m"}})],
        "burstable-partial": [
            container(resources={"requests": {"cpu": "100m"}, "limits": {"cpu": "1", "memory": "1Gi"}})
        ],
        "guaranteed": [
            container("a", resources={"limits": {"cpu": "1", "memory": "1Gi"}}),
            container(
                "b", resources={"limits": {"cpu": "1000m", "memory": "1024Mi"}, "requests": {"cpu": "1"}}
            ),
        ],
        "init-without-limits": [container(resources={"limits": {"cpu": "1", "memory": "1Gi"}})],
    }

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        seen = {}
        for name, containers in cases.items():
            extra = {"initContainers": [container("init")]} if name == "init-without-limits" else {}
            body = {
                **pod(name, containers, **extra),
                "status": {"phase": "Running", "qosClass": "Guaranteed"},
            }
            made = await created(side, ns, body)
            seen[name] = {
                "resources": [c["resources"] for c in made["spec"]["containers"]],
                "status": made["status"],
            }
        return seen

    await contract.agree(probe)


async def test_default_tolerations_are_added_unless_already_tolerated(contract: Contract) -> None:
    not_ready = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
    cases: dict[str, list[Obj]] = {
        "none": [],
        "everything": [{"operator": "Exists"}],
        "not-ready-short": [{**not_ready, "tolerationSeconds": 5}],
        "unreachable-noschedule": [
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoSchedule"}
        ],
        "any-effect-of-not-ready": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}],
        "gpu": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        seen = {}
        for name, tolerations in cases.items():
            made = await created(side, ns, pod(name, tolerations=tolerations))
            seen[name] = made["spec"].get("tolerations")
        return seen

    await contract.agree(probe)


async def test_priority_class_sets_priority_and_preemption_policy(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        never, plain = unique("contract-never-"), unique("contract-plain-")
        classes = "/apis/scheduling.k8s.io/v1/priorityclasses"
        for name, value, extra in ((never, 1000, {"preemptionPolicy": "Never"}), (plain, 7, {})):
            body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}}
            reply = await side.admin.post(classes, {**body, "value": value, **extra})
            assert reply.status == 201, reply.body
        try:
            seen: Obj = {}
            specs: dict[str, Obj] = {
                "none": {},
                "never": {"priorityClassName": never},
                "plain": {"priorityClassName": plain},
                "same-priority": {"priorityClassName": plain, "priority": 7},
            }
            for name, spec in specs.items():
                made = await created(side, ns, pod(name, **spec))
                seen[name] = [
                    made["spec"].get(k) for k in ("priorityClassName", "priority", "preemptionPolicy")
                ]
            refused = {
                "wrong-priority": pod("w1", priorityClassName=plain, priority=5),
                "priority-without-class": pod("w2", priority=5),
                "wrong-policy": pod("w3", priorityClassName=never, preemptionPolicy="PreemptLowerPriority"),
                "missing-class": pod("w4", priorityClassName=never + "-missing"),
            }
            for name, body in refused.items():
                seen[name] = refusal(await create(side, ns, body))
            return renamed(seen, {never: "NEVER", plain: "PLAIN"})
        finally:
            for name in (never, plain):
                await side.admin.delete(f"{classes}/{name}")

    await contract.agree(probe)


async def test_a_missing_service_account_is_forbidden(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        named = await create(side, ns, pod("p", serviceAccountName="ghost"))
        generated = pod("", serviceAccountName="ghost")
        generated["metadata"] = {"generateName": "gen-"}
        return [refusal(named), refusal(await create(side, ns, generated))]

    await contract.agree(probe)


async def test_service_account_token_is_mounted_in_every_container(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        own = container("own", volumeMounts=[{"name": "mine", "mountPath": TOKEN_PATH}])
        body = pod(
            "p",
            [container("a"), own],
            initContainers=[container("init")],
            volumes=[{"name": "mine", "emptyDir": {}}],
        )
        spec = (await created(side, ns, body))["spec"]
        added = token_volumes(spec, {"mine"})
        names = {v["name"]: "TOKEN" for v in added}
        return {
            "added_volumes": len(added),
            "mounts": {
                c["name"]: [
                    [names.get(m["name"], m["name"]), m["mountPath"], m.get("readOnly")]
                    for m in c["volumeMounts"]
                ]
                for c in [*spec["initContainers"], *spec["containers"]]
            },
            "serviceAccount": [spec.get("serviceAccountName"), spec.get("serviceAccount")],
        }

    await contract.agree(probe)


async def test_service_account_token_volume_source(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        spec = (await created(side, ns, pod("p")))["spec"]
        (volume,) = token_volumes(spec, set())
        return {"name": volume["name"][:-5], "source": {k: v for k, v in volume.items() if k != "name"}}

    await contract.agree(probe)


async def test_automount_opt_outs_and_image_pull_secrets_of_the_account(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        account = {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "quiet"},
            "automountServiceAccountToken": False,
            "imagePullSecrets": [{"name": "regcred"}],
        }
        reply = await side.admin.post(f"/api/v1/namespaces/{ns}/serviceaccounts", account)
        assert reply.status == 201, reply.body
        await account_ready(side, ns, "quiet")
        cases = {
            "pod-opts-out": pod("a", automountServiceAccountToken=False),
            "account-opts-out": pod("b", serviceAccountName="quiet"),
            "pod-overrides-account": pod(
                "c",
                serviceAccountName="quiet",
                automountServiceAccountToken=True,
                imagePullSecrets=[{"name": "mine"}],
            ),
        }
        seen = {}
        for name, body in cases.items():
            spec = (await created(side, ns, body))["spec"]
            seen[name] = {
                "token_volumes": len(token_volumes(spec, set())),
                "mounts": [len(c.get("volumeMounts") or []) for c in spec["containers"]],
                "imagePullSecrets": spec.get("imagePullSecrets"),
                "automount": spec.get("automountServiceAccountToken"),
                "serviceAccount": spec.get("serviceAccount"),
            }
        return seen

    await contract.agree(probe)


# -- quantities ---------------------------------------------------------------------------------
async def test_pod_quantities_are_stored_canonical(contract: Contract) -> None:
    cpu = ["32000m", "0.5", "1e3", "1.5e3", "1000m", "100m", "2", "1.500k", "0.0000000001", "10E3"]
    memory = ["1024Mi", "3000", "12Gi", "1.5Gi", "0.5Ki", "1536Mi", "1e3", "100Ki", "1.5Mi", "1025Mi"]

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        containers = [
            container(f"c{i}", resources={"requests": {"cpu": c, "memory": m}})
            for i, (c, m) in enumerate(zip(cpu, memory, strict=True))
        ]
        containers.append(
            container(
                "gpu",
                resources={
                    "limits": {
                        "volcano.sh/vgpu-memory": "3000",
                        "volcano.sh/vgpu-number": 1,
                        "nvidia.com/gpu": "1e3",
                    },
                    "requests": {"cpu": 3000, "memory": 0.5},
                },
            )
        )
        made = await created(side, ns, pod("p", containers))
        read = await side.admin.get(f"{pods(ns)}/p")
        return {
            "created": [c["resources"] for c in made["spec"]["containers"]],
            "read_back_the_same": read.body["spec"]["containers"] == made["spec"]["containers"],
        }

    await contract.agree(probe)


async def test_node_status_quantities_are_canonical_and_allocatable_defaults_to_capacity(
    contract: Contract,
) -> None:
    async def probe(side: Side) -> Any:
        name = unique("contract-node-")
        capacity = {"cpu": "32000m", "memory": "1024Mi", "volcano.sh/vgpu-memory": "3000", "pods": 110}
        made = await side.admin.post("/api/v1/nodes", node(name, capacity=capacity))
        try:
            assert made.status == 201, made.body
            patched = await side.admin.patch(
                f"/api/v1/nodes/{name}/status",
                {"status": {"allocatable": {"cpu": "31.5", "volcano.sh/vgpu-memory": "2048"}}},
            )
            return {
                "created": {
                    k: made.body["status"].get(k)
                    for k in ("capacity", "allocatable", "daemonEndpoints", "nodeInfo")
                },
                "patched": {k: patched.body["status"].get(k) for k in ("capacity", "allocatable")},
            }
        finally:
            await side.admin.delete(f"/api/v1/nodes/{name}")

    await contract.agree(probe)


async def test_node_create_gets_the_not_ready_taint(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        name = unique("contract-node-")
        made = await side.admin.post("/api/v1/nodes", node(name))
        await side.admin.delete(f"/api/v1/nodes/{name}")
        return made.body["spec"].get("taints")

    await contract.agree(probe)


async def test_a_spec_field_of_the_wrong_json_type_is_refused_by_the_decoder(contract: Contract) -> None:
    """Before any default or admission: the double read these fields and answered 500 instead."""

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        seen: Obj = {}
        bodies = {
            "resources-string": pod("p", [container(resources="x")]),
            "resources-list": pod("p", [container(resources=[1])]),
            "limits-string": pod("p", [container(resources={"limits": "x"})]),
            "requests-number": pod("p", [container(resources={"requests": 1})]),
            "container-string": pod("p", ["c"]),  # type: ignore[list-item]
            "containers-string": {**pod("p"), "spec": {"containers": "c"}},
        }
        for case, body in bodies.items():
            reply = await create(side, ns, body)
            message = str(reply.body.get("message", ""))
            seen[case] = {
                "http": reply.status,
                "reason": reply.body.get("reason"),
                "prefix": message.startswith('Pod in version "v1" cannot be handled as a Pod: '),
            }
        return seen

    await contract.agree(probe)


async def test_an_unparsable_quantity_is_refused(contract: Contract) -> None:
    def decoding(reply: Reply, kind: str) -> Obj:
        message = str(reply.body.get("message", ""))
        return {
            "http": reply.status,
            "reason": reply.body.get("reason"),
            "prefix": message.startswith(f'{kind} in version "v1" cannot be handled as a {kind}: '),
            "error": [text for text in (FORMAT_WRONG, SUFFIX_WRONG) if text in message],
        }

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        seen: Obj = {}
        for value in ("1.5x", "1K", "1e", "one"):
            body = pod("p", [container(resources={"requests": {"cpu": value}})])
            seen[value] = decoding(await create(side, ns, body), "Pod")
        name = unique("contract-node-")
        seen["node-create"] = decoding(
            await side.admin.post("/api/v1/nodes", node(name, capacity={"cpu": "2x"})), "Node"
        )
        made = await side.admin.post("/api/v1/nodes", node(name, capacity={"cpu": "2"}))
        assert made.status == 201, made.body
        try:
            reply = await side.admin.patch(
                f"/api/v1/nodes/{name}/status", {"status": {"capacity": {"cpu": "2x"}}}
            )
            shape = refusal(reply)
            seen["node-patch"] = {
                "http": shape["http"],
                "reason": shape["reason"],
                "prefix": str(shape["message"]).startswith(' "" is invalid: patch: Invalid value: '),
                "causes": [c[:2] for c in shape["causes"]],
                "error": FORMAT_WRONG in str(shape["message"]),
            }
        finally:
            await side.admin.delete(f"/api/v1/nodes/{name}")
        return seen

    await contract.agree(probe)


# -- validation ---------------------------------------------------------------------------------
VGPU = "volcano.sh/vgpu-memory"
INVALID = {
    "extended-requests-differ": [container(resources={"requests": {VGPU: "2"}, "limits": {VGPU: "3"}})],
    "extended-not-integer": [container(resources={"limits": {VGPU: "1.5"}})],
    "extended-requests-only": [container(resources={"requests": {VGPU: "2"}})],
    "request-above-limit": [container(resources={"requests": {"cpu": "2"}, "limits": {"cpu": "1"}})],
    "negative": [container(resources={"requests": {"cpu": "-1"}})],
    "not-a-container-resource": [container(resources={"requests": {"gpu": "1"}})],
    "container-name": [container("Bad_Name")],
    "duplicate-name": [container("a"), container("a")],
    "no-image": [{"name": "a"}],
    "no-containers": [],
}
SAME_TEXT = (
    "extended-requests-only",
    "negative",
    "not-a-container-resource",
    "container-name",
    "duplicate-name",
    "no-image",
    "no-containers",
)


async def test_invalid_pods_are_refused_on_the_same_fields(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        return {name: fields_of(await create(side, ns, pod("p", cs))) for name, cs in INVALID.items()}

    await contract.agree(probe)


async def test_invalid_pod_messages(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        return {name: refusal(await create(side, ns, pod("p", INVALID[name]))) for name in SAME_TEXT}

    await contract.agree(probe)


async def test_request_and_limit_mismatch_messages(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        names = ("extended-requests-differ", "request-above-limit")
        return {name: refusal(await create(side, ns, pod("p", INVALID[name]))) for name in names}

    await contract.agree(probe)


async def test_non_integer_extended_resource_message(contract: Contract) -> None:
    # 1.20 renders the value as a Go struct dump (%#v of resource.Quantity); the value is the one
    # part of this text no client can use, so it is masked on both sides.
    def masked(text: Any) -> Any:
        return re.sub(
            r"Invalid value: .*?: must be an integer", "Invalid value: V: must be an integer", str(text)
        )

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        seen = refusal(await create(side, ns, pod("p", INVALID["extended-not-integer"])))
        seen["message"] = masked(seen["message"])
        seen["causes"] = [[f, r, masked(m)] for f, r, m in seen["causes"]]
        return seen

    await contract.agree(probe)


# -- updates ------------------------------------------------------------------------------------
JSON_PATCH = "application/json-patch+json"


async def test_pod_spec_update_lists_what_may_change(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        made = await created(side, ns, pod("p"))
        made["spec"]["containers"][0]["name"] = "renamed"
        shape = refusal(await side.admin.put(f"{pods(ns)}/p", made))
        # The rest of the message is a go-cmp diff, whose spacing is deliberately unstable.
        shape["message"] = str(shape["message"]).split("\n")[0]
        shape["causes"] = [[f, r, str(m).split("\n")[0]] for f, r, m in shape["causes"]]
        return shape

    await contract.agree(probe)


async def test_pod_update_changes_only_images_deadline_and_tolerations(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        await created(side, ns, pod("p"))
        path = f"{pods(ns)}/p"

        async def patch(body: Any, content_type: str = "application/merge-patch+json") -> Obj:
            reply = await side.admin.patch(path, body, content_type)
            if reply.status == 200:
                spec = reply.body["spec"]
                return {
                    "http": 200,
                    "image": spec["containers"][0]["image"],
                    "deadline": spec.get("activeDeadlineSeconds"),
                }
            shape = fields_of(reply)
            shape["forbidden_spec"] = str(reply.body.get("message", "")).startswith(
                'Pod "p" is invalid: spec: Forbidden: pod updates may not change fields other than '
            )
            shape["messages"] = [m for _f, r, m in refusal(reply)["causes"] if r != "FieldValueForbidden"]
            return shape

        return {
            "image": await patch(
                [{"op": "replace", "path": "/spec/containers/0/image", "value": "busybox:2"}], JSON_PATCH
            ),
            "deadline": await patch({"spec": {"activeDeadlineSeconds": 60}}),
            "deadline-shorter": await patch({"spec": {"activeDeadlineSeconds": 30}}),
            "deadline-longer": await patch({"spec": {"activeDeadlineSeconds": 90}}),
            "deadline-removed": await patch({"spec": {"activeDeadlineSeconds": None}}),
            "node-name": await patch({"spec": {"nodeName": "somewhere"}}),
            "grace-period": await patch({"spec": {"terminationGracePeriodSeconds": 10}}),
            "scheduler": await patch({"spec": {"schedulerName": "other"}}),
            "containers-merged-away-the-token-mount": await patch(
                {"spec": {"containers": [container("a", "busybox:3")]}}
            ),
            "container-added": await patch(
                [{"op": "add", "path": "/spec/containers/-", "value": container("b")}], JSON_PATCH
            ),
        }

    await contract.agree(probe)


async def test_pod_update_may_add_tolerations_but_not_change_them(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        await created(side, ns, pod("p", tolerations=[gpu]))
        path = f"{pods(ns)}/p"

        async def patch(body: Any) -> Obj:
            reply = await side.admin.patch(path, body, JSON_PATCH)
            if reply.status == 200:
                return {"http": 200, "tolerations": reply.body["spec"].get("tolerations")}
            return refusal(reply)

        extra = {"key": "big", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}
        return {
            "added": await patch([{"op": "add", "path": "/spec/tolerations/-", "value": extra}]),
            "changed": await patch(
                [{"op": "replace", "path": "/spec/tolerations/0/key", "value": "amd.com/gpu"}]
            ),
            "seconds-shortened": await patch(
                [{"op": "replace", "path": "/spec/tolerations/1/tolerationSeconds", "value": 10}]
            ),
            "defaults-removed": await patch(
                [{"op": "replace", "path": "/spec/tolerations", "value": [gpu, extra]}]
            ),
        }

    await contract.agree(probe)


# -- pods/binding -------------------------------------------------------------------------------
async def test_binding_answers_201_and_sets_node_annotations_and_condition(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        target = unique("contract-node-")
        made = await side.admin.post("/api/v1/nodes", node(target))
        assert made.status == 201, made.body
        try:
            await created(
                side, ns, {**pod("p"), "metadata": {"name": "p", "annotations": {"keep": "me", "x": "old"}}}
            )
            reply = await side.admin.post(
                f"{pods(ns)}/p/binding", binding("p", target, annotations={"x": "new", "y": "2"})
            )
            after = (await side.admin.get(f"{pods(ns)}/p")).body
            return {
                "reply": [reply.status, reply.body],
                "nodeName": after["spec"].get("nodeName") == target,
                "annotations": after["metadata"].get("annotations"),
                "conditions": [
                    {k: v for k, v in c.items() if k != "lastTransitionTime"}
                    for c in after["status"].get("conditions") or []
                ],
                "phase": after["status"].get("phase"),
            }
        finally:
            await side.admin.delete(f"/api/v1/nodes/{target}")

    await contract.agree(probe)


async def test_binding_to_a_node_that_does_not_exist_is_accepted(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        await created(side, ns, pod("p"))
        reply = await side.admin.post(f"{pods(ns)}/p/binding", binding("p", "no-such-node"))
        after = (await side.admin.get(f"{pods(ns)}/p")).body
        return {"http": reply.status, "nodeName": after["spec"].get("nodeName")}

    await contract.agree(probe)


async def test_a_second_binding_conflicts(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        await created(side, ns, pod("p"))
        first = await side.admin.post(f"{pods(ns)}/p/binding", binding("p", "node-a"))
        second = await side.admin.post(f"{pods(ns)}/p/binding", binding("p", "node-b"))
        same = await side.admin.post(f"{pods(ns)}/p/binding", binding("p", "node-a"))
        return [first.status, refusal(second), refusal(same)]

    await contract.agree(probe)


async def test_binding_with_a_wrong_uid_precondition(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        await created(side, ns, pod("p"))
        wrong = binding("p", "node-a", uid="00000000-0000-0000-0000-000000000000")
        reply = await side.admin.post(f"{pods(ns)}/p/binding", wrong)
        after = (await side.admin.get(f"{pods(ns)}/p")).body
        shape = refusal(reply)
        shape["message"] = re.sub(r"object meta: [-0-9a-f]+", "object meta: UID", str(shape["message"]))
        return {"reply": shape, "nodeName": after["spec"].get("nodeName")}

    await contract.agree(probe)


async def test_binding_refusals(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        await created(side, ns, pod("p"))
        url = f"{pods(ns)}/p/binding"
        no_target = binding("p", "")
        wrong_kind = binding("p", "node-a")
        wrong_kind["target"]["kind"] = "Pod"
        seen = {
            "name-mismatch": refusal(await side.admin.post(url, binding("other", "node-a"))),
            "no-target-name": refusal(await side.admin.post(url, no_target)),
            "target-not-a-node": refusal(await side.admin.post(url, wrong_kind)),
            "no-such-pod": refusal(
                await side.admin.post(f"{pods(ns)}/ghost/binding", binding("ghost", "node-a"))
            ),
        }
        await created(side, ns, pod("t"))
        await side.admin.patch(f"{pods(ns)}/t", {"metadata": {"finalizers": ["contract.vgpu-guard.io/hold"]}})
        await side.admin.delete(f"{pods(ns)}/t")  # stays Terminating: the finalizer holds it
        seen["terminating"] = refusal(await side.admin.post(f"{pods(ns)}/t/binding", binding("t", "node-a")))
        await side.admin.patch(f"{pods(ns)}/t", {"metadata": {"finalizers": None}})
        return seen

    await contract.agree(probe)


async def test_pod_created_with_a_node_name_needs_no_binding(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        made = await created(side, ns, pod("p", nodeName="node-a"))
        again = await side.admin.post(f"{pods(ns)}/p/binding", binding("p", "node-b"))
        return {"nodeName": made["spec"].get("nodeName"), "status": made["status"], "binding": refusal(again)}

    await contract.agree(probe)


# -- the status subresource ---------------------------------------------------------------------
async def test_pod_status_writes_change_status_and_metadata_but_not_spec(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        made = await created(side, ns, pod("p"))
        made["metadata"]["labels"] = {"via": "status-put"}
        made["spec"]["activeDeadlineSeconds"] = 5
        made["status"] = {**made["status"], "phase": "Running", "message": "put"}
        put = (await side.admin.put(f"{pods(ns)}/p/status", made)).body
        patch = {
            "metadata": {"annotations": {"via": "status-patch"}},
            "spec": {"activeDeadlineSeconds": 7},
            "status": {"message": "patched"},
        }
        patched = (await side.admin.patch(f"{pods(ns)}/p/status", patch)).body

        def view(obj: Obj) -> Obj:
            return {
                "labels": obj["metadata"].get("labels"),
                "annotations": obj["metadata"].get("annotations"),
                "deadline": obj["spec"].get("activeDeadlineSeconds"),
                "status": obj["status"],
            }

        return {"put": view(put), "patched": view(patched)}

    await contract.agree(probe)


async def test_pod_main_resource_writes_ignore_status(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        await created(side, ns, pod("p"))
        patched = await side.admin.patch(
            f"{pods(ns)}/p",
            {"metadata": {"labels": {"x": "1"}}, "status": {"phase": "Failed", "message": "no"}},
        )
        body = patched.body
        body["status"] = {"phase": "Succeeded"}
        put = await side.admin.put(f"{pods(ns)}/p", body)
        return [[r.status, r.body["metadata"].get("labels"), r.body["status"]] for r in (patched, put)]

    await contract.agree(probe)


async def test_node_status_and_main_resource_writes_are_split(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        name = unique("contract-node-")
        made = await side.admin.post("/api/v1/nodes", node(name, capacity={"cpu": "4"}))
        assert made.status == 201, made.body
        url = f"/api/v1/nodes/{name}"
        try:
            main = await side.admin.patch(
                url,
                {
                    "metadata": {"labels": {"a": "1"}},
                    "spec": {"podCIDR": "10.1.0.0/24"},
                    "status": {"capacity": {"cpu": "8"}},
                },
            )
            status = await side.admin.patch(
                f"{url}/status",
                {
                    "metadata": {"labels": {"b": "2"}},
                    "spec": {"unschedulable": True},
                    "status": {"capacity": {"cpu": "16"}},
                },
            )

            def view(reply: Reply) -> Obj:
                spec = reply.body["spec"]
                return {
                    "http": reply.status,
                    "labels": reply.body["metadata"].get("labels"),
                    "spec": {k: spec.get(k) for k in ("podCIDR", "unschedulable")},
                    "capacity": reply.body["status"].get("capacity"),
                }

            return {"main": view(main), "status": view(status)}
        finally:
            await side.admin.delete(url)

    await contract.agree(probe)


# -- graceful deletion --------------------------------------------------------------------------
def deleted_view(reply: Reply) -> Obj:
    meta = reply.body.get("metadata") or {} if isinstance(reply.body, dict) else {}
    return {
        "http": reply.status,
        "kind": reply.body.get("kind") if isinstance(reply.body, dict) else None,
        "deletionTimestamp": "deletionTimestamp" in meta,
        "deletionGracePeriodSeconds": meta.get("deletionGracePeriodSeconds"),
    }


async def test_an_unbound_pod_is_deleted_at_once(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        await created(side, ns, pod("p"))
        reply = await side.admin.delete(f"{pods(ns)}/p")
        return {"delete": deleted_view(reply), "after": (await side.admin.get(f"{pods(ns)}/p")).status}

    await contract.agree(probe)


async def test_a_bound_pod_stays_terminating_until_grace_zero(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        await created(side, ns, pod("p"))
        await side.admin.post(f"{pods(ns)}/p/binding", binding("p", "node-a"))
        url = f"{pods(ns)}/p"
        seen: Obj = {"first": deleted_view(await side.admin.delete(url))}
        still = (await side.admin.get(url)).body
        seen["still_there"] = [
            still["metadata"].get("deletionGracePeriodSeconds"),
            still["status"].get("phase"),
        ]
        seen["shorter"] = deleted_view(await side.admin.delete(url, {**GRACE_ZERO, "gracePeriodSeconds": 10}))
        seen["longer"] = deleted_view(await side.admin.delete(url, {**GRACE_ZERO, "gracePeriodSeconds": 20}))
        seen["zero"] = deleted_view(await side.admin.delete(url, GRACE_ZERO))
        seen["after"] = (await side.admin.get(url)).status
        return seen

    await contract.agree(probe)


async def test_a_bound_pod_deleted_with_grace_zero_goes_at_once(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        await created(side, ns, pod("body", nodeName="node-a"))
        await created(side, ns, pod("query", nodeName="node-a"))
        by_body = deleted_view(await side.admin.delete(f"{pods(ns)}/body", GRACE_ZERO))
        by_query = deleted_view(await side.admin.delete(f"{pods(ns)}/query", gracePeriodSeconds="0"))
        after = [(await side.admin.get(f"{pods(ns)}/{n}")).status for n in ("body", "query")]
        return {"body": by_body, "query": by_query, "after": after}

    await contract.agree(probe)
