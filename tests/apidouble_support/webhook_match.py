"""Which webhooks a write meets, and the AdmissionReview request each is sent.

generic/webhook.go's matching: the rules (operations, groups, resources with subresources,
scope, versions with matchPolicy Equivalent), then the namespace and object selectors, then
matchConditions (CEL, through cel-python when installed). The request is built as
request/admissionreview.go fills it in, in the version the matching rule chose.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vgpu_guard.apidouble import _status as st
from vgpu_guard.apidouble._pending import Pending
from vgpu_guard.apidouble._selectors import LabelSelector, SelectorError
from vgpu_guard.apidouble._values import Obj, deep_copy
from vgpu_guard.apidouble.identity import UserInfo
from vgpu_guard.apidouble.store import Store
from vgpu_guard.kube.errors import KubeError
from vgpu_guard.kube.resources import MUTATING_WEBHOOKS, NAMESPACES, VALIDATING_WEBHOOKS

__all__ = [
    "Hook",
    "HookMatcher",
    "conditions_hold",
    "internal_error",
    "pod_grace",
    "review_options",
    "review_request",
]


@dataclass(frozen=True, slots=True)
class Hook:
    """One webhook of a stored configuration (``config`` names the configuration)."""

    config: str
    spec: Obj
    mutating: bool

    @property
    def name(self) -> str:
        return str(self.spec.get("name", ""))


class HookMatcher:
    """The webhooks stored in ``store`` and whether each applies to a write."""

    def __init__(self, store: Store):
        self._store = store

    def hooks(self, *, mutating: bool) -> list[Hook]:
        res = MUTATING_WEBHOOKS if mutating else VALIDATING_WEBHOOKS
        out = []
        for config in self._store.list(res).items:  # sorted by name, like the real dispatcher
            for spec in config.get("webhooks") or []:
                out.append(Hook(config["metadata"]["name"], spec, mutating))
        return out

    def matches(self, hook: Hook, pending: Pending, obj: Obj | None) -> str | None:
        """The version to send the object in when ``hook`` applies to the request, else None."""
        version = _rule_version(hook, pending)
        if version is None:
            return None
        if not _selector_matches(hook.spec.get("namespaceSelector"), self._namespace_labels(pending, obj)):
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
            ns = self._store.get(NAMESPACES, pending.namespace)
        except KubeError:
            return {}
        return dict(ns["metadata"].get("labels") or {})


def _rule_version(hook: Hook, pending: Pending) -> str | None:
    """The version of the first rule that matches the request (predicates/rules), else None."""
    info, plural, sub = pending.info, pending.admitted_resource, pending.subresource
    for rule in hook.spec.get("rules") or []:
        ops = rule.get("operations") or []
        if "*" not in ops and pending.operation not in ops:
            continue
        groups = rule.get("apiGroups") or []
        if "*" not in groups and info.group not in groups:
            continue
        if not any(_resource_matches(r, plural, sub) for r in rule.get("resources") or []):
            continue
        scope = rule.get("scope", "*")
        if (scope == "Cluster" and info.namespaced) or (scope == "Namespaced" and not info.namespaced):
            continue
        versions = rule.get("apiVersions") or []
        if "*" in versions or pending.version in versions:
            return pending.version
        if hook.spec.get("matchPolicy", "Equivalent") == "Equivalent":
            other: str | None = next((v for v in versions if v in info.versions), None)
            if other is not None:
                return other  # the same resource served in another version: converted
    return None


def conditions_hold(hook: Hook, pending: Pending, obj: Obj | None, user: UserInfo) -> bool:
    """matchConditions: every CEL expression true (an error follows the failurePolicy)."""
    conditions = hook.spec.get("matchConditions") or []
    if not conditions:
        return True
    try:
        from celpy.adapter import json_to_cel
        from celpy.celtypes import MapType
    except ImportError as e:  # not a runtime dependency: say so instead of skipping the check
        raise internal_error(
            f'webhook "{hook.name}" has matchConditions, which need cel-python (pip install cel-python)'
        ) from e
    cel_object, cel_old = json_to_cel(obj), json_to_cel(pending.old)
    request = review_request(pending, user, pending.version, obj)
    converted = {"object": cel_object, "oldObject": cel_old}
    cel_request = MapType({json_to_cel(k): converted.get(k) or json_to_cel(v) for k, v in request.items()})
    activation = {"object": cel_object, "oldObject": cel_old, "request": cel_request}
    for cond in conditions:
        try:
            result = _program(str(cond.get("expression", ""))).evaluate(activation)
        except Exception as e:  # CEL compile/eval errors follow failurePolicy upstream
            if hook.spec.get("failurePolicy") == "Ignore":
                return False
            raise internal_error(
                f'failed calling webhook "{hook.name}": matchCondition {cond.get("name")!r}: {e}'
            ) from e
        if not bool(result):
            return False
    return True


@functools.lru_cache(maxsize=256)
def _program(expression: str) -> Any:
    """Compiled once (kube-apiserver too; the chart's took 4-9 ms each); errors raise every time."""
    import celpy

    env = celpy.Environment(runner_class=_short_circuit_runner())
    return env.program(env.compile(expression))


@functools.cache
def _short_circuit_runner() -> Any:
    """celpy evaluates both sides of ``||`` and ``&&``; cel-go stops at a true ``||`` or false ``&&``
    left side, the result whatever the right is (an error too): no answer changes, half the time."""
    from celpy import InterpretedRunner
    from celpy.celtypes import BoolType
    from celpy.evaluation import CELEvalError, Evaluator

    class ShortCircuit(Evaluator):
        def sub_evaluator(self, ast: Any) -> Evaluator:
            return ShortCircuit(ast, activation=self.activation)

        def _logic(self, tree: Any, name: str, decides: bool) -> Any:
            left = self.visit(tree.children[0])
            if len(tree.children) == 1 or (isinstance(left, BoolType) and bool(left) is decides):
                return left
            right = self.visit(tree.children[1])
            try:  # as Evaluator.conditionalor/conditionaland combine both sides
                return self.activation.resolve_function(name)(left, right)
            except TypeError as e:
                why = f"found no matching overload for {name} applied to '({type(left)}, {type(right)})'"
                error = CELEvalError(why, e.__class__, e.args, tree=tree)
                error.__cause__ = e
                return error

        def conditionalor(self, tree: Any) -> Any:
            return self._logic(tree, "_||_", True)

        def conditionaland(self, tree: Any) -> Any:
            return self._logic(tree, "_&&_", False)

    class Runner(InterpretedRunner):
        def evaluate(self, context: Any) -> Any:
            return ShortCircuit(ast=self.ast, activation=self.new_activation()).evaluate(context)

    return Runner


def review_request(pending: Pending, user: UserInfo, version: str, obj: Obj | None) -> Obj:
    """AdmissionReview ``request`` for ``pending``, the object in ``version`` (converted in place)."""
    group, _, kind = pending.kind
    info = pending.info
    kind_version = "v1" if pending.binds else version
    plural = pending.admitted_resource  # "bindings" for the legacy door (no subresource)
    req: Obj = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": group, "version": kind_version, "kind": kind},
        "resource": {"group": info.group, "version": version, "resource": plural},
        "requestKind": {"group": group, "version": pending.kind[1], "kind": kind},
        "requestResource": {"group": info.group, "version": pending.version, "resource": plural},
        "operation": pending.operation,
        "userInfo": user.as_review(),
        "object": obj,
        "oldObject": pending.old,
        "dryRun": pending.dry_run,
        "options": review_options(pending),
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


def review_options(pending: Pending) -> Obj:
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
        options["gracePeriodSeconds"] = pod_grace(pending.old or {}, options.get("gracePeriodSeconds"))
    return options


def pod_grace(pod: Obj, requested: Any) -> int:
    """podStrategy.CheckGracefulDelete (a negative request counts as 1, rest.BeforeDelete)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if isinstance(requested, int):
        period = 1 if requested < 0 else requested
    else:
        period = int(spec.get("terminationGracePeriodSeconds") or 0)
    if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
        period = 0
    return period


def _selector_matches(raw: Any, labels: dict[str, str] | None) -> bool:
    if labels is None:
        return True
    selector = _selector(raw)
    return not selector or selector.matches(labels)


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


def internal_error(message: str) -> KubeError:
    """A 500 ``Internal error occurred: MESSAGE`` with the message as its one cause."""
    status = st.make_status(500, "InternalError", f"Internal error occurred: {message}")
    status["details"] = {"causes": [{"message": message}]}
    return st.raise_status(status)
