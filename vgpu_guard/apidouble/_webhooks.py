"""Defaulting and validation of (Mutating|Validating)WebhookConfiguration objects.

Sources: pkg/apis/admissionregistration/v1/defaults.go (failurePolicy Fail, matchPolicy
Equivalent, timeoutSeconds 10, empty selectors, rule scope "*", service port 443, reinvocation
Never), pkg/apis/admissionregistration/validation/validation.go (v1: sideEffects required and None or
NoneOnDryRun, admissionReviewVersions required with v1 or v1beta1, exactly one of url/service,
timeout 1-30 s, names fully qualified and unique, rules) and
staging/src/k8s.io/apiserver/pkg/util/webhook/validation.go (URL and service checks). The texts are
field.Error's: ``PATH: Required value``, ``PATH: Invalid value: VALUE: why``, ``PATH: Unsupported
value: "X": supported values: "A", "B"`` (values sorted), ``PATH: Duplicate value: "X"``; checked
against kube-apiserver 1.20 by tests/contract/test_admission.py.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

from vgpu_guard.apidouble._gotext import go_quote, go_string_slice
from vgpu_guard.apidouble._selectors import dns1123_subdomain_errors
from vgpu_guard.apidouble._status import Cause, field_error
from vgpu_guard.engine.objects import Obj

__all__ = ["default_and_validate"]


_DNS1035_LABEL = "[a-z]([-a-z0-9]*[a-z0-9])?"
_URL_FORM = "; desired format: https://host[/path]"
_REVIEW_VERSIONS = ("v1", "v1beta1")


def _value(value: Any) -> str:
    """How field.Error renders a bad value: strings quoted, numbers and bools bare, lists Go-style."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return go_string_slice(value)
    return json.dumps(value)


def _invalid(causes: list[Cause], path: str, value: Any, why: str) -> None:
    causes.append(field_error("Invalid", path, f"{_value(value)}: {why}"))


def _required(causes: list[Cause], path: str, why: str = "") -> None:
    causes.append(field_error("Required", path, why))


def _not_supported(causes: list[Cause], path: str, value: Any, supported: list[str]) -> None:
    allowed = ", ".join(go_quote(v) for v in sorted(supported))
    causes.append(field_error("NotSupported", path, f"{_value(value)}: supported values: {allowed}"))


def _validate_name(causes: list[Cause], path: str, name: Any) -> None:
    """utilvalidation.IsFullyQualifiedName."""
    if not name:
        _required(causes, path)
        return
    name = str(name)
    errors = dns1123_subdomain_errors(name)
    if errors:
        _invalid(causes, path, name, ",".join(errors))
    elif len(name.split(".")) < 3:
        _invalid(causes, path, name, "should be a domain with at least three segments separated by dots")


def _validate_resources(causes: list[Cause], path: str, resources: list[Any]) -> None:
    """validateResources: subresources allowed, wildcards not mixed."""
    if not resources:
        _required(causes, path)
    with_wild_sub: set[str] = set()
    sub_with_wild_res: set[str] = set()
    double = single = plain = False
    for i, raw in enumerate(resources):
        entry = str(raw or "")
        if not entry:
            _required(causes, f"{path}[{i}]")
            continue
        double = double or entry == "*/*"
        single = single or entry == "*"
        if "/" not in entry:
            plain = entry != "*"
            continue
        res, sub = entry.split("/", 1)
        if res in with_wild_sub:
            _invalid(causes, f"{path}[{i}]", entry, f"if '{res}/*' is present, must not specify {entry}")
        if sub in sub_with_wild_res:
            _invalid(causes, f"{path}[{i}]", entry, f"if '*/{sub}' is present, must not specify {entry}")
        if sub == "*":
            with_wild_sub.add(res)
        if res == "*":
            sub_with_wild_res.add(sub)
    if len(resources) > 1 and double:
        _invalid(causes, path, resources, "if '*/*' is present, must not specify other resources")
    if single and plain:
        _invalid(
            causes,
            path,
            resources,
            "if '*' is present, must not specify other resources without subresources",
        )


def _validate_rule(causes: list[Cause], path: str, rule: Obj) -> None:
    """validateRuleWithOperations + validateRule."""
    ops = rule.get("operations") or []
    if not ops:
        _required(causes, f"{path}.operations")
    if len(ops) > 1 and "*" in ops:
        _invalid(causes, f"{path}.operations", ops, "if '*' is present, must not specify other operations")
    for i, op in enumerate(ops):
        if op not in ("*", "CREATE", "UPDATE", "DELETE", "CONNECT"):
            _not_supported(
                causes, f"{path}.operations[{i}]", op, ["*", "CONNECT", "CREATE", "DELETE", "UPDATE"]
            )
    groups = rule.get("apiGroups") or []
    if not groups:
        _required(causes, f"{path}.apiGroups")
    if len(groups) > 1 and "*" in groups:
        _invalid(causes, f"{path}.apiGroups", groups, "if '*' is present, must not specify other API groups")
    versions = rule.get("apiVersions") or []
    if not versions:
        _required(causes, f"{path}.apiVersions")
    if len(versions) > 1 and "*" in versions:
        _invalid(
            causes, f"{path}.apiVersions", versions, "if '*' is present, must not specify other API versions"
        )
    for i, version in enumerate(versions):
        if not version:
            _required(causes, f"{path}.apiVersions[{i}]")
    _validate_resources(causes, f"{path}.resources", list(rule.get("resources") or []))
    if rule.get("scope") not in ("*", "Cluster", "Namespaced"):
        _not_supported(causes, f"{path}.scope", rule.get("scope"), ["*", "Cluster", "Namespaced"])


def _validate_url(causes: list[Cause], path: str, raw: str) -> None:
    """webhook.ValidateWebhookURL with forceHttps."""
    try:
        url = urlsplit(raw)
        host = url.netloc.rpartition("@")[2]
    except ValueError as e:
        _required(causes, path, f"url must be a valid URL: {e}{_URL_FORM}")
        return
    if url.scheme != "https":
        _invalid(causes, path, url.scheme, f"'https' is the only allowed URL scheme{_URL_FORM}")
    if not host:
        _invalid(causes, path, host, f"host must be provided{_URL_FORM}")
    if "@" in url.netloc:
        _invalid(causes, path, url.netloc.rpartition("@")[0], "user information is not permitted in the URL")
    if url.fragment:
        _invalid(causes, path, url.fragment, "fragments are not permitted in the URL")
    if url.query:
        _invalid(causes, path, url.query, "query parameters are not permitted in the URL")


def _validate_service(causes: list[Cause], path: str, svc: Obj) -> None:
    """webhook.ValidateWebhookService, called (validation.go) with name and namespace swapped."""
    if not svc.get("namespace"):
        _required(causes, f"{path}.name", "service name is required")
    if not svc.get("name"):
        _required(causes, f"{path}.namespace", "service namespace is required")
    port = svc.get("port")
    if not isinstance(port, int) or not 1 <= port <= 65535:
        _invalid(causes, f"{path}.port", port, "port is not valid: must be between 1 and 65535, inclusive")
    url_path = svc.get("path")
    if url_path is None or url_path in ("", "/"):
        return
    url_path = str(url_path)
    if url_path == "//":
        _invalid(causes, f"{path}.path", url_path, "segment[0] may not be empty")
        return
    if not url_path.startswith("/"):
        _invalid(causes, f"{path}.path", url_path, "must start with a '/'")
    steps = url_path[1:].removesuffix("/").split("/")
    for i, step in enumerate(steps):
        if not step:
            _invalid(causes, f"{path}.path", url_path, f"segment[{i}] may not be empty")
            continue
        for failure in dns1123_subdomain_errors(step):
            _invalid(causes, f"{path}.path", url_path, f"segment[{i}]: {failure}")


def _validate_review_versions(causes: list[Cause], path: str, versions: list[Any]) -> None:
    if not versions:
        _required(causes, path, "must specify one of " + ", ".join(_REVIEW_VERSIONS))
        return
    seen: set[str] = set()
    for i, version in enumerate(versions):
        if version in seen:
            _invalid(causes, f"{path}[{i}]", version, "duplicate version")
            continue
        seen.add(version)
        if len(str(version)) > 63 or not re.fullmatch(_DNS1035_LABEL, str(version)):
            why = (
                "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with "
                "an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
                f"'abc-123', regex used for validation is '{_DNS1035_LABEL}')"
            )
            _invalid(causes, f"{path}[{i}]", version, why)
    if not any(v in _REVIEW_VERSIONS for v in versions):
        _invalid(causes, path, versions, "must include at least one of " + ", ".join(_REVIEW_VERSIONS))


def _default(hook: Obj, *, mutating: bool) -> None:
    hook.setdefault("failurePolicy", "Fail")
    hook.setdefault("matchPolicy", "Equivalent")
    hook.setdefault("timeoutSeconds", 10)
    hook.setdefault("namespaceSelector", {})
    hook.setdefault("objectSelector", {})
    if mutating:
        hook.setdefault("reinvocationPolicy", "Never")
    for rule in hook.get("rules") or []:
        if isinstance(rule, dict):
            rule.setdefault("scope", "*")
    cc = hook.get("clientConfig")
    if isinstance(cc, dict) and isinstance(cc.get("service"), dict):
        cc["service"].setdefault("port", 443)


def default_and_validate(config: Obj, *, mutating: bool) -> list[Cause]:
    """Apply the v1 defaults in place and return the validation errors (in the API server's order)."""
    causes: list[Cause] = []
    hooks = config.get("webhooks")
    if hooks is None:
        return causes
    if not isinstance(hooks, list):
        return [field_error("Invalid", "webhooks", "must be a list")]
    seen: set[str] = set()
    for i, hook in enumerate(hooks):
        at = f"webhooks[{i}]"
        if not isinstance(hook, dict):
            causes.append(field_error("Invalid", at, "must be an object"))
            continue
        _default(hook, mutating=mutating)
        _validate_name(causes, f"{at}.name", hook.get("name"))
        for j, rule in enumerate(hook.get("rules") or []):
            if isinstance(rule, dict):
                _validate_rule(causes, f"{at}.rules[{j}]", rule)
        if hook["failurePolicy"] not in ("Fail", "Ignore"):
            _not_supported(causes, f"{at}.failurePolicy", hook["failurePolicy"], ["Fail", "Ignore"])
        if hook["matchPolicy"] not in ("Exact", "Equivalent"):
            _not_supported(causes, f"{at}.matchPolicy", hook["matchPolicy"], ["Exact", "Equivalent"])
        if hook.get("sideEffects") is None:
            _required(causes, f"{at}.sideEffects", "must specify one of None, NoneOnDryRun")
        elif hook["sideEffects"] not in ("None", "NoneOnDryRun"):
            _not_supported(causes, f"{at}.sideEffects", hook["sideEffects"], ["None", "NoneOnDryRun"])
        timeout = hook["timeoutSeconds"]
        if not isinstance(timeout, int) or not 1 <= timeout <= 30:
            _invalid(
                causes, f"{at}.timeoutSeconds", timeout, "the timeout value must be between 1 and 30 seconds"
            )
        if mutating and hook["reinvocationPolicy"] not in ("Never", "IfNeeded"):
            _not_supported(
                causes, f"{at}.reinvocationPolicy", hook["reinvocationPolicy"], ["IfNeeded", "Never"]
            )
        cc = hook.get("clientConfig") or {}
        if not isinstance(cc, dict) or (cc.get("url") is None) == (cc.get("service") is None):
            _required(causes, f"{at}.clientConfig", "exactly one of url or service is required")
        elif cc.get("url") is not None:
            _validate_url(causes, f"{at}.clientConfig.url", str(cc["url"]))
        elif isinstance(cc.get("service"), dict):
            _validate_service(causes, f"{at}.clientConfig.service", cc["service"])
        _validate_review_versions(
            causes, f"{at}.admissionReviewVersions", list(hook.get("admissionReviewVersions") or [])
        )
        name = str(hook.get("name") or "")
        if name:
            if name in seen:
                causes.append(field_error("Duplicate", f"{at}.name", go_quote(name)))
            seen.add(name)
    return causes
