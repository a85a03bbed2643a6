"""One write in flight through the double's store: what admission sees between the steps.

A write is prepared (decode, defaults, built-in admission), completed after mutating webhooks
(defaults again, name generation, validation) and committed after validating webhooks; the
``Pending`` record carries it between those steps, and the preconditions a commit re-checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from vgpu_guard.apidouble import _status as st
from vgpu_guard.apidouble._types import TypeInfo
from vgpu_guard.apidouble._values import Obj
from vgpu_guard.kube.resources import Resource

__all__ = ["Operation", "Pending", "RetryWrite", "check_delete_preconditions", "uid_mismatch"]

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


class RetryWrite(Exception):
    """Raised by ``commit`` when an unconditional write raced another: prepare it again."""


@dataclass(slots=True)
class Pending:
    """One write between ``prepare`` and ``commit``: what admission sees and may change."""

    operation: Operation
    info: TypeInfo
    version: str
    namespace: str
    name: str
    subresource: str  # as admission names it ("binding" for pods/NAME/binding, "" for bindings)
    object: Obj | None  # the new object (for a bind: the Binding); None for DELETE
    old: Obj | None  # the stored object; None for CREATE
    options: Obj
    dry_run: bool
    retryable: bool  # no client precondition: a lost race is retried, not a 409
    precondition_rv: str | None = None
    precondition_uid: str | None = None
    grace_period_seconds: int | None = None
    warnings: list[str] = field(default_factory=list)
    completed: bool = False
    # POST .../bindings: the same bind as pods/NAME/binding (storage.go LegacyBindingREST calls
    # BindingREST.Create), registered as its own resource "bindings" (rest/storage_core.go), so
    # admission sees resource bindings, no subresource, and the name the Binding carries.
    legacy_binding: bool = False

    @property
    def binds(self) -> bool:
        """A Binding CREATE through either door: one bind, two sets of admission attributes."""
        return self.subresource == "binding" or self.legacy_binding

    @property
    def admitted_resource(self) -> str:
        """The resource admission attributes name (webhook rules match it): ``bindings`` for the
        legacy door, else the type's plural (with ``subresource`` beside it)."""
        return "bindings" if self.legacy_binding else self.info.plural

    @property
    def kind(self) -> tuple[str, str, str]:
        """(group, version, kind) of ``object`` as sent in AdmissionReview ``request.kind``."""
        if self.binds:
            return ("", "v1", "Binding")
        return (self.info.group, self.version, self.info.kind)

    @property
    def resource(self) -> Resource:
        return self.info.resource(self.version)


def check_delete_preconditions(info: TypeInfo, old: Obj, uid: str | None, rv: str | None) -> None:
    """DeleteOptions' preconditions against ``old`` (checked at prepare and again at commit)."""
    # rest.BeforeDelete names the kind where other conflicts name the resource.
    meta = old["metadata"]
    if uid and uid != meta.get("uid"):
        why = (
            f"the UID in the precondition ({uid}) does not match the UID in record ({meta.get('uid')}). "
            "The object might have been deleted and then recreated"
        )
        raise st.conflict(info.group, info.kind, meta["name"], why)
    if rv and rv != meta.get("resourceVersion"):
        why = (
            f"the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in "
            f"record ({meta.get('resourceVersion')}). The object might have been modified"
        )
        raise st.conflict(info.group, info.kind, meta["name"], why)


def uid_mismatch(uid: str, obj: Obj) -> str:
    return (
        f"Precondition failed: UID in precondition: {uid}, UID in object meta: {obj['metadata'].get('uid')}"
    )
