"""What kube-apiserver does to a Pod beyond generic object handling.

Sources (kubernetes/kubernetes): pkg/apis/core/v1/defaults.go (``SetDefaults_Pod``: requests
default to limits, restartPolicy, dnsPolicy, schedulerName, terminationGracePeriodSeconds),
pkg/registry/core/pod/strategy.go (``PrepareForCreate`` resets status to Pending with a QoS class;
``CheckGracefulDelete``), pkg/apis/core/validation/validation.go (``ValidatePodSpec``,
``validateContainerResourceName``/extended resources: integers only, requests == limits;
``ValidatePodUpdate``: only a few spec fields may change), pkg/apis/core/v1/helper/qos/qos.go.
"""

from __future__ import annotations

import contextlib
import re
from fractions import Fraction
from typing import Any

from vgpu_guard.apidouble._status import Cause

__all__ = [
    "QuantityError",
    "default_pod",
    "graceful_seconds",
    "initial_status",
    "parse_quantity",
    "pod_field",
    "validate_pod",
    "validate_pod_update",
]

Obj = dict[str, Any]

_QTY = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
_SUFFIX = {
    "": Fraction(1), "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18),
    "Ki": Fraction(2**10), "Mi": Fraction(2**20), "Gi": Fraction(2**30), "Ti": Fraction(2**40),
    "Pi": Fraction(2**50), "Ei": Fraction(2**60),
}  # fmt: skip


class QuantityError(ValueError):
    """Raised when a resource quantity does not parse (the server answers 400)."""


def parse_quantity(value: Any) -> Fraction:
    """Exact value of a Kubernetes quantity (``12Gi``, ``1500m``, ``1e3``), as resource.Quantity."""
    if isinstance(value, bool):
        raise QuantityError(f"quantities must be strings or numbers, not {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    text = str(value).strip()
    m = _QTY.match(text)
    err = f"quantities must match the regular expression '{_QTY.pattern}'"
    if not m:
        raise QuantityError(f"unable to parse quantity's suffix: {text!r}: {err}")
    number, suffix = m.group(1), m.group(2)
    try:
        base = Fraction(number)
    except ValueError as e:
        raise QuantityError(f"unable to parse quantity {text!r}: {err}") from e
    if suffix in _SUFFIX:
        return base * _SUFFIX[suffix]
    exp = re.fullmatch(r"[eE]([-+]?[0-9]+)", suffix)
    if exp:
        return base * Fraction(10) ** int(exp.group(1))
    raise QuantityError(f"unable to parse quantity's suffix: {text!r}: {err}")


def _is_extended(name: str) -> bool:
    """helper.IsExtendedResourceName: namespaced outside kubernetes.io, not a quota ``requests.``."""
    if "/" not in name or name.startswith("requests."):
        return False
    domain = name.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def _containers(spec: Obj) -> list[tuple[str, int, Obj]]:
    out: list[tuple[str, int, Obj]] = []
    for key in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(key) or []):
            if isinstance(c, dict):
                out.append((key, i, c))
    return out


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
    for _key, _i, c in _containers(spec):
        res = c.get("resources")
        if isinstance(res, dict) and isinstance(res.get("limits"), dict):
            requests = res.setdefault("requests", {})
            if isinstance(requests, dict):
                for name, qty in res["limits"].items():
                    requests.setdefault(name, qty)
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        c.setdefault("imagePullPolicy", "IfNotPresent")


def initial_status(pod: Obj) -> Obj:
    """PrepareForCreate: whatever the client sent, a new pod's status is Pending with its QoS class."""
    status: Obj = {"phase": "Pending"}
    spec = pod.get("spec")
    if isinstance(spec, dict):
        with contextlib.suppress(QuantityError):  # a bad quantity is reported by validate_pod as a 400
            status["qosClass"] = _qos(spec)
    return status


def validate_pod(pod: Obj) -> list[Cause]:
    """The subset of ValidatePodCreate our product can trip over (raises QuantityError -> 400)."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return [Cause("FieldValueRequired", "spec", "spec: Required value")]
    causes: list[Cause] = []
    if not spec.get("containers"):
        causes.append(Cause("FieldValueRequired", "spec.containers", "spec.containers: Required value"))
    for key, i, c in _containers(spec):
        base = f"spec.{key}[{i}]"
        for fld in ("name", "image"):
            if not c.get(fld):
                causes.append(Cause("FieldValueRequired", f"{base}.{fld}", f"{base}.{fld}: Required value"))
        res = c.get("resources") or {}
        requests = res.get("requests") or {}
        limits = res.get("limits") or {}
        for kind, values in (("requests", requests), ("limits", limits)):
            for name, raw in values.items():
                qty = parse_quantity(raw)
                path = f"{base}.resources.{kind}[{name}]"
                if qty < 0:
                    msg = f'{path}: Invalid value: "{raw}": must be greater than or equal to 0'
                    causes.append(Cause("FieldValueInvalid", path, msg))
                if _is_extended(name) and qty.denominator != 1:
                    msg = f'{path}: Invalid value: "{raw}": must be an integer'
                    causes.append(Cause("FieldValueInvalid", path, msg))
        for name, raw in requests.items():
            if not _is_extended(name):
                continue
            path = f"{base}.resources.requests"
            if name not in limits:
                lim_path = f"{base}.resources.limits"
                msg = f"{lim_path}: Required value: Limit must be set for non overcommitable resources"
                causes.append(Cause("FieldValueRequired", lim_path, msg))
            elif parse_quantity(raw) != parse_quantity(limits[name]):
                msg = f'{path}: Invalid value: "{raw}": must be equal to {name} limit of {limits[name]}'
                causes.append(Cause("FieldValueInvalid", path, msg))
    return causes


# ValidatePodUpdate lets only these spec fields change (tolerations: additions only upstream).
_MUTABLE_SPEC = ("activeDeadlineSeconds", "tolerations", "schedulingGates", "terminationGracePeriodSeconds")


def _masked_spec(spec: Obj) -> Obj:
    out = {k: v for k, v in spec.items() if k not in _MUTABLE_SPEC}
    for key in ("containers", "initContainers"):
        if isinstance(out.get(key), list):
            out[key] = [{k: v for k, v in c.items() if k != "image"} for c in out[key] if isinstance(c, dict)]
    return out


def validate_pod_update(old: Obj, new: Obj) -> list[Cause]:
    """Reject spec changes a real server forbids (e.g. setting nodeName: use pods/binding)."""
    if _masked_spec(old.get("spec") or {}) == _masked_spec(new.get("spec") or {}):
        return []
    msg = (
        "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
        "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
        "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
        "(allow it to be set to 1 if it was previously negative)"
    )
    return [Cause("FieldValueForbidden", "spec", msg)]


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
