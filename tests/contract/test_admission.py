"""ADMISSION WEBHOOKS: what the API server sends to webhooks and what clients see of their answers.

Every probe registers its webhook configurations scoped to its own namespace (namespaceSelector on
the ``probe`` label) through ``hooks.installed``, which waits until the real server applies them and
deletes them at the end. Webhook URLs and ports in messages become ``<webhook-url>``; where the Go
error detail of a failed call cannot match (Go's net/http versus aiohttp), only the stable prefix
``Internal error occurred: failed calling webhook "NAME": `` is compared.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, TypedDict

import pytest
import pytest_asyncio

from tests.contract.conftest import Contract, Side
from tests.contract.hooks import (
    HookServer,
    collection,
    configuration,
    installed,
    scrub,
    serve_hooks,
    webhook,
)
from tests.contract.raw import Reply

pytestmark = pytest.mark.asyncio(loop_scope="session")

Obj = dict[str, Any]


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def hooks() -> AsyncIterator[HookServer]:
    """The AdmissionReview server both sides call (records per probe and side)."""
    async with serve_hooks() as server:
        yield server


@dataclass
class Scope:
    """One probe on one side: its namespace (labelled ``probe=<probe>``) and its webhook URLs."""

    side: Side
    server: HookServer
    probe: str
    ns: str

    @property
    def tag(self) -> str:
        return f"{self.probe}-{self.side.name}"

    def hook(self, name: str, behaviour: str, *args: str | float, **extra: Any) -> Obj:
        url = self.server.url(self.tag, behaviour, *args)
        return webhook(name, url, self.server.ca_bundle, self.probe, **extra)

    def installed(self, *configs: Obj) -> Any:
        return installed(self.side, self.server, self.tag, self.probe, self.ns, *configs)

    def seen(self) -> list[Obj]:
        return self.server.seen(self.tag)

    def calls(self) -> list[tuple[str, Obj]]:
        return self.server.calls(self.tag)

    def expect_calls(self, count: int) -> None:
        """Guard against two sides agreeing on nothing: the webhooks were called ``count`` times."""
        got = len(self.seen())
        assert got == count, f"{self.side.name}: {self.probe}: {got} webhook calls, expected {count}"

    @property
    def pods(self) -> str:
        return f"/api/v1/namespaces/{self.ns}/pods"

    async def create_pod(self, name: str, **query: str) -> Reply:
        return await self.side.admin.post(self.pods, pod(name), **query)

    async def stored(self, name: str) -> bool:
        return (await self.side.admin.get(f"{self.pods}/{name}")).status == 200


async def scope(side: Side, server: HookServer, probe: str) -> Scope:
    return Scope(side, server, probe, await side.namespace(probe=probe))


def pod(name: str, labels: dict[str, str] | None = None) -> Obj:
    metadata: Obj = {"name": name}
    if labels:
        metadata["labels"] = labels
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def mutating(name: str, *hooks: Obj) -> Obj:
    return configuration("Mutating", name, *hooks)


def validating(name: str, *hooks: Obj) -> Obj:
    return configuration("Validating", name, *hooks)


def status_of(reply: Reply) -> Obj:
    """The Status a client sees, with webhook URLs scrubbed."""
    shape = reply.status_shape
    shape["message"] = scrub(shape["message"])
    body = reply.body if isinstance(reply.body, dict) else {}
    shape["details"] = json.loads(scrub(json.dumps(body.get("details")))) if "details" in body else None
    return shape


CALL_FAILED = 'Internal error occurred: failed calling webhook "{}": '


def call_failure(reply: Reply, name: str) -> Obj:
    """A failed call as the client sees it: code, reason and the stable prefix of the message."""
    message = str(reply.status_shape["message"] or "")
    prefix = CALL_FAILED.format(name)
    causes: Any = (reply.body.get("details") or {}).get("causes") if isinstance(reply.body, dict) else None
    return {
        "http": reply.status,
        "reason": reply.status_shape["reason"],
        "code": reply.status_shape["code"],
        "prefix": message.startswith(prefix),
        "message_head": message[: len(prefix)],
        "cause_repeats_message": bool(causes) and message.endswith(str(causes[0].get("message"))),
    }


def labels_of(obj: Obj | None) -> Obj:
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


# -- denials and warnings ---------------------------------------------------------------------------
@pytest.mark.parametrize("code", [0, 403, 422])
async def test_denial_as_the_client_sees_it(contract: Contract, hooks: HookServer, code: int) -> None:
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, f"deny-{code}")
        name = "deny.contract.vgpu-guard.io"
        async with s.installed(validating(f"contract-deny-{code}", s.hook(name, "deny", code))):
            reply = await s.create_pod("p")
        s.expect_calls(1)
        return {"reply": reply.body, "http": reply.status, "stored": await s.stored("p")}

    await contract.agree(probe)


async def test_denial_without_a_status_says_without_explanation(
    contract: Contract, hooks: HookServer
) -> None:
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "deny-bare")
        name = "bare.contract.vgpu-guard.io"
        async with s.installed(mutating("contract-deny-bare", s.hook(name, "deny-bare"))):
            reply = await s.create_pod("p")
        s.expect_calls(1)
        return {"reply": reply.body, "http": reply.status}

    await contract.agree(probe)


async def test_warnings_become_299_headers_once_each(contract: Contract, hooks: HookServer) -> None:
    # Two webhooks send the same warnings: the client gets each text once, quotes escaped.
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "warn")
        async with s.installed(
            mutating("contract-warn-m", s.hook("warn-m.contract.vgpu-guard.io", "warn")),
            validating("contract-warn-v", s.hook("warn-v.contract.vgpu-guard.io", "warn")),
        ):
            reply = await s.create_pod("p")
        s.expect_calls(2)
        return {"http": reply.status, "warnings": list(reply.warnings)}

    await contract.agree(probe)


# -- mutation ------------------------------------------------------------------------------------------
async def test_mutating_patch_is_applied_and_validating_sees_it(
    contract: Contract, hooks: HookServer
) -> None:
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "patch")
        async with s.installed(
            mutating(
                "contract-patch",
                s.hook("label.contract.vgpu-guard.io", "label", "gpu.example.com~1class", "a100"),
                s.hook("annotate.contract.vgpu-guard.io", "annotate", "vgpu-guard.io~1checked", "yes"),
            ),
            validating("contract-patch-v", s.hook("check.contract.vgpu-guard.io", "allow")),
        ):
            reply = await side.admin.post(s.pods, pod("p", {"app": "x"}))
        s.expect_calls(3)
        got = await side.admin.get(f"{s.pods}/p")
        calls = [
            {
                "webhook": path,
                "labels": labels_of(req["object"]),
                "annotations": req["object"]["metadata"].get("annotations"),
            }
            for path, req in s.calls()
        ]
        return {
            "http": reply.status,
            "created_labels": labels_of(reply.body),
            "stored_labels": labels_of(got.body),
            "stored_annotations": got.body["metadata"].get("annotations"),
            "calls": calls,
        }

    await contract.agree(probe)


async def test_reinvocation_if_needed_calls_the_earlier_webhook_again(
    contract: Contract, hooks: HookServer
) -> None:
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "reinvoke")
        first = s.hook("first.contract.vgpu-guard.io", "allow", reinvocationPolicy="IfNeeded")
        never = s.hook("never.contract.vgpu-guard.io", "allow", reinvocationPolicy="Never")
        later = s.hook("later.contract.vgpu-guard.io", "label", "later", "yes")
        async with s.installed(
            mutating("contract-reinvoke-a", first, never), mutating("contract-reinvoke-b", later)
        ):
            reply = await s.create_pod("p")
        assert reply.status == 201, reply.body
        return {
            "http": reply.status,
            "labels": labels_of(reply.body),
            "calls": [(path, labels_of(req["object"])) for path, req in s.calls()],
        }

    await contract.agree(probe)


# -- failures and failurePolicy -----------------------------------------------------------------------
@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
async def test_unreachable_webhook_follows_the_failure_policy(
    contract: Contract, hooks: HookServer, policy: str
) -> None:
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, f"unreachable-{policy.lower()}")
        name = "gone.contract.vgpu-guard.io"
        hook = s.hook(name, "allow", failurePolicy=policy)
        hook["clientConfig"]["url"] = "https://127.0.0.1:1/nobody-listens"
        async with s.installed(validating(f"contract-unreachable-{policy.lower()}", hook)):
            reply = await s.create_pod("p")
        return {"failure": call_failure(reply, name), "stored": await s.stored("p")}

    await contract.agree(probe)


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
async def test_timeout_follows_the_failure_policy(contract: Contract, hooks: HookServer, policy: str) -> None:
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, f"slow-{policy.lower()}")
        name = "slow.contract.vgpu-guard.io"
        hook = s.hook(name, "slow", 2.5, failurePolicy=policy, timeoutSeconds=1)
        async with s.installed(mutating(f"contract-slow-{policy.lower()}", hook)):
            reply = await s.create_pod("p")
        return {
            "failure": call_failure(reply, name),
            "stored": await s.stored("p"),
            "calls": len(s.seen()),
        }

    await contract.agree(probe)


@pytest.mark.parametrize("behaviour", ["wrong-uid", "wrong-kind", "error", "garbage"])
async def test_bad_answers_are_call_errors(contract: Contract, hooks: HookServer, behaviour: str) -> None:
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, f"bad-{behaviour}")
        fail, ignore = "fail.contract.vgpu-guard.io", "ignore.contract.vgpu-guard.io"
        async with s.installed(
            validating(f"contract-bad-{behaviour}", s.hook(ignore, behaviour, failurePolicy="Ignore"))
        ):
            ignored = await s.create_pod("ignored")
        async with s.installed(validating(f"contract-bad-{behaviour}-2", s.hook(fail, behaviour))):
            failed = await s.create_pod("failed")
        s.expect_calls(2)
        message = str(failed.status_shape["message"])
        return {
            "ignored": ignored.status,
            "failed": call_failure(failed, fail),
            "uid_text": "expected response.uid=" in message,
            "stored": [await s.stored("ignored"), await s.stored("failed")],
        }

    await contract.agree(probe)


# -- dry run -------------------------------------------------------------------------------------------
async def test_dry_run_reaches_side_effect_free_webhooks_and_stores_nothing(
    contract: Contract, hooks: HookServer
) -> None:
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "dry-run")
        async with s.installed(
            mutating("contract-dry-run", s.hook("label.contract.vgpu-guard.io", "label", "dry", "run")),
            validating(
                "contract-dry-run-v",
                s.hook("check.contract.vgpu-guard.io", "allow", sideEffects="NoneOnDryRun"),
            ),
        ):
            reply = await s.create_pod("p", dryRun="All")
        s.expect_calls(2)
        return {
            "http": reply.status,
            "labels": labels_of(reply.body),
            "stored": await s.stored("p"),
            "requests": [{"dryRun": r["dryRun"], "options": r["options"]} for r in s.seen()],
        }

    await contract.agree(probe)


# -- what the request carries -----------------------------------------------------------------------
def request_view(req: Obj) -> Obj:
    """The request fields a webhook reads (no uid, no object contents beyond what is asked)."""
    obj, old = req.get("object"), req.get("oldObject")
    return {
        "kind": req.get("kind"),
        "resource": req.get("resource"),
        "subResource": req.get("subResource"),
        "requestKind": req.get("requestKind"),
        "requestResource": req.get("requestResource"),
        "requestSubResource": req.get("requestSubResource"),
        "operation": req.get("operation"),
        "namespace": req.get("namespace"),
        "name": req.get("name"),
        "dryRun": req.get("dryRun"),
        "options": req.get("options"),
        "object": None if obj is None else {"kind": obj.get("kind"), "labels": labels_of(obj)},
        "oldObject": None
        if old is None
        else {
            "kind": old.get("kind"),
            "labels": labels_of(old),
            "deleting": "deletionTimestamp" in old.get("metadata", {}),
            "deletionGracePeriodSeconds": old.get("metadata", {}).get("deletionGracePeriodSeconds"),
        },
    }


async def test_create_request_fields(contract: Contract, hooks: HookServer) -> None:
    # What mutating and validating webhooks are sent for a plain pod CREATE (and the ?timeout=).
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "create-request")
        async with s.installed(
            mutating("contract-create-request", s.hook("m.contract.vgpu-guard.io", "allow")),
            validating("contract-create-request-v", s.hook("v.contract.vgpu-guard.io", "allow")),
        ):
            reply = await s.create_pod("p")
        s.expect_calls(2)
        requests = []
        for path, r in s.calls():
            meta = r["object"]["metadata"]
            requests.append(
                {
                    **request_view(r),
                    "webhook": path,
                    # managedFields: the double keeps none; namespace: see the next probe
                    "metadata_keys": sorted(set(meta) - {"managedFields", "namespace"}),
                    "has_uid": bool(meta.get("uid")),
                    "has_creation_timestamp": bool(meta.get("creationTimestamp")),
                    "object_name": meta.get("name"),
                    "user_groups": sorted(r["userInfo"].get("groups") or []),
                }
            )
        return {"http": reply.status, "requests": requests, "queries": hooks.queries(s.tag)}

    await contract.agree(probe)


async def test_create_request_of_a_pod_sent_without_a_namespace(
    contract: Contract, hooks: HookServer
) -> None:
    # The body names no namespace (the URL does): what do mutating and validating webhooks see?
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "create-namespace")
        async with s.installed(
            mutating("contract-create-namespace", s.hook("m.contract.vgpu-guard.io", "allow")),
            validating("contract-create-namespace-v", s.hook("v.contract.vgpu-guard.io", "allow")),
        ):
            reply = await s.create_pod("p")
        s.expect_calls(2)
        return {
            "http": reply.status,
            "object_namespace": [
                (path, r.get("namespace"), r["object"]["metadata"].get("namespace", "<absent>"))
                for path, r in s.calls()
            ],
        }

    await contract.agree(probe)


async def test_create_request_of_a_generated_name(contract: Contract, hooks: HookServer) -> None:
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "generate-name")
        body = pod("x")
        body["metadata"] = {"generateName": "gen-", "namespace": s.ns}
        async with s.installed(
            mutating("contract-generate-name", s.hook("m.contract.vgpu-guard.io", "allow")),
            validating("contract-generate-name-v", s.hook("v.contract.vgpu-guard.io", "allow")),
        ):
            reply = await side.admin.post(s.pods, body)
        s.expect_calls(2)
        return {
            "http": reply.status,
            "requests": [
                {
                    # generated names are random: "gen-" and the absence of a name are what matter
                    "name": str(r.get("name", "<absent>"))[:4],
                    "object_name": str(r["object"]["metadata"].get("name", "<absent>"))[:4],
                    "generateName": r["object"]["metadata"].get("generateName"),
                }
                for r in s.seen()
            ],
        }

    await contract.agree(probe)


async def test_update_sends_the_old_object(contract: Contract, hooks: HookServer) -> None:
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "update")
        created = await side.admin.post(s.pods, pod("p", {"v": "1"}))
        assert created.status == 201, created.body
        rules = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods"]}]
        async with s.installed(
            mutating("contract-update", s.hook("m.contract.vgpu-guard.io", "allow", rules=rules)),
            validating("contract-update-v", s.hook("v.contract.vgpu-guard.io", "allow", rules=rules)),
        ):
            patched = await side.admin.patch(f"{s.pods}/p", {"metadata": {"labels": {"v": "2"}}})
        s.expect_calls(2)
        return {"http": patched.status, "requests": [request_view(r) for r in s.seen()]}

    await contract.agree(probe)


async def test_delete_sends_the_old_object_and_no_object(contract: Contract, hooks: HookServer) -> None:
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "delete")
        created = await side.admin.post(s.pods, pod("p", {"v": "1"}))
        assert created.status == 201, created.body
        rules = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"], "resources": ["pods"]}]
        async with s.installed(
            mutating("contract-delete", s.hook("m.contract.vgpu-guard.io", "allow", rules=rules)),
            validating("contract-delete-v", s.hook("v.contract.vgpu-guard.io", "allow", rules=rules)),
        ):
            deleted = await side.admin.delete(f"{s.pods}/p")
        return {
            "http": deleted.status,
            "stored": await s.stored("p"),
            "requests": [request_view(r) for r in s.seen()],
        }

    await contract.agree(probe)


async def test_binding_subresource_rule(contract: Contract, hooks: HookServer) -> None:
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "binding")
        created = await side.admin.post(s.pods, pod("p"))
        assert created.status == 201, created.body
        rules = [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["pods/binding"],
            }
        ]
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "p"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "node-a"},
        }
        async with s.installed(
            validating("contract-binding", s.hook("v.contract.vgpu-guard.io", "allow", rules=rules))
        ):
            bound = await side.admin.post(f"{s.pods}/p/binding", binding)
        s.expect_calls(1)
        got = await side.admin.get(f"{s.pods}/p")
        return {
            "http": bound.status,
            "node": got.body["spec"].get("nodeName"),
            "requests": [
                {
                    **request_view(r),
                    # metadata.namespace: see test_create_request_of_a_pod_sent_without_a_namespace
                    "object": {
                        "apiVersion": r["object"].get("apiVersion"),
                        "kind": r["object"].get("kind"),
                        "name": r["object"]["metadata"].get("name"),
                        "target": r["object"].get("target"),
                    },
                    "oldObject": r.get("oldObject"),
                }
                for r in s.seen()
            ],
        }

    await contract.agree(probe)


async def test_service_account_user_info(contract: Contract, hooks: HookServer) -> None:
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "user-info")
        role = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "pods"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}],
        }
        bind = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "pods"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pods"},
            "subjects": [{"kind": "ServiceAccount", "name": "maker", "namespace": s.ns}],
        }
        for path, body in (("roles", role), ("rolebindings", bind)):
            made = await side.admin.post(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{s.ns}/{path}", body)
            assert made.status == 201, made.body
        maker = await side.service_account_client(s.ns, "maker")
        try:
            async with s.installed(
                validating("contract-user-info", s.hook("v.contract.vgpu-guard.io", "allow"))
            ):
                reply = await maker.post(s.pods, pod("p"))
        finally:
            await maker.close()
        s.expect_calls(1)
        return {
            "http": reply.status,
            "users": [
                {"username": r["userInfo"].get("username"), "groups": r["userInfo"].get("groups")}
                for r in s.seen()
            ],
        }

    await contract.agree(probe)


# -- selectors -----------------------------------------------------------------------------------------
async def test_object_selector_decides_which_pods_are_sent(contract: Contract, hooks: HookServer) -> None:
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "object-selector")
        hook = s.hook(
            "gpu.contract.vgpu-guard.io",
            "deny",
            403,
            objectSelector={"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["yes"]}]},
        )
        async with s.installed(validating("contract-object-selector", hook)):
            with_label = await side.admin.post(s.pods, pod("with", {"gpu": "yes"}))
            other_value = await side.admin.post(s.pods, pod("other", {"gpu": "no"}))
            without = await s.create_pod("without")
        return {
            "statuses": [with_label.status, other_value.status, without.status],
            "sent": [r["object"]["metadata"]["name"] for r in s.seen()],
        }

    await contract.agree(probe)


async def test_match_conditions_on_create(contract: Contract, hooks: HookServer) -> None:
    # 1.20 does not know matchConditions (GA in 1.30): it drops the field and calls the webhook.
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "match-conditions")
        hook = s.hook(
            "v.contract.vgpu-guard.io",
            "allow",
            matchConditions=[{"name": "gpu-only", "expression": "'gpu' in object.metadata.labels"}],
        )
        config = validating("contract-match-conditions", hook)
        async with s.installed(config) as replies:
            reply = await side.admin.post(s.pods, pod("p", {"app": "x"}))
            stored = await side.admin.get(f"{collection(config)}/contract-match-conditions")
        return {
            "config_create": replies[0].status,
            "stored_has_match_conditions": "matchConditions" in stored.body["webhooks"][0],
            "http": reply.status,
            "calls": len(s.seen()),
        }

    await contract.agree(probe)


# -- configuration validation -------------------------------------------------------------------------
@pytest.mark.parametrize("side_effects", ["Unknown", "Some", None])
async def test_side_effects_must_be_none_in_v1(
    contract: Contract, hooks: HookServer, side_effects: str | None
) -> None:
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "side-effects")
        hook = s.hook("v.contract.vgpu-guard.io", "allow", sideEffects=side_effects)
        if side_effects is None:
            del hook["sideEffects"]
        config = validating("contract-side-effects", hook)
        async with s.installed(config) as replies:
            pass
        return status_of(replies[0])

    await contract.agree(probe)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8443/hook",
        "https://127.0.0.1:8443/hook?x=1",
        "https://127.0.0.1:8443/hook#frag",
        "https://user:pw@127.0.0.1:8443/hook",
        "https:///hook",
    ],
)
async def test_webhook_url_is_validated(contract: Contract, hooks: HookServer, url: str) -> None:
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "url")
        hook = s.hook("v.contract.vgpu-guard.io", "allow")
        hook["clientConfig"]["url"] = url
        async with s.installed(mutating("contract-url", hook)) as replies:
            pass
        return status_of(replies[0])

    await contract.agree(probe)


# -- more on warnings ------------------------------------------------------------------------------------
def header_texts(reply: Reply) -> list[str]:
    """The texts of ``299 - "..."`` headers, unquoted."""
    out = []
    for header in reply.warnings:
        assert header.startswith('299 - "') and header.endswith('"'), header
        out.append(header[7:-1].replace('\\"', '"').replace("\\\\", "\\"))
    return out


async def test_warnings_that_are_empty_repeated_or_hold_control_characters(
    contract: Contract, hooks: HookServer
) -> None:
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "warn-odd")
        async with s.installed(
            validating("contract-warn-odd", s.hook("v.contract.vgpu-guard.io", "warn-odd"))
        ):
            reply = await s.create_pod("p")
        s.expect_calls(1)
        return {"http": reply.status, "warnings": header_texts(reply)}

    await contract.agree(probe)


async def test_warnings_past_4096_characters_are_cut(contract: Contract, hooks: HookServer) -> None:
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "warn-many")
        async with s.installed(
            validating("contract-warn-many", s.hook("v.contract.vgpu-guard.io", "warn-many"))
        ):
            reply = await s.create_pod("p")
        s.expect_calls(1)
        texts = header_texts(reply)
        return {"http": reply.status, "count": len(texts), "kept": [(t[:2], len(t)) for t in texts]}

    await contract.agree(probe)


async def test_warnings_reach_the_client_when_a_later_webhook_denies(
    contract: Contract, hooks: HookServer
) -> None:
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "warn-deny")
        async with s.installed(
            mutating("contract-warn-deny", s.hook("warn.contract.vgpu-guard.io", "warn")),
            validating("contract-warn-deny-v", s.hook("deny.contract.vgpu-guard.io", "deny", 403)),
        ):
            reply = await s.create_pod("p")
        s.expect_calls(2)
        return {"http": reply.status, "warnings": header_texts(reply)}

    await contract.agree(probe)


# -- patches that do not work ---------------------------------------------------------------------------
@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
@pytest.mark.parametrize("behaviour", ["patch-no-type", "patch-broken"])
async def test_patches_that_cannot_be_applied(
    contract: Contract, hooks: HookServer, behaviour: str, policy: str
) -> None:
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, f"{behaviour}-{policy.lower()}")
        name = "m.contract.vgpu-guard.io"
        config = mutating(
            f"contract-{behaviour}-{policy.lower()}", s.hook(name, behaviour, failurePolicy=policy)
        )
        async with s.installed(config):
            reply = await s.create_pod("p")
        s.expect_calls(1)
        message = str(reply.status_shape["message"] or "")
        return {
            "http": reply.status,
            "reason": reply.status_shape["reason"],
            "internal": message.startswith("Internal error occurred: "),
            "call_error": message.startswith(CALL_FAILED.format(name)),
            "labels": labels_of(reply.body) if reply.status == 201 else None,
        }

    await contract.agree(probe)


async def test_the_patched_object_is_validated_again(contract: Contract, hooks: HookServer) -> None:
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "patch-invalid")
        hook = s.hook("m.contract.vgpu-guard.io", "label", "gpu", "-not-a-value-")
        async with s.installed(mutating("contract-patch-invalid", hook)):
            reply = await s.create_pod("p")
        s.expect_calls(1)
        shape = status_of(reply)
        causes = (shape.pop("details") or {}).get("causes") or []
        return {
            **{k: shape[k] for k in ("http", "reason", "code")},
            "message_head": str(shape["message"]).split(": ")[0],
            "fields": [c.get("field") for c in causes],
            "stored": await s.stored("p"),
        }

    await contract.agree(probe)


# -- AdmissionReview versions -------------------------------------------------------------------------
async def test_v1beta1_reviews_for_webhooks_that_ask_for_them(contract: Contract, hooks: HookServer) -> None:
    # CreateAdmissionObjects takes the first version the webhook lists that the server knows; a v1beta1
    # response is not checked for its uid.
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "v1beta1")
        versions = ["v1beta1", "v1"]
        async with s.installed(
            validating(
                "contract-v1beta1",
                s.hook("a.contract.vgpu-guard.io", "allow", admissionReviewVersions=versions),
                s.hook("b.contract.vgpu-guard.io", "wrong-uid", admissionReviewVersions=["v1beta1"]),
            )
        ):
            reply = await s.create_pod("p")
        s.expect_calls(2)
        return {"http": reply.status, "sent": sorted(hooks.review_versions(s.tag))}

    await contract.agree(probe)


# -- selectors, more ------------------------------------------------------------------------------------
async def test_object_selector_matches_the_old_object_on_update(
    contract: Contract, hooks: HookServer
) -> None:
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "old-selector")
        created = await side.admin.post(s.pods, pod("p", {"gpu": "yes"}))
        assert created.status == 201, created.body
        rules = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods"]}]
        selector = {"matchLabels": {"gpu": "yes"}}
        hook = s.hook("v.contract.vgpu-guard.io", "allow", rules=rules, objectSelector=selector)
        async with s.installed(validating("contract-old-selector", hook)):
            dropped = await side.admin.patch(f"{s.pods}/p", {"metadata": {"labels": {"gpu": None}}})
            other = await side.admin.patch(f"{s.pods}/p", {"metadata": {"labels": {"app": "x"}}})
        return {
            "http": [dropped.status, other.status],
            "calls": [(request_view(r)["oldObject"], labels_of(r["object"])) for r in s.seen()],
        }


async def test_a_denied_update_is_sent_to_the_webhook_again(contract: Contract, hooks: HookServer) -> None:
    # 1.20 retries a failed update against live data from etcd, admission included (fixed in 1.23).
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "denied-update")
        created = await side.admin.post(s.pods, pod("p"))
        assert created.status == 201, created.body
        rules = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods"]}]
        async with s.installed(
            mutating("contract-denied-update", s.hook("m.contract.vgpu-guard.io", "allow", rules=rules)),
            validating(
                "contract-denied-update-v", s.hook("v.contract.vgpu-guard.io", "deny", 403, rules=rules)
            ),
        ):
            denied = await side.admin.patch(f"{s.pods}/p", {"metadata": {"labels": {"x": "y"}}})
        return {"http": denied.status, "calls": [path for path, _ in s.calls()]}

    await contract.agree(probe)


async def test_namespace_selector_on_the_namespace_name_label(contract: Contract, hooks: HookServer) -> None:
    # kubernetes.io/metadata.name is put on every namespace since 1.21 (GA 1.22); 1.20 has no such label.
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "name-label")
        hook = s.hook("v.contract.vgpu-guard.io", "deny", 403)
        hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": s.ns}}
        async with s.installed(validating("contract-name-label", hook)):
            reply = await s.create_pod("p")
        labels = (await side.admin.get(f"/api/v1/namespaces/{s.ns}")).body["metadata"].get("labels")
        return {"http": reply.status, "namespace_labels": sorted(labels)}

    await contract.agree(probe)


async def test_namespace_selector_matches_a_namespace_being_created(
    contract: Contract, hooks: HookServer
) -> None:
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "ns-itself")
        rules = [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["namespaces"]}
        ]
        hook = s.hook("v.contract.vgpu-guard.io", "deny", 403, rules=rules)
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"generateName": "contract-"}}
        labelled = json.loads(json.dumps(body))
        labelled["metadata"]["labels"] = {"probe": s.probe}
        async with s.installed(validating("contract-ns-itself", hook)):
            denied = await side.admin.post("/api/v1/namespaces", labelled)
            other = await side.admin.post("/api/v1/namespaces", body)
        if other.status == 201:
            await side.admin.delete(f"/api/v1/namespaces/{other.body['metadata']['name']}")
        return {
            "labelled": status_of(denied)["http"],
            "unlabelled": other.status,
            "sent": [(r.get("namespace"), r["kind"]["kind"]) for r in s.seen()],
        }

    await contract.agree(probe)


# -- how often DELETE is sent ----------------------------------------------------------------------------
class _DeleteQuery(TypedDict, total=False):
    """The DELETE's query (typed by key, so ``**query`` cannot stand for ``options``)."""

    dryRun: str


@pytest.mark.parametrize("case", ["pod-dry-run", "configmap"])
async def test_delete_calls_webhooks_once_when_there_is_one_step(
    contract: Contract, hooks: HookServer, case: str
) -> None:
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, f"delete-{case}")
        query: _DeleteQuery
        if case == "configmap":
            path = f"/api/v1/namespaces/{s.ns}/configmaps"
            body: Obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "p"}}
            resource, query = "configmaps", {}
        else:
            path, body, resource, query = s.pods, pod("p"), "pods", {"dryRun": "All"}
        created = await side.admin.post(path, body)
        assert created.status == 201, created.body
        rules = [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"], "resources": [resource]}
        ]
        async with s.installed(
            mutating(f"contract-delete-{case}", s.hook("m.contract.vgpu-guard.io", "allow", rules=rules)),
            validating(f"contract-delete-{case}-v", s.hook("v.contract.vgpu-guard.io", "allow", rules=rules)),
        ):
            deleted = await side.admin.delete(f"{path}/p", **query)
        return {"http": deleted.status, "requests": [(p, request_view(r)) for p, r in s.calls()]}

    await contract.agree(probe)


# -- stored configurations ----------------------------------------------------------------------------
async def test_stored_configuration_is_defaulted(contract: Contract, hooks: HookServer) -> None:
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "defaults")
        bare: Obj = {
            "name": "bare.contract.vgpu-guard.io",
            "clientConfig": {"service": {"namespace": s.ns, "name": "hook"}, "caBundle": hooks.ca_bundle},
            "rules": [
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["secrets"]}
            ],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        }
        stored = {}
        for config in (mutating("contract-defaults", bare), validating("contract-defaults", bare)):
            # dry run: the defaulted object comes back, and no unscoped webhook is ever active
            made = await side.admin.post(collection(config), config, dryRun="All")
            assert made.status == 201, made.body
            hook = made.body["webhooks"][0]
            hook["clientConfig"].pop("caBundle")
            stored[config["kind"]] = hook
        return stored

    await contract.agree(probe)


BAD_WEBHOOKS: dict[str, Obj] = {
    "no-review-versions": {"admissionReviewVersions": None},
    "unknown-review-version": {"admissionReviewVersions": ["v2", "v2"]},
    "two-segment-name": {"name": "hook.example"},
    "upper-case-name": {"name": "Hook.Example.com"},
    "timeout": {"timeoutSeconds": 31},
    "policies": {"failurePolicy": "Sometimes", "matchPolicy": "Loose", "reinvocationPolicy": "Always"},
    "rule": {
        "rules": [{"apiGroups": [], "apiVersions": ["*", "v1"], "operations": ["PATCH"], "resources": []}]
    },
    "scope": {
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["*"],
                "resources": ["*", "pods"],
                "scope": "Pods",
            }
        ]
    },
    "no-client-config": {"clientConfig": {}},
    "service": {"clientConfig": {"service": {"name": "", "namespace": "ns", "port": 0, "path": "/a//B"}}},
}


@pytest.mark.parametrize("case", sorted(BAD_WEBHOOKS))
async def test_invalid_webhook_configuration(contract: Contract, hooks: HookServer, case: str) -> None:
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "invalid")
        hook = s.hook("v.contract.vgpu-guard.io", "allow")
        for key, value in BAD_WEBHOOKS[case].items():
            if value is None:
                hook.pop(key)
            else:
                hook[key] = value
        async with s.installed(mutating("contract-invalid", hook)) as replies:
            pass
        return status_of(replies[0])

    await contract.agree(probe)


async def test_duplicate_webhook_names(contract: Contract, hooks: HookServer) -> None:
    async def probe(side: Side) -> Any:
        s = await scope(side, hooks, "duplicate")
        hook = s.hook("v.contract.vgpu-guard.io", "allow")
        async with s.installed(validating("contract-duplicate", hook, hook)) as replies:
            pass
        return status_of(replies[0])

    await contract.agree(probe)
