"""Defaulting and validation of (Mutating|Validating)WebhookConfiguration objects.

Sources: pkg/apis/admissionregistration/v1/defaults.go (failurePolicy Fail, matchPolicy
Equivalent, timeoutSeconds 10, empty selectors, rule scope "*", service port 443, reinvocation
Never) and pkg/apis/admissionregistration/validation/validation.go (v1: sideEffects must be None or
NoneOnDryRun, admissionReviewVersions required, exactly one of url/service, https URLs, timeout
1-30 s, names are qualified and unique).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlparse

from vgpu_guard.apidouble._status import Cause

__all__ = ["default_and_validate"]

Obj = dict[str, Any]


def _bad(causes: list[Cause], path: str, value: Any, why: str) -> None:
    causes.append(Cause("FieldValueInvalid", path, f"{path}: Invalid value: {json.dumps(value)}: {why}"))


def default_and_validate(config: Obj, *, mutating: bool) -> list[Cause]:
    """Apply the v1 defaults in place and return the validation errors."""
    causes: list[Cause] = []
    hooks = config.get("webhooks")
    if hooks is None:
        return causes
    if not isinstance(hooks, list):
        return [Cause("FieldValueInvalid", "webhooks", "webhooks: Invalid value: must be a list")]
    seen: set[str] = set()
    for i, hook in enumerate(hooks):
        at = f"webhooks[{i}]"
        if not isinstance(hook, dict):
            causes.append(Cause("FieldValueInvalid", at, f"{at}: Invalid value: must be an object"))
            continue
        name = str(hook.get("name") or "")
        if name.count(".") < 2:
            _bad(
                causes,
                f"{at}.name",
                name,
                "should be a domain with at least three segments separated by dots",
            )
        if name in seen:
            causes.append(Cause("FieldValueDuplicate", f"{at}.name", f'{at}.name: Duplicate value: "{name}"'))
        seen.add(name)
        hook.setdefault("failurePolicy", "Fail")
        hook.setdefault("matchPolicy", "Equivalent")
        hook.setdefault("timeoutSeconds", 10)
        hook.setdefault("namespaceSelector", {})
        hook.setdefault("objectSelector", {})
        if mutating:
            hook.setdefault("reinvocationPolicy", "Never")
        for j, rule in enumerate(hook.get("rules") or []):
            if isinstance(rule, dict):
                rule.setdefault("scope", "*")
                if rule["scope"] not in ("*", "Cluster", "Namespaced"):
                    _bad(
                        causes,
                        f"{at}.rules[{j}].scope",
                        rule["scope"],
                        'must be "*", "Cluster" or "Namespaced"',
                    )
        if hook.get("failurePolicy") not in ("Fail", "Ignore"):
            _bad(
                causes, f"{at}.failurePolicy", hook.get("failurePolicy"), 'supported values: "Fail", "Ignore"'
            )
        if hook.get("sideEffects") not in ("None", "NoneOnDryRun"):
            msg = (
                f'{at}.sideEffects: Unsupported value: "{hook.get("sideEffects")}": '
                'supported values: "None", "NoneOnDryRun"'
            )
            causes.append(Cause("FieldValueNotSupported", f"{at}.sideEffects", msg))
        versions = hook.get("admissionReviewVersions") or []
        if not versions:
            causes.append(
                Cause(
                    "FieldValueRequired",
                    f"{at}.admissionReviewVersions",
                    f"{at}.admissionReviewVersions: Required value: must specify one of v1, v1beta1",
                )
            )
        timeout = hook.get("timeoutSeconds")
        if not isinstance(timeout, int) or not 1 <= timeout <= 30:
            _bad(
                causes, f"{at}.timeoutSeconds", timeout, "the timeout value must be between 1 and 30 seconds"
            )
        cc = hook.get("clientConfig") or {}
        if bool(cc.get("url")) == bool(cc.get("service")):
            causes.append(
                Cause(
                    "FieldValueRequired",
                    f"{at}.clientConfig",
                    f"{at}.clientConfig: Required value: exactly one of url or service is required",
                )
            )
        elif cc.get("url"):
            url = urlparse(str(cc["url"]))
            if url.scheme != "https" or not url.hostname:
                _bad(causes, f"{at}.clientConfig.url", cc["url"], "'https' is the only allowed URL scheme")
        else:
            svc = cc["service"]
            if isinstance(svc, dict):
                svc.setdefault("port", 443)
                if not svc.get("name") or not svc.get("namespace"):
                    causes.append(
                        Cause(
                            "FieldValueRequired",
                            f"{at}.clientConfig.service",
                            f"{at}.clientConfig.service: Required value: name and namespace",
                        )
                    )
    return causes
