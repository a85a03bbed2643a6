"""Status objects exactly as kube-apiserver writes them, raised as our ``KubeError`` types.

The message texts follow k8s.io/apimachinery/pkg/api/errors/errors.go (``NewNotFound``,
``NewAlreadyExists``, ``NewConflict``, ``NewInvalid``, ``NewBadRequest``, ``NewResourceExpired``,
``NewMethodNotSupported``, ``NewForbidden``, ``NewInternalError``), because clients and our own
error mapping (``vgpu_guard.kube.errors.error_from_status``) key on reason and code, and users read
the message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vgpu_guard.kube.errors import KubeError, error_from_status

__all__ = [
    "Cause",
    "already_exists",
    "bad_request",
    "conflict",
    "expired",
    "field_error",
    "forbidden",
    "internal",
    "invalid",
    "make_status",
    "method_not_supported",
    "not_found",
    "not_served",
    "qualified",
    "raise_status",
    "success",
    "unsupported_media_type",
]


@dataclass(frozen=True, slots=True)
class Cause:
    """One field error of a 422 (``field.Error`` in the API server)."""

    reason: str  # FieldValueInvalid, FieldValueRequired, FieldValueNotSupported, FieldValueForbidden
    field: str
    message: str  # the full "path: Invalid value: ...: why" text, as the server renders it

    def as_dict(self) -> dict[str, str]:
        """A ``details.causes`` entry: its message is ``ErrorBody()``, without the ``path: `` prefix."""
        prefix = f"{self.field}: "
        body = self.message[len(prefix) :] if self.field and self.message.startswith(prefix) else self.message
        return {"reason": self.reason, "message": body, "field": self.field}


_FIELD_TYPES = {
    "Invalid": "Invalid value",
    "Required": "Required value",
    "Forbidden": "Forbidden",
    "NotSupported": "Unsupported value",
    "Duplicate": "Duplicate value",
}


def field_error(kind: str, path: str, detail: str = "") -> Cause:
    """A ``field.Error`` of type ``kind`` (``Invalid``, ``Required``, ...): reason ``FieldValue<kind>``,
    message ``path: <the type's words>[: detail]`` (``Invalid value: "x": why``)."""
    body = f"{_FIELD_TYPES[kind]}: {detail}" if detail else _FIELD_TYPES[kind]
    return Cause(f"FieldValue{kind}", path, f"{path}: {body}")


def qualified(group: str, plural: str) -> str:
    """``pods`` for the core group, ``queues.scheduling.volcano.sh`` otherwise (GroupResource.String)."""
    return f"{plural}.{group}" if group else plural


def make_status(
    code: int,
    reason: str,
    message: str,
    *,
    name: str | None = None,
    group: str | None = None,
    kind: str | None = None,
    causes: Sequence[Cause] = (),
    retry_after: int | None = None,
) -> dict[str, Any]:
    """Build a failure Status dict; ``details`` only when there is something to say."""
    status: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    details: dict[str, Any] = {}
    if name:  # StatusDetails.name is omitempty; name="" still makes an (empty) details object
        details["name"] = name
    if group:
        details["group"] = group
    if kind:
        details["kind"] = kind
    if causes:
        details["causes"] = [c.as_dict() for c in causes]
    if retry_after is not None:
        details["retryAfterSeconds"] = retry_after
    if details or name is not None:
        status["details"] = details
    if not reason:
        del status["reason"]
    return status


def success(code: int = 200) -> dict[str, Any]:
    """The Status Success body (what pods/binding answers with, code 201)."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}


def raise_status(status: dict[str, Any]) -> KubeError:
    """Turn a Status dict into the matching ``KubeError`` (returned, so callers write ``raise``)."""
    return error_from_status(int(status.get("code") or 500), status)


def not_found(group: str, plural: str, name: str) -> KubeError:
    msg = f'{qualified(group, plural)} "{name}" not found'
    return raise_status(make_status(404, "NotFound", msg, name=name, group=group, kind=plural))


def not_served() -> KubeError:
    """404 for a path the API server does not serve: NewGenericServerResponse with empty details
    (a client adds the path when it prints the error)."""
    return raise_status(
        make_status(404, "NotFound", "the server could not find the requested resource", name="")
    )


def already_exists(group: str, plural: str, name: str) -> KubeError:
    msg = f'{qualified(group, plural)} "{name}" already exists'
    return raise_status(make_status(409, "AlreadyExists", msg, name=name, group=group, kind=plural))


def conflict(group: str, plural: str, name: str, why: str) -> KubeError:
    msg = f'Operation cannot be fulfilled on {qualified(group, plural)} "{name}": {why}'
    return raise_status(make_status(409, "Conflict", msg, name=name, group=group, kind=plural))


STALE = "the object has been modified; please apply your changes to the latest version and try again"


def invalid(group: str, kind: str, name: str, causes: Sequence[Cause]) -> KubeError:
    """422 with ``Kind.group "name" is invalid: ...`` (one error bare, several in brackets)."""
    qkind = f"{kind}.{group}" if group else kind
    texts = list(dict.fromkeys(c.message for c in causes))  # ToAggregate drops repeated messages
    body = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    msg = f'{qkind} "{name}" is invalid: {body}'
    return raise_status(make_status(422, "Invalid", msg, name=name, group=group, kind=kind, causes=causes))


def bad_request(message: str) -> KubeError:
    return raise_status(make_status(400, "BadRequest", message))


def expired(message: str) -> KubeError:
    return raise_status(make_status(410, "Expired", message))


def forbidden(message: str, *, group: str = "", plural: str = "", name: str = "") -> KubeError:
    return raise_status(make_status(403, "Forbidden", message, name=name, group=group, kind=plural or None))


def method_not_supported(group: str, plural: str, verb: str) -> KubeError:
    msg = f"{verb} is not supported on resources of kind {qualified(group, plural)!r}"
    return raise_status(make_status(405, "MethodNotAllowed", msg, group=group, kind=plural))


def unsupported_media_type(message: str) -> KubeError:
    return raise_status(make_status(415, "UnsupportedMediaType", message))


def internal(message: str) -> KubeError:
    """500 with no reason, as ``ErrorToAPIStatus`` renders a plain Go error."""
    return raise_status(make_status(500, "", message))
