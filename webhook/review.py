"""AdmissionReview v1 on the wire: pydantic models for the request, a builder for the response.

Why strict models here: this is the boundary where bytes from the API server (or anyone who can
reach the port) become a decision. A malformed review is answered with HTTP 400 naming the field,
never with a guess; unknown extra fields are accepted (the API server adds fields over time).
"""

from __future__ import annotations

import base64
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from vgpu_guard.engine.decision import AdmissionDecision, AdmissionRequest

__all__ = ["ReviewError", "decode_review", "encode_response"]

API_VERSION = "admission.k8s.io/v1"


class ReviewError(ValueError):
    """Raised when a request body is not a usable AdmissionReview; the message names the field."""


class _Wire(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class UserInfo(_Wire):
    username: str = ""
    uid: str = ""
    groups: list[str] = Field(default_factory=list)


class GroupVersionKind(_Wire):
    group: str = ""
    version: str
    kind: str


class GroupVersionResource(_Wire):
    group: str = ""
    version: str
    resource: str


class ReviewRequest(_Wire):
    uid: str = Field(min_length=1, max_length=256)
    kind: GroupVersionKind
    resource: GroupVersionResource
    sub_resource: str = Field(default="", alias="subResource")
    name: str = ""
    namespace: str = ""
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    user_info: UserInfo = Field(default_factory=UserInfo, alias="userInfo")
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = Field(default=None, alias="oldObject")
    dry_run: bool = Field(default=False, alias="dryRun")


class AdmissionReview(_Wire):
    api_version: Literal["admission.k8s.io/v1"] = Field(alias="apiVersion")
    kind: Literal["AdmissionReview"]
    request: ReviewRequest


def decode_review(body: bytes) -> ReviewRequest:
    """Parse and check a request body; ``ReviewError`` says exactly what is wrong."""
    try:
        data = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ReviewError(f"body is not UTF-8 JSON: {e.reason} at byte {e.start}") from e
    except RecursionError as e:
        raise ReviewError("body nests too deeply to be an AdmissionReview") from e
    except ValueError as e:
        raise ReviewError(f"body is not JSON: {e}") from e
    if not isinstance(data, dict):
        raise ReviewError(f"body is a JSON {type(data).__name__}, expected an AdmissionReview object")
    try:
        review = AdmissionReview.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        path = ".".join(str(p) for p in first["loc"]) or "(top level)"
        more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
        raise ReviewError(f"{path}: {first['msg']}{more}") from e
    except RecursionError as e:
        raise ReviewError("body nests too deeply to be an AdmissionReview") from e
    request = review.request
    if request.operation in ("CREATE", "UPDATE") and request.object is None:
        raise ReviewError(f"request.object: required for {request.operation}")
    return request


def _in_namespace(obj: dict[str, Any] | None, namespace: str) -> dict[str, Any] | None:
    """``obj`` with ``metadata.namespace`` filled from the request when the client left it out.

    kube-apiserver sends a CREATE's object as the client wrote it, so ``kubectl apply -n team``
    of a manifest without a namespace arrives with none; the namespace is in ``request.namespace``.
    Every rule reads the object's metadata, so it is filled here, once, at the boundary.
    """
    metadata = obj.get("metadata") if obj is not None else None
    if namespace and isinstance(metadata, dict) and not metadata.get("namespace"):
        metadata["namespace"] = namespace
    return obj


def to_engine(request: ReviewRequest) -> AdmissionRequest:
    """The engine's view of a decoded request."""
    return AdmissionRequest(
        kind=request.kind.kind,
        group=request.resource.group,
        resource=request.resource.resource,
        operation=request.operation,
        object=_in_namespace(request.object, request.namespace),
        old_object=_in_namespace(request.old_object, request.namespace),
        namespace=request.namespace,
        name=request.name,
        username=request.user_info.username,
        groups=tuple(request.user_info.groups),
        uid=request.uid,
        sub_resource=request.sub_resource,
        dry_run=request.dry_run,
    )


_REASONS = {400: "BadRequest", 403: "Forbidden", 422: "Invalid", 503: "ServiceUnavailable"}


def encode_response(uid: str, decision: AdmissionDecision) -> dict[str, Any]:
    """The AdmissionReview response the API server expects (patch base64-encoded JSONPatch)."""
    response: dict[str, Any] = {"uid": uid, "allowed": decision.allowed}
    if not decision.allowed:
        response["status"] = {
            "status": "Failure",
            "code": decision.code,
            "reason": _REASONS.get(decision.code, "Forbidden"),
            "message": decision.message,
        }
    if decision.warnings:
        response["warnings"] = list(decision.warnings)
    if decision.allowed and decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(list(decision.patch)).encode()).decode()
    if decision.rules:
        # The API server records these in its audit log as "<webhook name>/rules".
        response["auditAnnotations"] = {"rules": ",".join(decision.rules)}
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}
