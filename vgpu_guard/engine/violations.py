"""Violations: what a rule found, rendered in the shape kubectl users already know.

One line per violation: ``[rule-id] <field path>: <value> <why>; <fix>`` (Gatekeeper's
``[name] message``, Kubernetes' field.ErrorList paths).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WARNINGS_TOTAL_LIMIT", "WARNING_LIMIT", "Violation", "clip", "clip_warning", "clip_warnings"]

# Kubernetes: keep each warning <= 120 characters; past 4096 in total the rest is dropped.
WARNING_LIMIT = 120
WARNINGS_TOTAL_LIMIT = 4096


@dataclass(frozen=True, slots=True)
class Violation:
    """A rule's finding on one field."""

    rule: str
    path: str
    message: str

    def render(self) -> str:
        return f"[{self.rule}] {self.path}: {self.message}"


# A remedy longer than this is cut with the rest: the rule, the path and the start of the finding
# must still say what the warning is about.
_REMEDY_LIMIT = 80
# When clipping keeps the remedy, the finding before it keeps at least this many characters after
# "[rule] path: ": the value found must survive too, or the remedy has nothing to refer to.
_FINDING_KEPT = 20


def clip_warning(text: str) -> str:
    """Fit a warning into Kubernetes' 120 characters (``clip``)."""
    return clip(text, WARNING_LIMIT)


def clip(text: str, width: int) -> str:
    """Fit a message into ``width`` characters, marking the cut. The remedy after the last "; " is
    kept whole and the explanation cut instead when the finding still keeps its start (rule, path,
    the value and a few words), so what to do survives the limit; else the end is cut. Cuts fall
    between words (``_cut``)."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    head, sep, remedy = text.rpartition("; ")
    room = width - len(remedy) - len("…; ")
    finding_starts = head.find(": ") + 2 if head.startswith("[") else 0
    if sep and head and len(remedy) <= _REMEDY_LIMIT and room >= finding_starts + _FINDING_KEPT:
        return _cut(head, room) + "…; " + remedy
    return _cut(text, width - 1) + "…"


def _cut(text: str, room: int) -> str:
    """At most ``room`` characters of ``text``, ending with a whole word: a word cut short reads as
    another word or a wrong value ("te…", "245…" of 24576). A first word longer than the room is
    cut where it must be; punctuation left dangling before the cut goes."""
    if len(text) <= room:
        return text
    space = text.rfind(" ", 0, room + 1)
    kept = text[:space] if space > 0 else text[:room]
    return kept.rstrip(" ,;:(<>=") or kept


def clip_warnings(warnings: list[str]) -> list[str]:
    """Clip each warning and keep the list within the API server's 4096-character budget."""
    out: list[str] = []
    total = 0
    for warning in warnings:
        clipped = clip_warning(warning)
        if total + len(clipped) > WARNINGS_TOTAL_LIMIT:
            break
        out.append(clipped)
        total += len(clipped)
    return out
