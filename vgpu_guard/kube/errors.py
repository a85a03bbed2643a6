"""Errors of the cluster API, as our code needs to tell them apart and operators need to read them.

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

Why the adapters attach a ``Request`` to every error: "HTTP 404" alone tells an operator nothing.
Once an error knows what it was about, ``str(e)`` is one line naming the verb, the resource
(group/version/plural), the object, the HTTP code and reason, the server's own message and, for the
common cases, what to check::

    get v1/pods default/web-0: HTTP 404 NotFound: pods "web-0" not found; Pod default/web-0 not found

``message`` stays the server's text (the API double answers with it), and ``verb``, ``resource``,
``name``, ``namespace`` and ``subresource`` are there for log lines that want them apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Self

from vgpu_guard.kube.resources import Resource

__all__ = [
    "AlreadyExists",
    "Conflict",
    "Expired",
    "Forbidden",
    "Invalid",
    "KubeError",
    "NotFound",
    "Request",
    "Unavailable",
    "Unsupported",
    "error_from_status",
]


@dataclass(frozen=True, slots=True)
class Request:
    """What a failed call was about: the API verb (get, list, watch, create, update, patch, delete)
    and its target; ``path`` names a non-resource URL such as ``/version``."""

    verb: str
    resource: Resource | None = None
    name: str = ""
    namespace: str = ""
    subresource: str = ""
    path: str = ""


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
        self.verb = ""
        self.resource: Resource | None = None
        self.name = ""
        self.namespace = ""
        self.subresource = ""
        self.path = ""

    def about(self, request: Request) -> Self:
        """Record what the failed call was about (the adapters do, before the error leaves them)."""
        self.verb = request.verb
        self.resource = request.resource
        self.name = request.name
        self.namespace = request.namespace
        self.subresource = request.subresource
        self.path = request.path
        return self

    @property
    def target(self) -> str:
        """``scheduling.volcano.sh/v1beta1/queues``, ``v1/pods/binding`` or the bare path."""
        if self.resource is None:
            return self.path
        sub = f"/{self.subresource}" if self.subresource else ""
        return f"{self.resource.api_version}/{self.resource.plural}{sub}"

    @property
    def object_ref(self) -> str:
        """``namespace/name``, ``name`` for a cluster-scoped object, "" for a collection."""
        if not self.name:
            return ""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @property
    def scope(self) -> str:
        """The object, or ``in namespace x`` for a call on one namespace's collection."""
        if self.object_ref or not self.namespace:
            return self.object_ref
        return f"in namespace {self.namespace}"

    def __str__(self) -> str:
        if not self.verb:
            return self.message
        head = " ".join(part for part in (self.verb, self.target, self.scope) if part)
        remedy = _remedy(self)
        return f"{head}: {_answer(self)}" + (f"; {remedy}" if remedy else "")


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


def error_from_status(code: int, status: dict[str, Any] | None, request: Request | None = None) -> KubeError:
    """Map an HTTP code and Status body to our error type (reason first, then the code)."""
    status = status if isinstance(status, dict) else {}
    reason = str(status.get("reason") or "")
    message = str(status.get("message") or f"HTTP {code}")
    cls = _BY_REASON.get(reason) or _BY_CODE.get(code)
    if cls is None:
        cls = Unavailable if code >= 500 or code in (0, 429) else KubeError
    if cls is NotFound and code not in (0, 404):
        cls = Unsupported if code in (405, 415) else KubeError
    error = cls(message, code=code, reason=reason, status=status)
    return error.about(request) if request is not None else error


# -- the one-line text -------------------------------------------------------------------------

_RBAC_USER = re.compile(r'User "([^"]*)" cannot ')
_STALE = "the object has been modified"
_RETRY = "(a retry may succeed)"


def _answer(e: KubeError) -> str:
    """``HTTP 404 NotFound: <the server's message>``; a transport failure's own description."""
    if not e.code:
        return e.message
    said = _said(e)
    return " ".join(p for p in ("HTTP", str(e.code), e.reason) if p) + (f": {said}" if said else "")


def _said(e: KubeError) -> str:
    """The server's own message ("" when it sent no Status and we only know the code)."""
    if e.status:
        return str(e.status.get("message") or "")
    return "" if e.message == f"HTTP {e.code}" else e.message


def _remedy(e: KubeError) -> str:
    """What the failure means for the object, and what to check, for the cases operators meet."""
    if e.code == 0 and e.reason == "TLS":
        return "check the kubeconfig's certificate-authority for this server (a retry does not help)"
    if e.code == 0:
        late = e.reason == "Timeout"
        what = "the API server is slow or unreachable" if late else "the connection to the API server failed"
        return f"{what} {_RETRY}"
    if e.code == 404:
        return _not_found(e)
    if e.code == 403:
        return _forbidden(e)
    if e.code == 401:
        return "the API server did not accept our credentials: check the kubeconfig's user or the token"
    if e.code == 409:
        return _conflict(e)
    if e.code == 429:
        return f"the API server is overloaded {_RETRY}"
    if e.code >= 500:
        return f"the API server is unavailable {_RETRY}"
    return ""


def _kind_ref(e: KubeError) -> str:
    kind = e.resource.kind if e.resource is not None else "object"
    return f"{kind} {e.object_ref}" if e.object_ref else kind


def _not_found(e: KubeError) -> str:
    details = e.status.get("details")
    details = details if isinstance(details, dict) else {}
    missing = str(details.get("name") or "")
    if details.get("kind") == "namespaces" and missing and missing != e.name:
        return f"namespace {missing} not found"
    if e.name and missing == e.name:
        return f"{_kind_ref(e)} not found"
    if e.resource is None:
        return "the API server does not serve this path"
    r = e.resource
    if not r.group or r.group.endswith(".k8s.io"):
        return f"the resource is not served: is {r.api_version} enabled on this API server?"
    return f"the resource is not served: is its CRD {r.plural}.{r.group} installed?"


def _forbidden(e: KubeError) -> str:
    user = _RBAC_USER.search(_said(e))
    if user is None or e.resource is None:
        return ""  # an admission webhook or a terminating namespace: the server's message says why
    r = e.resource
    what = f"{r.plural}.{r.group}" if r.group else r.plural
    what += f"/{e.subresource}" if e.subresource else ""
    where = f" in namespace {e.namespace}" if e.namespace else ""
    return f"forbidden: {user.group(1)} may not {e.verb} {what}{where} (check the chart's RBAC)"


def _conflict(e: KubeError) -> str:
    if isinstance(e, AlreadyExists):
        return f"{_kind_ref(e)} already exists"
    if _STALE in _said(e):
        return f"conflict on {_kind_ref(e)}: its resourceVersion changed; re-read it and decide again"
    return f"conflict on {_kind_ref(e)}"
