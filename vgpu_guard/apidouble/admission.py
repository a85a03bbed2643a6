"""The admission chain as kube-apiserver runs it: webhooks read from the stored configurations.

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
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import ssl
import unicodedata
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
from vgpu_guard.apidouble.store import Pending, Store, deep_copy, format_time
from vgpu_guard.kube.errors import KubeError
from vgpu_guard.kube.resources import MUTATING_WEBHOOKS, NAMESPACES, VALIDATING_WEBHOOKS

__all__ = ["AdmissionChain", "WebhookCallError", "attach_warnings", "warnings_of"]

Obj = dict[str, Any]
_MAX_WARNINGS_TOTAL = 4096
_MAX_WARNING_TRUNCATED = 256
_WARNINGS_KEY = "_admission_warnings"


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
    # Per write: (its warnings list, the distinct texts received) for the recorder's rules.
    _warned: dict[int, tuple[list[str], list[str]]] = field(default_factory=dict)

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
        try:
            await self._mutating_round(pending, user)
        except BaseException:
            self._forget_warnings(pending)
            raise

    async def validate(self, pending: Pending, user: UserInfo) -> None:
        try:
            await self._validating_round(pending, user)
            if self._deleted_in_two_steps(pending):
                # registry/generic/registry/store.go Delete: a pod deleted at once is first updated
                # (deletionTimestamp, grace 0) and then deleted, and each step runs the webhooks.
                first, options = pending.old, pending.options
                pending.options = _options(pending)  # the grace period stays settled
                pending.old = _marked_deleting(first, format_time(self.store.clock()))
                try:
                    await self._mutating_round(pending, user)
                    await self._validating_round(pending, user)
                finally:
                    pending.old, pending.options = first, options
        finally:
            self._forget_warnings(pending)

    @staticmethod
    def _deleted_in_two_steps(pending: Pending) -> bool:
        if pending.operation != "DELETE" or pending.dry_run or pending.info.key != ("", "pods"):
            return False
        meta = (pending.old or {}).get("metadata") or {}
        if meta.get("finalizers") or (
            meta.get("deletionTimestamp") and not meta.get("deletionGracePeriodSeconds")
        ):
            return False
        return _pod_grace(pending.old or {}, pending.grace_period_seconds) == 0

    async def _mutating_round(self, pending: Pending, user: UserInfo) -> None:
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
        self._warn(pending, response)  # a denying webhook's warnings reach the client too
        self._deny_if_rejected(hook, response)
        patch = response.get("patch")
        if patch:
            # mutating/dispatcher.go: a patch that does not decode or apply is an internal error
            # whatever the failurePolicy; an unsupported patchType is a call error.
            try:
                ops = json.loads(base64.b64decode(patch, validate=True))
            except (ValueError, binascii.Error) as e:
                raise _internal(f"{type(e).__name__}: {e}") from e
            if not ops:
                return True
            if pending.object is None:
                raise _internal(
                    f'admission webhook "{hook.name}" attempted to modify the object, which is not '
                    "supported for this operation"
                )
            if response.get("patchType") != "JSONPatch":
                self._call_failed(hook, f"unsupported patch type {json.dumps(response.get('patchType'))}")
                return True
            try:
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

    async def _validating_round(self, pending: Pending, user: UserInfo) -> None:
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
                self._warn(pending, result)
                self._deny_if_rejected(hook, result)

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
            "operation": pending.operation,
            "userInfo": user.as_review(),
            "object": obj,
            "oldObject": pending.old,
            "dryRun": pending.dry_run,
            "options": _options(pending),
        }
        if pending.name:  # empty for generateName: the name is made after admission
            req["name"] = pending.name
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
        sent = deep_copy(obj)
        if pending.operation == "CREATE" and isinstance(sent, dict):
            # before rest.BeforeCreate (mutating webhooks, a Binding) it is Go's zero time: null
            sent.setdefault("metadata", {}).setdefault("creationTimestamp", None)
        request = self._request(pending, user, version, sent)
        try:
            return await self._post(hook, request)
        except WebhookCallError as e:
            self._call_failed(hook, str(e))
            return None

    @staticmethod
    def _call_failed(hook: _Hook, reason: str) -> None:
        """A call error (ErrCallingWebhook): ignored under ``failurePolicy: Ignore``, else a 500."""
        if hook.spec.get("failurePolicy", "Fail") == "Ignore":
            return  # fail open, as the API server does (it only logs and counts it)
        raise _internal(f'failed calling webhook "{hook.name}": {reason}')

    async def _post(self, hook: _Hook, request: Obj) -> Obj:
        cc = hook.spec.get("clientConfig") or {}
        timeout = int(hook.spec.get("timeoutSeconds", 10))
        # request/admissionreview.go CreateAdmissionObjects: the first version the webhook lists
        review_version = next(
            (v for v in hook.spec.get("admissionReviewVersions") or [] if v in ("v1", "v1beta1")), None
        )
        if review_version is None:
            raise WebhookCallError("webhook does not accept known AdmissionReview versions (v1, v1beta1)")
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
        api_version = f"admission.k8s.io/{review_version}"
        body = {"apiVersion": api_version, "kind": "AdmissionReview", "request": request}
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
        except ValueError as e:
            raise WebhookCallError(f"received invalid webhook response: {e}") from e
        if not isinstance(review, dict):
            raise WebhookCallError("received invalid webhook response: not an AdmissionReview")
        try:
            return _verified(review, request["uid"], api_version, mutating=hook.mutating)
        except WebhookCallError as e:  # the wording of later releases (1.20 gives only the reason)
            raise WebhookCallError(f"received invalid webhook response: {e}") from e

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
        code = max(code, 400)  # "we don't return < 400 status codes along with a rejection"
        status = st.make_status(code, str(result.get("reason") or ""), text)
        if result.get("status") not in (None, "", "Success"):
            status["status"] = result["status"]
        if isinstance(result.get("details"), dict):
            status["details"] = result["details"]
        raise st.raise_status(status)

    def _warn(self, pending: Pending, response: Obj) -> None:
        """endpoints/filters/warning.go: each text once, empty or control characters dropped, and
        past 4096 characters in total every warning cut to 256 (then up to 4096 again)."""
        texts = [str(w) for w in response.get("warnings") or []]
        if not texts:
            return
        key = id(pending.warnings)
        known = self._warned.get(key)
        if known is None or known[0] is not pending.warnings:  # a new request (ids are reused)
            if len(self._warned) > 64:
                self._warned.clear()
            known = (pending.warnings, list(pending.warnings))
            self._warned[key] = known
        originals = known[1]
        for text in texts:
            if text and text not in originals and not any(unicodedata.category(c) == "Cc" for c in text):
                originals.append(text)
        pending.warnings[:] = _recorded(originals)

    def _forget_warnings(self, pending: Pending) -> None:
        self._warned.pop(id(pending.warnings), None)


def attach_warnings(error: BaseException, warnings: list[str]) -> None:
    """Keep the warnings a failed write collected: the API server sends them with the error too."""
    if warnings:
        error.__dict__[_WARNINGS_KEY] = list(warnings)


def warnings_of(error: BaseException) -> list[str]:
    """The warnings ``attach_warnings`` kept on ``error`` (for its ``Warning:`` headers)."""
    return list(getattr(error, "__dict__", {}).get(_WARNINGS_KEY, ()))


def _verified(review: Obj, uid: str, api_version: str, *, mutating: bool) -> Obj:
    """request/admissionreview.go VerifyAdmissionResponse: the response, or a call error."""
    response = review.get("response")
    if not isinstance(response, dict):
        raise WebhookCallError("webhook response was absent")
    response = dict(response)
    if api_version.endswith("/v1beta1"):  # neither uid nor kind checked; a patch is a JSONPatch
        if not mutating:
            response.pop("patch", None)
        elif response.get("patch"):
            response["patchType"] = "JSONPatch"
        return response
    if response.get("uid") != uid:
        raise WebhookCallError(f'expected response.uid="{uid}", got "{response.get("uid") or ""}"')
    got = (str(review.get("apiVersion") or ""), str(review.get("kind") or ""))
    if got != (api_version, "AdmissionReview"):
        group, _, version = got[0].rpartition("/")
        raise WebhookCallError(
            f"expected webhook response of {api_version}, Kind=AdmissionReview, "
            f"got {group}/{version}, Kind={got[1]}"
        )
    has_patch, has_type = bool(response.get("patch")), response.get("patchType") is not None
    if mutating:
        if has_patch and not has_type:
            raise WebhookCallError("webhook returned response.patch but not response.patchType")
        if has_type and not has_patch:
            raise WebhookCallError("webhook returned response.patchType but not response.patch")
        if has_type and not response["patchType"]:
            raise WebhookCallError('webhook returned invalid response.patchType of ""')
    elif has_patch:
        raise WebhookCallError("validating webhook may not return response.patch")
    elif has_type:
        raise WebhookCallError("validating webhook may not return response.patchType")
    return response


def _options(pending: Pending) -> Obj:
    """``request.options`` as the API server fills it in by the time webhooks run."""
    options: Obj = deep_copy(pending.options)
    if options.get("kind") == "PatchOptions":  # handlers/patch.go patchToUpdateOptions
        options = {k: v for k, v in options.items() if k in ("apiVersion", "dryRun", "fieldManager")}
        options["kind"] = "UpdateOptions"
    if pending.dry_run:
        options["dryRun"] = ["All"]
    old_meta = (pending.old or {}).get("metadata") or {}
    if (
        pending.operation == "DELETE"
        and pending.info.key == ("", "pods")
        and not old_meta.get("deletionTimestamp")
    ):
        # rest.BeforeDelete -> podStrategy.CheckGracefulDelete settles the grace period first
        options["gracePeriodSeconds"] = _pod_grace(pending.old or {}, options.get("gracePeriodSeconds"))
    return options


def _pod_grace(pod: Obj, requested: Any) -> int:
    """podStrategy.CheckGracefulDelete (a negative request counts as 1, rest.BeforeDelete)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if isinstance(requested, int):
        period = 1 if requested < 0 else requested
    else:
        period = int(spec.get("terminationGracePeriodSeconds") or 0)
    if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
        period = 0
    return period


def _marked_deleting(pod: Obj | None, now: str) -> Obj | None:
    if pod is None:
        return None
    marked: Obj = deep_copy(pod)
    meta = marked.setdefault("metadata", {})
    meta["deletionTimestamp"] = now
    meta["deletionGracePeriodSeconds"] = 0
    return marked


def _recorded(texts: list[str]) -> list[str]:
    """The Warning header texts the API server's recorder keeps of ``texts`` (distinct, valid)."""
    out: list[str] = []
    written, truncating = 0, False
    kept: list[str] = []
    for text in texts:
        if truncating and written >= _MAX_WARNINGS_TOTAL:
            break
        kept.append(text)
        shown = text[:_MAX_WARNING_TRUNCATED] if truncating else text
        if written + len(shown) <= _MAX_WARNINGS_TOTAL or truncating:
            written += len(shown)
            out.append(shown)
            continue
        truncating, written, out = True, 0, []
        for old in kept:
            cut = old[:_MAX_WARNING_TRUNCATED]
            written += len(cut)
            out.append(cut)
    return out


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
