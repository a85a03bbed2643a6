"""The admission chain as kube-apiserver runs it: webhooks read from the stored configurations.

Test code (issue 45): ``simulate`` puts its in-process arbiter in ``Frontend``'s admission seam;
only the tests' served double (the e2e ``double`` backend, the contract suite) calls webhooks.

Sources: Kubernetes docs "Dynamic Admission Control" and "Extensible Admission Controllers";
staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/ (generic/webhook.go matching,
predicates/rules, namespace and object selectors; mutating/dispatcher.go ordering, patches and
reinvocation; validating/dispatcher.go; errors/statuserror.go denial texts; request/admissionreview.go
request fields and response checks).

Order on a write (see ``Frontend``): mutating webhooks, configurations sorted by name and webhooks
in listed order, each seeing the previous one's result; webhooks with ``reinvocationPolicy:
IfNeeded`` are called once more if a later webhook changed the object; then the store validates;
then validating webhooks are called concurrently. A pod deleted at once goes through both rounds
twice (registry/generic/registry/store.go Delete: the graceful update, then the delete itself).

Failures, as the client sees them:
- call errors (refused, timeout, non-200, undecodable response; for v1 a wrong uid, apiVersion or
  kind, patch without patchType and the like; an unsupported patchType): ``failurePolicy: Ignore``
  goes on, ``Fail`` answers 500 ``Internal error occurred: failed calling webhook "NAME": ...``;
- denials: the webhook's ``status.code`` (below 400, or none, -> 400) with ``admission webhook
  "NAME" denied the request: MESSAGE``, its reason and details passed through;
- a patch that does not decode or apply: 500 ``Internal error occurred: ...`` whatever the
  failurePolicy (the real dispatcher returns it outside the call-error path).

Warnings follow endpoints/filters/warning.go and reach the client with an error too (see
``attach_warnings``). Checked against kube-apiserver 1.20 by tests/contract/test_admission.py.

``clientConfig.service`` is reached through a loopback address the test configures (``services``),
with TLS verified against ``caBundle`` for the name ``SERVICE.NAMESPACE.svc``.

The chain's collaborators: ``webhook_match`` (which webhooks apply, the request each gets),
``webhook_call`` (the HTTPS call and its call errors), the product's ``_webhook_warnings`` (the recorder).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from dataclasses import dataclass, field

import jsonpatch

from tests.apidouble_support.webhook_call import WebhookCaller, WebhookCallError
from tests.apidouble_support.webhook_match import (
    Hook,
    HookMatcher,
    conditions_hold,
    internal_error,
    pod_grace,
    review_options,
    review_request,
)
from vgpu_guard.apidouble import _status as st
from vgpu_guard.apidouble._values import Obj
from vgpu_guard.apidouble._webhook_warnings import WarningRecorder, attach_warnings, warnings_of
from vgpu_guard.apidouble.identity import UserInfo
from vgpu_guard.apidouble.store import Pending, Store, deep_copy, format_time
from vgpu_guard.kube.resources import MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS

__all__ = ["AdmissionChain", "WebhookCallError", "attach_warnings", "warnings_of"]

_PATCH_ERRORS = (
    ValueError,
    binascii.Error,
    jsonpatch.JsonPatchException,
    jsonpatch.JsonPointerException,
    TypeError,
    KeyError,
)


@dataclass(slots=True)
class AdmissionChain:
    """Calls the webhook configurations stored in ``store`` (an ``AdmissionRunner``).

    ``services`` maps ``(namespace, name, port)`` of a ``clientConfig.service`` to the loopback
    ``host:port`` where that webhook really listens (the double has no Services or Endpoints).
    """

    store: Store
    services: dict[tuple[str, str, int], str] = field(default_factory=dict)
    _matcher: HookMatcher = field(init=False)
    _caller: WebhookCaller = field(init=False)
    _warnings: WarningRecorder = field(init=False)

    def __post_init__(self) -> None:
        self._matcher = HookMatcher(self.store)
        self._caller = WebhookCaller(self.services)
        self._warnings = WarningRecorder()

    def active(self) -> bool:
        return bool(self.store.list(MUTATING_WEBHOOKS).items or self.store.list(VALIDATING_WEBHOOKS).items)

    async def close(self) -> None:
        await self._caller.close()

    # -- the chain -------------------------------------------------------------------------------
    async def mutate(self, pending: Pending, user: UserInfo) -> None:
        try:
            await self._mutating_round(pending, user)
        except BaseException:
            self._warnings.forget(pending)
            raise

    async def validate(self, pending: Pending, user: UserInfo) -> None:
        try:
            await self._validating_round(pending, user)
            if _deleted_in_two_steps(pending):
                # registry/generic/registry/store.go Delete: a pod deleted at once is first updated
                # (deletionTimestamp, grace 0) and then deleted, and each step runs the webhooks.
                first, options = pending.old, pending.options
                pending.options = review_options(pending)  # the grace period stays settled
                pending.old = _marked_deleting(first, format_time(self.store.clock()))
                try:
                    await self._mutating_round(pending, user)
                    await self._validating_round(pending, user)
                finally:
                    pending.old, pending.options = first, options
        finally:
            self._warnings.forget(pending)

    async def _mutating_round(self, pending: Pending, user: UserInfo) -> None:
        hooks = self._matcher.hooks(mutating=True)
        if not hooks:
            return
        after: dict[int, Obj | None] = {}
        for i, hook in enumerate(hooks):
            if await self._mutate_once(hook, pending, user):
                after[i] = deep_copy(pending.object)
            elif i not in after:
                after[i] = None
        # reinvocationPolicy IfNeeded: once more if a later webhook changed the object.
        final = pending.object
        for i, hook in enumerate(hooks):
            state = after.get(i)
            if state is not None and hook.spec.get("reinvocationPolicy") == "IfNeeded" and state != final:
                await self._mutate_once(hook, pending, user)

    async def _mutate_once(self, hook: Hook, pending: Pending, user: UserInfo) -> bool:
        """Call one mutating webhook if it matches; True when it was called."""
        shown = self._shown(pending)
        version = self._matcher.matches(hook, pending, shown)
        if version is None or not conditions_hold(hook, pending, shown, user):
            return False
        response = await self._call(hook, pending, user, version, shown)
        if response is None:
            return True  # failurePolicy Ignore swallowed a call error
        self._warnings.warn(pending, response)  # a denying webhook's warnings reach the client too
        _deny_if_rejected(hook, response)
        if response.get("patch"):
            self._apply_patch(hook, pending, shown, response)
        return True

    def _apply_patch(self, hook: Hook, pending: Pending, shown: Obj | None, response: Obj) -> None:
        """mutating/dispatcher.go: a patch that does not decode or apply is an internal error
        whatever the failurePolicy; an unsupported patchType is a call error."""
        try:
            ops = json.loads(base64.b64decode(response["patch"], validate=True))
        except (ValueError, binascii.Error) as e:
            raise internal_error(f"{type(e).__name__}: {e}") from e
        if not ops:
            return
        if pending.object is None:
            raise internal_error(
                f'admission webhook "{hook.name}" attempted to modify the object, which is not '
                "supported for this operation"
            )
        if response.get("patchType") != "JSONPatch":
            _call_failed(hook, f"unsupported patch type {json.dumps(response.get('patchType'))}")
            return
        try:
            patched = jsonpatch.apply_patch(shown, ops)
        except _PATCH_ERRORS as e:
            raise internal_error(f"{type(e).__name__}: {e}") from e
        if not isinstance(patched, dict):
            raise internal_error("the patched object is not a JSON object")
        pending.object = self.store.to_storage(pending.info, patched)
        pending.completed = False

    async def _validating_round(self, pending: Pending, user: UserInfo) -> None:
        hooks = self._matcher.hooks(mutating=False)
        if not hooks:
            return
        shown = self._shown(pending)
        # All matched before any call (validating/dispatcher.go: a matchCondition error ends it).
        calls = []
        for hook in hooks:
            version = self._matcher.matches(hook, pending, shown)
            if version is not None and conditions_hold(hook, pending, shown, user):
                calls.append((hook, version))
        results = await asyncio.gather(
            *(self._call(hook, pending, user, version, shown) for hook, version in calls),
            return_exceptions=True,
        )
        for (hook, _), result in zip(calls, results, strict=True):
            if isinstance(result, BaseException):
                raise result
            if result is not None:
                self._warnings.warn(pending, result)
                _deny_if_rejected(hook, result)

    def _shown(self, pending: Pending) -> Obj | None:
        if pending.object is None:
            return None
        if pending.binds:
            shown: Obj = deep_copy(pending.object)
            return shown
        return self.store.present(pending.info, pending.object, pending.version)

    async def _call(
        self, hook: Hook, pending: Pending, user: UserInfo, version: str, obj: Obj | None
    ) -> Obj | None:
        """The webhook's ``response``; None when a call error was ignored (failurePolicy Ignore)."""
        sent = deep_copy(obj)
        if pending.operation == "CREATE" and isinstance(sent, dict):
            # before rest.BeforeCreate (mutating webhooks, a Binding) it is Go's zero time: null
            sent.setdefault("metadata", {}).setdefault("creationTimestamp", None)
        request = review_request(pending, user, version, sent)
        try:
            return await self._caller.post(hook, request)
        except WebhookCallError as e:
            _call_failed(hook, str(e))
            return None


def _deleted_in_two_steps(pending: Pending) -> bool:
    """A pod deleted at once (no grace, no finalizers): the API server updates it, then deletes it."""
    if pending.operation != "DELETE" or pending.dry_run or pending.info.key != ("", "pods"):
        return False
    meta = (pending.old or {}).get("metadata") or {}
    if meta.get("finalizers") or (
        meta.get("deletionTimestamp") and not meta.get("deletionGracePeriodSeconds")
    ):
        return False
    return pod_grace(pending.old or {}, pending.grace_period_seconds) == 0


def _call_failed(hook: Hook, reason: str) -> None:
    """A call error (ErrCallingWebhook): ignored under ``failurePolicy: Ignore``, else a 500."""
    if hook.spec.get("failurePolicy", "Fail") == "Ignore":
        return  # fail open, as the API server does (it only logs and counts it)
    raise internal_error(f'failed calling webhook "{hook.name}": {reason}')


def _deny_if_rejected(hook: Hook, response: Obj) -> None:
    """errors/statuserror.go ToStatusErr: the client-visible denial."""
    if response.get("allowed"):
        return
    result: Obj = response["status"] if isinstance(response.get("status"), dict) else {}
    denied = f'admission webhook "{hook.name}" denied the request'
    message = result.get("message") or result.get("reason")
    text = f"{denied}: {message}" if message else f"{denied} without explanation"
    code = int(result.get("code") or 0)
    code = max(code, 400)  # "we don't return < 400 status codes along with a rejection"
    status = st.make_status(code, str(result.get("reason") or ""), text)
    if result.get("status") not in (None, "", "Success"):
        status["status"] = result["status"]
    if isinstance(result.get("details"), dict):
        status["details"] = result["details"]
    raise st.raise_status(status)


def _marked_deleting(pod: Obj | None, now: str) -> Obj | None:
    if pod is None:
        return None
    marked: Obj = deep_copy(pod)
    meta = marked.setdefault("metadata", {})
    meta["deletionTimestamp"] = now
    meta["deletionGracePeriodSeconds"] = 0
    return marked
