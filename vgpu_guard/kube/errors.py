"""Errors of the cluster API, as our code needs to tell them apart.

    KubeError                     any failed API call (carries the Status code, reason, message)
    ├── NotFound          404     the object does not exist
    ├── Conflict          409     stale resourceVersion, or a pod already bound: re-read, re-decide
    │   └── AlreadyExists 409     CREATE of a name that exists
    ├── Expired           410     a watch/list resourceVersion is too old: relist
    ├── Forbidden         403     RBAC or an admission webhook said no
    ├── Invalid           422     schema / field validation failed
    ├── Unavailable  5xx/timeout  the server or the network failed; retry with backoff
    └── Unsupported  404/405/415  the server does not serve this verb, resource or patch type

Callers never see a client library's exception types: the adapters translate them with
``raise ... from e`` so the original stays in the traceback.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AlreadyExists",
    "Conflict",
    "Expired",
    "Forbidden",
    "Invalid",
    "KubeError",
    "NotFound",
    "Unavailable",
    "Unsupported",
    "error_from_status",
]


class KubeError(Exception):
    """Raised when an API call fails; ``status`` is the API server's Status object when it sent one."""

    def __init__(
        self, message: str, *, code: int = 0, reason: str = "", status: dict[str, Any] | None = None
    ):
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason
        self.status = status or {}


class NotFound(KubeError):
    """Raised when the object (or its namespace) does not exist."""


class Conflict(KubeError):
    """Raised when a write lost an optimistic-concurrency race or a precondition failed."""


class AlreadyExists(Conflict):
    """Raised when creating an object whose name is taken."""


class Expired(KubeError):
    """Raised when a watch or list asks for a resourceVersion the server no longer has."""


class Forbidden(KubeError):
    """Raised when RBAC or an admission webhook refused the request."""


class Invalid(KubeError):
    """Raised when the object failed validation (422)."""


class Unavailable(KubeError):
    """Raised on 5xx, 429, timeouts and broken connections: worth retrying with backoff."""


class Unsupported(KubeError):
    """Raised when the server does not serve the verb, resource or content type asked for."""


_BY_REASON: dict[str, type[KubeError]] = {
    "NotFound": NotFound,
    "Conflict": Conflict,
    "AlreadyExists": AlreadyExists,
    "Expired": Expired,
    "Gone": Expired,
    "Forbidden": Forbidden,
    "Invalid": Invalid,
    "MethodNotAllowed": Unsupported,
    "UnsupportedMediaType": Unsupported,
}

_BY_CODE: dict[int, type[KubeError]] = {
    403: Forbidden,
    404: NotFound,
    405: Unsupported,
    409: Conflict,
    410: Expired,
    415: Unsupported,
    422: Invalid,
}


def error_from_status(code: int, status: dict[str, Any] | None) -> KubeError:
    """Map an HTTP code and Status body to our error type (reason first, then the code)."""
    status = status if isinstance(status, dict) else {}
    reason = str(status.get("reason") or "")
    message = str(status.get("message") or f"HTTP {code}")
    cls = _BY_REASON.get(reason) or _BY_CODE.get(code)
    if cls is None:
        cls = Unavailable if code >= 500 or code in (0, 429) else KubeError
    if cls is NotFound and code not in (0, 404):
        cls = Unsupported if code in (405, 415) else KubeError
    return cls(message, code=code, reason=reason, status=status)
