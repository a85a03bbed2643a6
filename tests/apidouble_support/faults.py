"""``FaultPlan``: the API misbehaving on purpose, for "faults of the API" tests.

Test code: plugged into the double's in-process client through its ``Faults`` hook
(``MemoryClusterClient(store, faults=plan)``); ``simulate`` injects none. A rule
names the verb and resource it hits, how many times, and what happens:

    plan = FaultPlan()
    plan.add(verb="replace", resource=LEDGERS, error=conflict_error(), times=2)   # two 409s
    plan.add(verb="bind", when="after", error=unavailable_error())               # applied, answer lost
    plan.add(verb="watch", drop_after=3)                                          # stream ends early
    client = MemoryClusterClient(store, faults=plan)

``when="before"`` fails the call without touching the store; ``when="after"`` applies it and then
fails (the response was lost: the caller must cope with a write that did happen). ``delay`` slows
a call down (``asyncio.sleep``, so a test's fake clock or ``wait_for`` timeout applies). The client
attaches the call's ``Request`` to an injected error as to any other, so log lines read the same.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Literal

from vgpu_guard.kube.errors import Conflict, Expired, KubeError, Unavailable
from vgpu_guard.kube.resources import Resource

__all__ = [
    "FaultPlan",
    "FaultRule",
    "Verb",
    "conflict_error",
    "expired_error",
    "timeout_error",
    "unavailable_error",
]

Verb = Literal["get", "list", "watch", "create", "replace", "replace_status", "patch", "delete", "bind"]


def conflict_error(name: str = "object") -> Conflict:
    """A 409 as the API server sends for a stale resourceVersion."""
    msg = (
        f'Operation cannot be fulfilled on "{name}": the object has been modified; please apply your '
        "changes to the latest version and try again"
    )
    return Conflict(msg, code=409, reason="Conflict")


def unavailable_error(
    message: str = "injected fault: the server is currently unable to handle the request",
) -> Unavailable:
    """A 503 ServiceUnavailable."""
    return Unavailable(message, code=503, reason="ServiceUnavailable")


def timeout_error() -> Unavailable:
    """What the production adapter raises when a request times out on the client side."""
    return Unavailable("injected fault: request timed out", code=0, reason="Timeout")


def expired_error(resource_version: str = "1") -> Expired:
    """The 410 a watch gets when its resourceVersion left the server's window."""
    return Expired(f"too old resource version: {resource_version} (injected)", code=410, reason="Expired")


@dataclass(slots=True)
class FaultRule:
    """One rule of a ``FaultPlan`` (a ``Fault`` to the client); see the module docstring."""

    verb: Verb | None = None
    resource: Resource | None = None
    error: KubeError | None = None
    when: Literal["before", "after"] = "before"
    delay: float = 0.0
    times: int | None = 1  # None: every matching call
    skip: int = 0  # let this many matching calls through first
    drop_after: int | None = None  # watch only: end the stream after this many events
    hits: int = 0

    def matches(self, verb: str, resource: Resource | None) -> bool:
        if self.verb is not None and self.verb != verb:
            return False
        if self.resource is not None and resource is not None:
            return (self.resource.group, self.resource.plural) == (resource.group, resource.plural)
        return self.resource is None

    def after(self) -> None:
        """The call went through: its answer is lost now when the rule says so."""
        if self.error is not None and self.when == "after":
            raise self.error


@dataclass(slots=True)
class FaultPlan:
    """Ordered fault rules; the first live matching rule applies to a call (the client's ``Faults``)."""

    rules: list[FaultRule] = field(default_factory=list)
    log: list[tuple[str, str]] = field(default_factory=list)  # (verb, plural) of calls that hit a rule

    def add(
        self,
        *,
        verb: Verb | None = None,
        resource: Resource | None = None,
        error: KubeError | None = None,
        when: Literal["before", "after"] = "before",
        delay: float = 0.0,
        times: int | None = 1,
        skip: int = 0,
        drop_after: int | None = None,
    ) -> FaultRule:
        if error is None and not delay and drop_after is None:
            raise ValueError("a fault rule needs an error, a delay or drop_after")
        if drop_after is not None and verb not in (None, "watch"):
            raise ValueError("drop_after only applies to watch")
        rule = FaultRule(verb, resource, error, when, delay, times, skip, drop_after)
        self.rules.append(rule)
        return rule

    def take(self, verb: str, resource: Resource | None) -> FaultRule | None:
        for rule in self.rules:
            if not rule.matches(verb, resource):
                continue
            if rule.skip > 0:
                rule.skip -= 1
                continue
            if rule.times is not None and rule.hits >= rule.times:
                continue
            rule.hits += 1
            self.log.append((verb, resource.plural if resource else ""))
            return rule
        return None

    async def before(self, verb: str, resource: Resource | None) -> FaultRule | None:
        """The client's hook: the call's rule, after its delay; raises a ``before`` error."""
        rule = self.take(verb, resource)
        if rule is None:
            return None
        if rule.delay:
            await asyncio.sleep(rule.delay)
        if rule.error is not None and rule.when == "before":
            raise rule.error
        return rule

    def clear(self) -> None:
        self.rules.clear()
