"""What kube-apiserver does to a Pod (and a Node) beyond generic object handling.

Sources (kubernetes/kubernetes), each pinned by a differential probe in tests/contract/test_pods.py:

- k8s.io/apimachinery/pkg/api/resource/quantity.go: ``ParseQuantity`` and ``CanonicalizeBytes`` —
  quantities are stored and returned canonical (``32000m`` -> ``32``, ``1024Mi`` -> ``1Gi``, ``3000``
  -> ``3k``; ``1e3`` keeps its exponent form; a string already canonical for its format is kept).
- pkg/apis/core/v1/defaults.go and conversion.go: ``SetDefaults_Pod``/``_PodSpec``/``_Container``
  (requests default to limits, restartPolicy, dnsPolicy, schedulerName, terminationGracePeriodSeconds,
  securityContext, enableServiceLinks, imagePullPolicy by tag, termination message path/policy,
  ``resources: {}``), ``serviceAccount`` mirrors ``serviceAccountName``; ``SetDefaults_NodeStatus``
  (allocatable defaults to capacity).
- plugin/pkg/admission/serviceaccount (token volume, imagePullSecrets), .../defaulttolerationseconds,
  .../priority (preemptionPolicy).
- pkg/registry/core/pod/strategy.go (``PrepareForCreate`` resets status to Pending with a QoS class;
  ``CheckGracefulDelete``), pkg/apis/core/validation/validation.go (``validateContainers``,
  ``ValidateResourceRequirements``: extended resources are integers with requests == limits;
  ``ValidatePodUpdate``: only a few spec fields may change), pkg/apis/core/v1/helper/qos/qos.go.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from vgpu_guard.apidouble._gotext import json_kind
from vgpu_guard.apidouble._selectors import dns1123_label_errors
from vgpu_guard.apidouble._status import Cause, field_error
from vgpu_guard.engine.objects import Obj

__all__ = [
    "QuantityError",
    "Undecodable",
    "admit_pod_update",
    "canonical_quantity",
    "decode_defaults",
    "default_pod",
    "default_toleration_seconds",
    "graceful_seconds",
    "initial_status",
    "mount_service_account",
    "parse_quantity",
    "pod_field",
    "validate_pod",
    "validate_pod_update",
]


# -- quantities ---------------------------------------------------------------------------------
_FORMAT_WRONG = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
_SUFFIX_WRONG = "unable to parse quantity's suffix"
_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SUFFIX = {e: s for s, e in _DECIMAL_SI.items()}
_BINARY_SUFFIX = {e: s for s, e in _BINARY_SI.items()} | {0: ""}
_NANO = Fraction(1, 10**9)


class QuantityError(ValueError):
    """Raised when a resource quantity does not parse (the message is apimachinery's error text)."""


class Undecodable(Exception):
    """Raised when a request body does not decode into the type (a bad quantity): 400 for a body,
    422 ``patch: Invalid value`` for a patch (the store maps it)."""

    def __init__(self, kind: str, why: str):
        super().__init__(f'{kind} in version "v1" cannot be handled as a {kind}: {why}')
        self.why = why


def _split(text: str) -> tuple[bool, str, str, str]:
    """parseQuantityString: (positive, numerator, denominator, suffix); raises on a bad form."""
    positive, pos, end = True, 0, len(text)
    if text[:1] in ("+", "-"):
        positive = text[0] == "+"
        pos = 1
    while pos < end and text[pos] == "0":
        pos += 1
    if pos >= end:
        return positive, "0", "", ""
    start = pos
    while pos < end and text[pos].isdigit():
        pos += 1
    num = text[start:pos] or "0"
    denom = ""
    if pos < end and text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos].isdigit():
            pos += 1
        denom = text[start:pos]
    suffix_start = pos
    while pos < end and text[pos] in "eEinumkKMGTP":
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos].isdigit():
        pos += 1
    if pos < end:
        raise QuantityError(_FORMAT_WRONG)
    return positive, num, denom, text[suffix_start:]


def _interpret(suffix: str) -> tuple[int, int, str]:
    """suffixHandler.interpret: (base, exponent, format)."""
    if suffix in _DECIMAL_SI:
        return 10, _DECIMAL_SI[suffix], "DecimalSI"
    if suffix in _BINARY_SI:
        return 2, _BINARY_SI[suffix], "BinarySI"
    if len(suffix) > 1 and suffix[0] in "eE" and re.fullmatch(r"[+-]?[0-9]+", suffix[1:]):
        return 10, int(suffix[1:]), "DecimalExponent"
    raise QuantityError(_SUFFIX_WRONG)


def _parse(value: Any) -> tuple[Fraction, str, str | None, int]:
    """ParseQuantity: (value, format, the string kept as is when already canonical (else None),
    the decimal scale of that kept value); a string's answer is kept (pods repeat a few)."""
    return _parse_string(value) if value.__class__ is str else _parse_any(value)


def _parse_any(value: Any) -> tuple[Fraction, str, str | None, int]:
    if value is None:
        return Fraction(0), "DecimalSI", None, 0
    if isinstance(value, bool):
        raise QuantityError(_FORMAT_WRONG)
    text = (repr(value) if isinstance(value, float) else str(value)).strip()
    if not text:
        raise QuantityError(_FORMAT_WRONG)
    if text == "0":
        return Fraction(0), "DecimalSI", "0", 0
    positive, num, denom, suffix = _split(text)
    _base, exponent, fmt = _interpret(suffix)
    sign = 1 if positive else -1
    digits = int(num + denom)
    kept: str | None = None
    scale = 0
    if fmt == "BinarySI":
        amount = Fraction(int(num + denom), 10 ** len(denom)) * 2**exponent
        if not denom and len(num) + exponent * 3 // 10 <= 14 and exponent % 10 == 0 and digits & 7:
            kept = text
    else:
        scale = exponent - len(denom)
        amount = Fraction(digits) * Fraction(10) ** scale
        shifted = num + denom
        if (
            len(num) + len(denom) <= 18
            and scale >= -9
            and scale % 3 == 0
            and not shifted.endswith("000")
            and shifted[0] != "0"
        ):
            kept = text
    if kept is None and amount != 0 and amount % _NANO:
        amount = (amount // _NANO + 1) * _NANO  # rounded up (away from zero) to the nano
    if fmt == "BinarySI" and 0 < amount < 1:
        fmt = "DecimalSI"
    return sign * amount, fmt, kept, scale


_parse_string = functools.lru_cache(maxsize=4096)(_parse_any)


def parse_quantity(value: Any) -> Fraction:
    """Exact value of a Kubernetes quantity (``12Gi``, ``1500m``, ``1e3``), as resource.Quantity."""
    return _parse(value)[0]


def _canonical_decimal(amount: Fraction, fmt: str) -> str:
    mantissa, exponent = amount, 0
    while mantissa.denominator != 1:
        mantissa, exponent = mantissa * 10, exponent - 1
    m = int(mantissa)
    while m and m % 10 == 0:
        m, exponent = m // 10, exponent + 1
    shift = exponent % 3
    m, exponent = m * 10**shift, exponent - shift
    if fmt == "DecimalExponent":
        return f"{m}e{exponent}" if exponent else str(m)
    return f"{m}{_DECIMAL_SUFFIX.get(exponent, '')}"


def _canonical(amount: Fraction, fmt: str) -> str:
    """Quantity.CanonicalizeBytes."""
    if amount == 0:
        return "0"
    sign, amount = ("-" if amount < 0 else ""), abs(amount)
    if fmt == "BinarySI" and (amount < 1024 or amount.denominator != 1):
        fmt = "DecimalSI"
    if fmt != "BinarySI":
        return sign + _canonical_decimal(amount, fmt)
    m, times = int(amount), 0
    while m >= 1024 and m % 1024 == 0:
        m, times = m // 1024, times + 1
    return f"{sign}{m}{_BINARY_SUFFIX.get(times * 10, '')}"


def canonical_quantity(value: Any) -> str:
    """The quantity as the API server serialises it (Quantity.MarshalJSON)."""
    amount, fmt, kept, _scale = _parse(value)
    return kept if kept is not None else _canonical(amount, fmt)


def _resource_quantity(value: Any) -> str:
    """A ResourceList value: SetDefaults_ResourceList rounds it up (away from zero) to the milli,
    which keeps the client's string only when no rounding was needed."""
    amount, fmt, kept, scale = _parse(value)
    if kept is not None and scale >= -3:
        return kept
    milli = Fraction(1, 1000)
    if amount % milli:
        steps = abs(amount) // milli + 1
        amount = steps * milli if amount > 0 else -steps * milli
    return _canonical(amount, fmt)


def _canonical_list(resources: Any) -> None:
    if isinstance(resources, dict):
        for name, value in resources.items():
            resources[name] = _resource_quantity(value)


# -- decoding and defaults ----------------------------------------------------------------------
# Built-in kinds whose pod template the double decodes: (group, resource) -> path to the template.
_TEMPLATES: dict[tuple[str, str], tuple[str, ...]] = {
    **{
        ("apps", r): ("spec", "template")
        for r in ("deployments", "statefulsets", "replicasets", "daemonsets")
    },
    ("batch", "jobs"): ("spec", "template"),
    ("batch", "cronjobs"): ("spec", "jobTemplate", "spec", "template"),
}


def _decode_template(path: tuple[str, ...], obj: Obj) -> None:
    """A workload's pod template decodes into Go's types too: its resource quantities are stored
    canonical (``1`` written as a number comes back as the string ``"1"``, so kubectl apply of the
    same file again sends it back and says "configured", as on kube-apiserver)."""
    template: Any = obj
    for key in path:
        template = template.get(key) if isinstance(template, dict) else None
    spec = template.get("spec") if isinstance(template, dict) else None
    if not isinstance(spec, dict):
        return
    for _key, _i, c in _containers(spec):
        res = c.get("resources")
        if isinstance(res, dict):
            _canonical_list(res.get("limits"))
            _canonical_list(res.get("requests"))


def decode_defaults(key: tuple[str, str], obj: Obj) -> None:
    """What decoding a Pod or Node does: canonical quantities, then SetDefaults (raises Undecodable);
    a workload's pod template: canonical quantities; a PriorityClass: ``globalDefault: false`` is
    Go's omitempty zero value and is not stored (kubectl apply of it again says "configured")."""
    if key == ("scheduling.k8s.io", "priorityclasses"):
        if obj.get("globalDefault") is False:
            del obj["globalDefault"]
        return
    if key in _TEMPLATES:
        try:
            _decode_template(_TEMPLATES[key], obj)
        except QuantityError as e:
            raise Undecodable(key[1], str(e)) from e
        return
    kind = {("", "pods"): "Pod", ("", "nodes"): "Node"}.get(key)
    if kind is None:
        return
    try:
        if kind == "Pod":
            _check_decodable(obj)
            default_pod(obj)
        else:
            _default_node(obj)
    except QuantityError as e:
        raise Undecodable(kind, str(e)) from e


def _check_decodable(pod: Obj) -> None:
    """The Go types the pod's spec decodes into, where the double reads them: a field of the wrong
    JSON type is the decoder's 400, before any default or admission (a crash here was a 500)."""
    spec = pod.get("spec")
    _expect(spec, dict, "Pod.spec", "v1.PodSpec")
    for key in ("initContainers", "containers"):
        containers = (spec or {}).get(key)
        _expect(containers, list, f"PodSpec.spec.{key}", "[]v1.Container")
        for c in containers or []:
            _expect(c, dict, f"PodSpec.spec.{key}", "v1.Container")
            resources = (c or {}).get("resources")
            _expect(resources, dict, f"Container.spec.{key}.resources", "v1.ResourceRequirements")
            for part in ("limits", "requests"):
                value = (resources or {}).get(part)
                _expect(value, dict, f"ResourceRequirements.spec.{key}.resources.{part}", "v1.ResourceList")


def _expect(value: Any, kind: type, field: str, go_type: str) -> None:
    if value is not None and not isinstance(value, kind):
        why = f"json: cannot unmarshal {json_kind(value)} into Go struct field {field} of type {go_type}"
        raise Undecodable("Pod", why)


def _default_node(node: Obj) -> None:
    node.setdefault("spec", {})  # value structs without omitempty: always serialised
    status = node.get("status")
    if status is None:
        status = node["status"] = {}
    if not isinstance(status, dict):
        return
    for key in ("capacity", "allocatable"):
        _canonical_list(status.get(key))
    if status.get("allocatable") is None and isinstance(status.get("capacity"), dict):
        status["allocatable"] = dict(status["capacity"])
    status.setdefault("daemonEndpoints", {"kubeletEndpoint": {"Port": 0}})
    status.setdefault("nodeInfo", dict.fromkeys(_NODE_INFO, ""))


_NODE_INFO = (
    "machineID", "systemUUID", "bootID", "kernelVersion", "osImage", "containerRuntimeVersion",
    "kubeletVersion", "kubeProxyVersion", "operatingSystem", "architecture",
)  # fmt: skip


def _containers(
    spec: Obj, keys: tuple[str, ...] = ("initContainers", "containers")
) -> list[tuple[str, int, Obj]]:
    out: list[tuple[str, int, Obj]] = []
    for key in keys:
        for i, c in enumerate(spec.get(key) or []):
            if isinstance(c, dict):
                out.append((key, i, c))
    return out


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


_IMAGE_NAME = re.compile(
    r"(?:(?P<domain>[a-zA-Z0-9.-]+(?::[0-9]+)?)/)?"
    r"(?P<path>[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?"
    r"(?:@(?P<digest>[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}))?"
)


def _pull_policy(image: Any) -> str:
    """SetDefaults_Container: Always for ``:latest`` (or no tag and no digest), else IfNotPresent
    (also when the reference does not parse)."""
    m = _IMAGE_NAME.fullmatch(str(image or ""))
    if m is None:
        return "IfNotPresent"
    tag = m.group("tag") or ("latest" if not m.group("digest") else "")
    return "Always" if tag == "latest" else "IfNotPresent"


def default_pod(pod: Obj) -> None:
    """Apply SetDefaults_Pod in place (decode time: before admission, on create and update)."""
    spec = pod.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    # v1 conversion: the deprecated serviceAccount mirrors serviceAccountName (and fills it when empty).
    if not spec.get("serviceAccountName") and spec.get("serviceAccount"):
        spec["serviceAccountName"] = spec["serviceAccount"]
    if spec.get("serviceAccountName"):
        spec["serviceAccount"] = spec["serviceAccountName"]
    else:
        spec.pop("serviceAccount", None)
    _canonical_list(spec.get("overhead"))
    for _key, _i, c in _containers(spec):
        res = c.get("resources")
        if res is None:
            res = c["resources"] = {}
        if isinstance(res, dict):
            _canonical_list(res.get("limits"))
            _canonical_list(res.get("requests"))
            if isinstance(res.get("limits"), dict):
                requests = res.setdefault("requests", {})
                if isinstance(requests, dict):
                    for name, qty in res["limits"].items():
                        requests.setdefault(name, qty)
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        c.setdefault("imagePullPolicy", _pull_policy(c.get("image")))


# -- built-in admission -------------------------------------------------------------------------
_TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
_TOKEN_VOLUME = "kube-api-access-"


def mount_service_account(pod: Obj, account: Obj, random_suffix: Callable[[], str]) -> None:
    """The ServiceAccount admission plugin on create, after the account was found: imagePullSecrets
    from the account, and (unless the pod or the account opts out) the token volume mounted
    read-only in every container that has nothing at the token path — the projected
    ``kube-api-access-*`` volume of Kubernetes 1.22+ (1.20 mounted the token Secret instead)."""
    spec = pod["spec"]
    if not spec.get("imagePullSecrets") and account.get("imagePullSecrets"):
        spec["imagePullSecrets"] = [
            {"name": s.get("name", "")} for s in account["imagePullSecrets"] if isinstance(s, dict)
        ]
    automount = spec.get("automountServiceAccountToken")
    if automount is None:
        automount = account.get("automountServiceAccountToken")
    if automount is False:
        return
    volumes = _list(spec.get("volumes"))
    names = [str(v.get("name", "")) for v in volumes if isinstance(v, dict)]
    existing = next((n for n in names if n.startswith(_TOKEN_VOLUME)), None)
    name = existing or _TOKEN_VOLUME + random_suffix()
    needed = False
    for _key, _i, c in _containers(spec):
        mounts = _list(c.get("volumeMounts"))
        if any(isinstance(m, dict) and m.get("mountPath") == _TOKEN_PATH for m in mounts):
            continue
        c["volumeMounts"] = [*mounts, {"name": name, "readOnly": True, "mountPath": _TOKEN_PATH}]
        needed = True
    if needed and existing is None:
        spec["volumes"] = [*volumes, _token_volume(name)]


def _token_volume(name: str) -> Obj:
    return {
        "name": name,
        "projected": {
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": _NAMESPACE_REF}]}},
            ],
            "defaultMode": 420,
        },
    }


_NAMESPACE_REF = {"apiVersion": "v1", "fieldPath": "metadata.namespace"}
_NOT_READY = "node.kubernetes.io/not-ready"
_UNREACHABLE = "node.kubernetes.io/unreachable"


def default_toleration_seconds(pod: Obj) -> None:
    """The DefaultTolerationSeconds admission plugin (create and update of pods): tolerate the
    not-ready and unreachable NoExecute taints for 300 s unless the pod already tolerates them."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    tolerations = _list(spec.get("tolerations"))
    wanted = {_NOT_READY: True, _UNREACHABLE: True}
    for t in tolerations:
        if not isinstance(t, dict) or t.get("effect") not in (None, "", "NoExecute"):
            continue
        for key in wanted:
            if t.get("key") in (None, "", key):
                wanted[key] = False
    added = [
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        for key, missing in wanted.items()
        if missing
    ]
    if added:
        spec["tolerations"] = [*tolerations, *added]


def admit_pod_update(old: Obj, new: Obj) -> None:
    """Built-in admission on a pod update: Priority keeps the stored priority and preemptionPolicy
    when the update leaves them out; DefaultTolerationSeconds adds its tolerations again."""
    spec, old_spec = new.get("spec"), old.get("spec") or {}
    if isinstance(spec, dict):
        for key in ("priority", "preemptionPolicy"):
            if spec.get(key) is None and old_spec.get(key) is not None:
                spec[key] = old_spec[key]
    default_toleration_seconds(new)


# -- status -------------------------------------------------------------------------------------
def _qos(spec: Obj) -> str:
    requests: dict[str, Fraction] = {}
    limits: dict[str, Fraction] = {}
    guaranteed = True
    for _key, _i, c in _containers(spec):
        res = c.get("resources") or {}
        req = {k: parse_quantity(v) for k, v in (res.get("requests") or {}).items() if k in ("cpu", "memory")}
        lim = {k: parse_quantity(v) for k, v in (res.get("limits") or {}).items() if k in ("cpu", "memory")}
        requests.update(req)
        limits.update(lim)
        if set(lim) != {"cpu", "memory"} or any(req.get(k, lim[k]) != lim[k] for k in lim):
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def initial_status(pod: Obj) -> Obj:
    """PrepareForCreate: whatever the client sent, a new pod's status is Pending with its QoS class."""
    status: Obj = {"phase": "Pending"}
    spec = pod.get("spec")
    if isinstance(spec, dict):
        with contextlib.suppress(QuantityError):  # a bad quantity is reported by validate_pod as a 400
            status["qosClass"] = _qos(spec)
    return status


# -- validation ---------------------------------------------------------------------------------
_STANDARD_CONTAINER_RESOURCES = ("cpu", "memory", "ephemeral-storage")
_STANDARD_RESOURCES = (
    *_STANDARD_CONTAINER_RESOURCES,
    *(f"{scope}.{r}" for scope in ("requests", "limits") for r in _STANDARD_CONTAINER_RESOURCES),
    "pods", "resourcequotas", "services", "replicationcontrollers", "secrets", "persistentvolumeclaims",
    "configmaps", "services.nodeports", "services.loadbalancers", "requests.storage",
)  # fmt: skip


def _is_native(name: str) -> bool:
    """helper.IsNativeResource: no domain, or a kubernetes.io one."""
    return "/" not in name or "kubernetes.io/" in name


def _is_extended(name: str) -> bool:
    """helper.IsExtendedResourceName: namespaced outside kubernetes.io, not a quota ``requests.``."""
    return not _is_native(name) and not name.startswith("requests.")


def _overcommit_allowed(name: str) -> bool:
    return _is_native(name) and not name.startswith("hugepages-")


def _invalid(path: str, value: Any, why: str) -> Cause:
    return field_error("Invalid", path, f'"{value}": {why}')


def _resource_causes(base: str, res: Obj) -> list[Cause]:
    """ValidateResourceRequirements (limits first, then requests against the limits)."""
    causes: list[Cause] = []
    requests: Obj = res["requests"] if isinstance(res.get("requests"), dict) else {}
    limits: Obj = res["limits"] if isinstance(res.get("limits"), dict) else {}

    def value_causes(kind: str, name: str, raw: Any) -> Fraction:
        path = f"{base}.{kind}[{name}]"
        if "/" not in name and not name.startswith(("hugepages-", "requests.hugepages-")):
            # validateResourceName, then validateContainerResourceName
            if name not in _STANDARD_RESOURCES:
                causes.append(_invalid(path, name, "must be a standard resource type or fully qualified"))
            if name not in _STANDARD_CONTAINER_RESOURCES:
                causes.append(_invalid(path, name, "must be a standard resource for containers"))
        qty = parse_quantity(raw)
        if qty < 0:
            causes.append(_invalid(path, canonical_quantity(raw), "must be greater than or equal to 0"))
        if _is_extended(name) and qty.denominator != 1:
            causes.append(_invalid(path, canonical_quantity(raw), "must be an integer"))
        return qty

    for name, raw in limits.items():
        value_causes("limits", name, raw)
    for name, raw in requests.items():
        qty = value_causes("requests", name, raw)
        if name in limits:
            limit = parse_quantity(limits[name])
            shown = f"{canonical_quantity(raw)}"
            if qty != limit and not _overcommit_allowed(name):
                why = f"must be equal to {name} limit of {canonical_quantity(limits[name])}"
                causes.append(_invalid(f"{base}.requests", shown, why))
            elif qty > limit:
                why = f"must be less than or equal to {name} limit of {canonical_quantity(limits[name])}"
                causes.append(_invalid(f"{base}.requests", shown, why))
        elif not _overcommit_allowed(name):
            why = "Limit must be set for non overcommitable resources"
            causes.append(field_error("Required", f"{base}.limits", why))
    return causes


def validate_pod(pod: Obj) -> list[Cause]:
    """The subset of ValidatePodCreate our product can trip over, in the API server's order
    (raises QuantityError for a quantity that does not parse)."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return [field_error("Required", "spec")]
    causes: list[Cause] = []
    if not spec.get("containers"):
        causes.append(field_error("Required", "spec.containers"))
    names: set[str] = set()
    for key, i, c in [*_containers(spec, ("containers",)), *_containers(spec, ("initContainers",))]:
        base = f"spec.{key}[{i}]"
        name = c.get("name")
        if not name:
            causes.append(field_error("Required", f"{base}.name"))
        else:
            causes += [_invalid(f"{base}.name", name, why) for why in dns1123_label_errors(str(name))]
        if name in names:
            causes.append(field_error("Duplicate", f"{base}.name", f'"{name}"'))
        elif name:
            names.add(str(name))
        if not c.get("image"):
            causes.append(field_error("Required", f"{base}.image"))
        res = c.get("resources")
        if isinstance(res, dict):
            causes += _resource_causes(f"{base}.resources", res)
    return causes


# ValidatePodUpdate lets only these spec fields change (Kubernetes 1.33 wording; 1.20 allowed fewer).
_MUTABLE_SPEC = ("activeDeadlineSeconds", "tolerations", "schedulingGates")
_MUTABLE_TEXT = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
    "(allow it to be set to 1 if it was previously negative)"
)


def _masked_spec(spec: Obj, old: Obj) -> Obj:
    out = {k: v for k, v in spec.items() if k not in _MUTABLE_SPEC}
    for key in ("containers", "initContainers"):
        if isinstance(out.get(key), list):
            out[key] = [{k: v for k, v in c.items() if k != "image"} for c in out[key] if isinstance(c, dict)]
    grace, old_grace = spec.get("terminationGracePeriodSeconds"), old.get("terminationGracePeriodSeconds")
    if isinstance(old_grace, int) and old_grace < 0 and grace == 1:
        out["terminationGracePeriodSeconds"] = old_grace
    return out


def _toleration_key(t: Any) -> tuple[str, ...]:
    t = t if isinstance(t, dict) else {}
    return tuple(str(t.get(k) or "") for k in ("key", "operator", "value", "effect"))


def validate_pod_update(old: Obj, new: Obj) -> list[Cause]:
    """Reject spec changes a real server forbids (e.g. setting nodeName: use pods/binding)."""
    spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    for key in ("containers", "initContainers"):
        if len(spec.get(key) or []) != len(old_spec.get(key) or []):
            return [field_error("Forbidden", f"spec.{key}", "pod updates may not add or remove containers")]
    causes: list[Cause] = []
    deadline, old_deadline = spec.get("activeDeadlineSeconds"), old_spec.get("activeDeadlineSeconds")
    path = "spec.activeDeadlineSeconds"
    if deadline is not None:
        if not isinstance(deadline, int) or deadline <= 0:
            return [field_error("Invalid", path, f"{deadline}: must be greater than or equal to 0")]
        if isinstance(old_deadline, int) and old_deadline < deadline:
            return [field_error("Invalid", path, f"{deadline}: must be less than or equal to previous value")]
    elif old_deadline is not None:
        causes.append(
            field_error("Invalid", path, '"null": must not update from a positive integer to nil value')
        )
    new_tolerations = {_toleration_key(t) for t in spec.get("tolerations") or []}
    if any(_toleration_key(t) not in new_tolerations for t in old_spec.get("tolerations") or []):
        why = "existing toleration can not be modified except its tolerationSeconds"
        causes.append(field_error("Forbidden", "spec.tolerations", why))
    if _masked_spec(spec, old_spec) != _masked_spec(old_spec, old_spec):
        causes.append(field_error("Forbidden", "spec", _MUTABLE_TEXT))
    return causes


def graceful_seconds(pod: Obj, requested: int | None) -> int:
    """CheckGracefulDelete: unbound or terminal pods go at once; others get their grace period."""
    spec = pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase")
    if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
        return 0
    if requested is not None:
        return max(requested, 0)
    grace = spec.get("terminationGracePeriodSeconds")
    return int(grace) if isinstance(grace, int) and grace >= 0 else 30


def pod_field(pod: Obj, name: str) -> str:
    """Field-selector values (pkg/registry/core/pod/strategy.go ToSelectableFields)."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    meta = pod.get("metadata") or {}
    match name:
        case "metadata.name" | "metadata.namespace":
            return str(meta.get(name.split(".")[1], ""))
        case "spec.nodeName" | "spec.schedulerName" | "spec.serviceAccountName" | "spec.restartPolicy":
            return str(spec.get(name.split(".")[1], ""))
        case "spec.hostNetwork":
            return "true" if spec.get("hostNetwork") else "false"
        case "status.phase" | "status.nominatedNodeName" | "status.podIP":
            return str(status.get(name.split(".")[1], ""))
    return ""
