"""The admission chain as kube-apiserver runs it: webhooks read from the stored configurations.

Sources: Kubernetes docs "Dynamic Admission Control" and "Extensible Admission Controllers";
staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/ (generic/webhook.go matching,
predicates/rules, namespace and object selectors; mutating/dispatcher.go ordering, patches and
reinvocation; validating/dispatcher.go; errors/statuserror.go denial texts; request/admissionreview.go
request fields and response checks).

Order on a write (see ``Frontend``): mutating webhooks, configurations sorted by name and webhooks
in listed order, each seeing the previous one's result; webhooks with ``reinvocationPolicy:
IfNeeded`` are called once more if a later webhook changed the object; then the store validates;
then validating webhooks are called concurrently.

Failures, as the client sees them:
- call errors (refused, timeout, non-200, undecodable or wrong-uid response): ``failurePolicy:
  Ignore`` goes on, ``Fail`` answers 500 ``Internal error occurred: failed calling webhook "NAME":
  ...``;
- denials: the webhook's ``status.code`` (0 -> 403, < 400 -> 400) with ``admission webhook "NAME"
  denied the request: MESSAGE``;
- a patch that does not decode or apply: 500 ``Internal error occurred: ...`` whatever the
  failurePolicy (the real dispatcher returns it outside the call-error path).

``clientConfig.service`` is reached through a loopback address the test configures (``services``),
with TLS verified against ``caBundle`` for the name ``SERVICE.NAMESPACE.svc``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import ssl
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import aiohttp
import jsonpatch

from vgpu_guard.apidouble import _status as st
from vgpu_guard.apidouble._selectors import LabelSelector, SelectorError
from vgpu_guard.apidouble.identity import UserInfo
from vgpu_guard.apidouble.store import Pending, Store, deep_copy
from vgpu_guard.kube.errors import KubeError
from vgpu_guard.kube.resources import MUTATING_WEBHOOKS, NAMESPACES, VALIDATING_WEBHOOKS

__all__ = ["AdmissionChain", "WebhookCallError"]

Obj = dict[str, Any]
_MAX_WARNINGS_TOTAL = 4096


class WebhookCallError(Exception):
    """Raised when a webhook could not be called or answered nonsense (subject to failurePolicy)."""


@dataclass(frozen=True, slots=True)
class _Hook:
    config: str
    spec: Obj
    mutating: bool

    @property
    def name(self) -> str:
        return str(self.spec.get("name", ""))


@dataclass(slots=True)
class AdmissionChain:
    """Calls the webhook configurations stored in ``store`` (an ``AdmissionRunner``).

    ``services`` maps ``(namespace, name, port)`` of a ``clientConfig.service`` to the loopback
    ``host:port`` where that webhook really listens (the double has no Services or Endpoints).
    """

    store: Store
    services: dict[tuple[str, str, int], str] = field(default_factory=dict)
    _session: aiohttp.ClientSession | None = None
    _contexts: dict[str, ssl.SSLContext] = field(default_factory=dict)

    def active(self) -> bool:
        return bool(self.store.list(MUTATING_WEBHOOKS).items or self.store.list(VALIDATING_WEBHOOKS).items)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- matching --------------------------------------------------------------------------------
    def _hooks(self, *, mutating: bool) -> list[_Hook]:
        res = MUTATING_WEBHOOKS if mutating else VALIDATING_WEBHOOKS
        out = []
        for config in self.store.list(res).items:  # sorted by name, like the real dispatcher
            for spec in config.get("webhooks") or []:
                out.append(_Hook(config["metadata"]["name"], spec, mutating))
        return out

    def _matches(self, hook: _Hook, pending: Pending, obj: Obj | None) -> str | None:
        """The version to send the object in when ``hook`` applies to the request, else None."""
        info, sub = pending.info, pending.subresource
        version: str | None = None
        for rule in hook.spec.get("rules") or []:
            ops = rule.get("operations") or []
            if "*" not in ops and pending.operation not in ops:
                continue
            groups = rule.get("apiGroups") or []
            if "*" not in groups and info.group not in groups:
                continue
            if not any(_resource_matches(r, info.plural, sub) for r in rule.get("resources") or []):
                continue
            scope = rule.get("scope", "*")
            if (scope == "Cluster" and info.namespaced) or (scope == "Namespaced" and not info.namespaced):
                continue
            versions = rule.get("apiVersions") or []
            if "*" in versions or pending.version in versions:
                version = pending.version
                break
            if hook.spec.get("matchPolicy", "Equivalent") == "Equivalent":
                other = next((v for v in versions if v in info.versions), None)
                if other is not None:
                    version = other  # the same resource served in another version: converted
                    break
        if version is None:
            return None
        if not self._selector_matches(
            hook.spec.get("namespaceSelector"), self._namespace_labels(pending, obj)
        ):
            return None
        labels = [(o.get("metadata") or {}).get("labels") for o in (obj, pending.old) if o is not None]
        selector = _selector(hook.spec.get("objectSelector"))
        if selector and not any(selector.matches(lbl) for lbl in labels):
            return None
        return version

    def _namespace_labels(self, pending: Pending, obj: Obj | None) -> dict[str, str] | None:
        """None means "always matches" (cluster-scoped objects other than Namespaces)."""
        if pending.info.key == ("", "namespaces"):
            source = obj or pending.old or {}
            return dict((source.get("metadata") or {}).get("labels") or {})
        if not pending.info.namespaced:
            return None
        try:
            ns = self.store.get(NAMESPACES, pending.namespace)
        except KubeError:
            return {}
        return dict(ns["metadata"].get("labels") or {})

    @staticmethod
    def _selector_matches(raw: Any, labels: dict[str, str] | None) -> bool:
        if labels is None:
            return True
        selector = _selector(raw)
        return not selector or selector.matches(labels)

    # -- the chain -------------------------------------------------------------------------------
    async def mutate(self, pending: Pending, user: UserInfo) -> None:
        hooks = self._hooks(mutating=True)
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

    async def _mutate_once(self, hook: _Hook, pending: Pending, user: UserInfo) -> bool:
        """Call one mutating webhook if it matches; True when it was called."""
        shown = self._shown(pending)
        version = self._matches(hook, pending, shown)
        if version is None or not self._conditions_hold(hook, pending, shown, user):
            return False
        response = await self._call(hook, pending, user, version, shown)
        if response is None:
            return True  # failurePolicy Ignore swallowed a call error
        self._deny_if_rejected(hook, response)
        self._warn(pending, response)
        patch = response.get("patch")
        if patch and pending.object is not None:
            if response.get("patchType") != "JSONPatch":
                raise _internal(
                    f'failed calling webhook "{hook.name}": received invalid webhook response: '
                    "patchType must be JSONPatch"
                )
            try:
                ops = json.loads(base64.b64decode(patch, validate=True))
                patched = jsonpatch.apply_patch(shown, ops)
            except (
                ValueError,
                binascii.Error,
                jsonpatch.JsonPatchException,
                jsonpatch.JsonPointerException,
                TypeError,
                KeyError,
            ) as e:
                raise _internal(f"{type(e).__name__}: {e}") from e
            if not isinstance(patched, dict):
                raise _internal("the patched object is not a JSON object")
            pending.object = self.store.to_storage(pending.info, patched)
            pending.completed = False
        return True

    async def validate(self, pending: Pending, user: UserInfo) -> None:
        hooks = self._hooks(mutating=False)
        if not hooks:
            return
        shown = self._shown(pending)
        calls = []
        for hook in hooks:
            version = self._matches(hook, pending, shown)
            if version is not None and self._conditions_hold(hook, pending, shown, user):
                calls.append((hook, self._call(hook, pending, user, version, shown)))
        results = await asyncio.gather(*(c for _, c in calls), return_exceptions=True)
        for (hook, _), result in zip(calls, results, strict=True):
            if isinstance(result, BaseException):
                raise result
            if result is not None:
                self._deny_if_rejected(hook, result)
                self._warn(pending, result)

    def _shown(self, pending: Pending) -> Obj | None:
        if pending.object is None:
            return None
        if pending.subresource == "binding":
            shown: Obj = deep_copy(pending.object)
            return shown
        return self.store.present(pending.info, pending.object, pending.version)

    # -- matchConditions (CEL) ---------------------------------------------------------------------
    def _conditions_hold(self, hook: _Hook, pending: Pending, obj: Obj | None, user: UserInfo) -> bool:
        conditions = hook.spec.get("matchConditions") or []
        if not conditions:
            return True
        try:
            import celpy
            from celpy.adapter import json_to_cel
        except ImportError as e:  # not a runtime dependency: say so instead of skipping the check
            raise _internal(
                f'webhook "{hook.name}" has matchConditions, which need cel-python (pip install cel-python)'
            ) from e
        env = celpy.Environment()
        activation = {
            "object": json_to_cel(obj),
            "oldObject": json_to_cel(pending.old),
            "request": json_to_cel(self._request(pending, user, pending.version, obj)),
        }
        for cond in conditions:
            try:
                result = env.program(env.compile(str(cond.get("expression", "")))).evaluate(activation)
            except Exception as e:  # CEL compile/eval errors follow failurePolicy upstream
                if hook.spec.get("failurePolicy") == "Ignore":
                    return False
                raise _internal(
                    f'failed calling webhook "{hook.name}": matchCondition {cond.get("name")!r}: {e}'
                ) from e
            if not bool(result):
                return False
        return True

    # -- calling -----------------------------------------------------------------------------------
    def _request(self, pending: Pending, user: UserInfo, version: str, obj: Obj | None) -> Obj:
        group, _, kind = pending.kind
        info = pending.info
        kind_version = "v1" if pending.subresource == "binding" else version
        req: Obj = {
            "uid": str(uuid.uuid4()),
            "kind": {"group": group, "version": kind_version, "kind": kind},
            "resource": {"group": info.group, "version": version, "resource": info.plural},
            "requestKind": {"group": group, "version": pending.kind[1], "kind": kind},
            "requestResource": {"group": info.group, "version": pending.version, "resource": info.plural},
            "name": pending.name,
            "operation": pending.operation,
            "userInfo": user.as_review(),
            "object": obj,
            "oldObject": pending.old,
            "dryRun": pending.dry_run,
            "options": pending.options,
        }
        if pending.subresource:
            req["subResource"] = pending.subresource
            req["requestSubResource"] = pending.subresource
        if pending.namespace:
            req["namespace"] = pending.namespace
        if obj is not None and version != pending.version and isinstance(obj.get("apiVersion"), str):
            obj["apiVersion"] = info.api_version(version)
        return req

    async def _call(
        self, hook: _Hook, pending: Pending, user: UserInfo, version: str, obj: Obj | None
    ) -> Obj | None:
        """The webhook's ``response``; None when a call error was ignored (failurePolicy Ignore)."""
        request = self._request(pending, user, version, deep_copy(obj))
        try:
            return await self._post(hook, request)
        except WebhookCallError as e:
            if hook.spec.get("failurePolicy", "Fail") == "Ignore":
                return None  # fail open, as the API server does (it only logs and counts it)
            raise _internal(f'failed calling webhook "{hook.name}": {e}') from e

    async def _post(self, hook: _Hook, request: Obj) -> Obj:
        cc = hook.spec.get("clientConfig") or {}
        timeout = int(hook.spec.get("timeoutSeconds", 10))
        if "v1" not in (hook.spec.get("admissionReviewVersions") or []):
            raise WebhookCallError("the webhook does not accept admission.k8s.io/v1 AdmissionReview")
        if cc.get("url"):
            url = str(cc["url"])
            server_name = urlparse(url).hostname or ""
            target = url
        else:
            svc = cc.get("service") or {}
            key = (str(svc.get("namespace")), str(svc.get("name")), int(svc.get("port", 443)))
            address = self.services.get(key)
            if address is None:
                raise WebhookCallError(
                    f"failed to call webhook: service {key[0]}/{key[1]}:{key[2]} is not mapped to a loopback "
                    "address in the API double (AdmissionChain.services)"
                )
            server_name = f"{key[1]}.{key[0]}.svc"
            target = f"https://{address}{svc.get('path') or ''}"
        sep = "&" if "?" in target else "?"
        target = f"{target}{sep}timeout={timeout}s"
        body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
        if self._session is None:
            self._session = aiohttp.ClientSession()
        ctx = self._ssl(str(cc.get("caBundle") or ""))
        try:
            async with self._session.post(
                target,
                json=body,
                ssl=ctx,
                server_hostname=server_name,
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as resp:
                data = await resp.read()
                if resp.status != 200:
                    raise WebhookCallError(
                        f"failed to call webhook: the server responded with the status code {resp.status} "
                        f"but did not return more information"
                    )
        except TimeoutError as e:
            raise WebhookCallError(
                f'failed to call webhook: Post "{target}": context deadline exceeded'
            ) from e
        except aiohttp.ClientError as e:
            raise WebhookCallError(f'failed to call webhook: Post "{target}": {e}') from e
        try:
            review = json.loads(data)
            response = review["response"]
        except (ValueError, KeyError, TypeError) as e:
            raise WebhookCallError(f"received invalid webhook response: {e}") from e
        if not isinstance(response, dict):
            raise WebhookCallError("received invalid webhook response: response is not an object")
        if response.get("uid") != request["uid"]:
            raise WebhookCallError(
                f'received invalid webhook response: expected response.uid="{request["uid"]}", '
                f'got "{response.get("uid")}"'
            )
        if not hook.mutating and response.get("patch"):
            raise WebhookCallError(
                "received invalid webhook response: validating webhooks may not return patches"
            )
        return response

    def _ssl(self, ca_bundle: str) -> ssl.SSLContext:
        ctx = self._contexts.get(ca_bundle)
        if ctx is None:
            if ca_bundle:
                try:
                    pem = base64.b64decode(ca_bundle, validate=True).decode()
                except (ValueError, binascii.Error) as e:
                    raise WebhookCallError(f"caBundle is not base64-encoded PEM: {e}") from e
                try:
                    ctx = ssl.create_default_context(cadata=pem)
                except ssl.SSLError as e:
                    raise WebhookCallError(f"caBundle does not hold a usable certificate: {e}") from e
            else:
                ctx = ssl.create_default_context()
            self._contexts[ca_bundle] = ctx
        return ctx

    # -- answers -----------------------------------------------------------------------------------
    @staticmethod
    def _deny_if_rejected(hook: _Hook, response: Obj) -> None:
        """errors/statuserror.go ToStatusErr: the client-visible denial."""
        if response.get("allowed"):
            return
        result: Obj = response["status"] if isinstance(response.get("status"), dict) else {}
        denied = f'admission webhook "{hook.name}" denied the request'
        message = result.get("message") or result.get("reason")
        text = f"{denied}: {message}" if message else f"{denied} without explanation"
        code = int(result.get("code") or 0)
        code = 403 if code == 0 else (400 if code < 400 else code)
        status = st.make_status(code, str(result.get("reason") or ""), text)
        if isinstance(result.get("details"), dict):
            status["details"] = result["details"]
        raise st.raise_status(status)

    @staticmethod
    def _warn(pending: Pending, response: Obj) -> None:
        total = sum(len(w) for w in pending.warnings)
        for raw in response.get("warnings") or []:
            text = str(raw)
            if total + len(text) > _MAX_WARNINGS_TOTAL:
                return  # past 4096 characters in total the rest is dropped
            pending.warnings.append(text)
            total += len(text)


def _resource_matches(pattern: str, plural: str, sub: str) -> bool:
    """rules.go: "*" = all resources (no subresources), "*/*" all, "pods/*", "*/status"."""
    if pattern == "*/*":
        return True
    res, _, psub = pattern.partition("/")
    if res not in ("*", plural):
        return False
    if not sub:
        return psub == ""
    return psub in ("*", sub)


def _selector(raw: Any) -> LabelSelector:
    try:
        return LabelSelector.from_dict(raw if isinstance(raw, Mapping) else None)
    except SelectorError as e:
        raise st.internal(f"invalid label selector in a webhook configuration: {e}") from e


def _internal(message: str) -> KubeError:
    status = st.make_status(500, "InternalError", f"Internal error occurred: {message}")
    status["details"] = {"causes": [{"message": message}]}
    return st.raise_status(status)
