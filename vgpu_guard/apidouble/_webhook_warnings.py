"""Webhook warnings as the API server's recorder keeps them (endpoints/filters/warning.go).

Each text once, empty ones and ones with control characters dropped, and past 4096 characters in
total every warning cut to 256. The rules apply per request over everything its webhooks said, so
the recorder remembers each in-flight write's distinct texts until the write is done.
"""

from __future__ import annotations

import unicodedata

from vgpu_guard.apidouble._pending import Pending
from vgpu_guard.apidouble._values import Obj

__all__ = ["WarningRecorder", "attach_warnings", "recorded", "warnings_of"]

_MAX_WARNINGS_TOTAL = 4096
_MAX_WARNING_TRUNCATED = 256
_WARNINGS_KEY = "_admission_warnings"


class WarningRecorder:
    """The distinct warning texts each in-flight write received, written to its ``warnings``."""

    def __init__(self) -> None:
        # Per write: (its warnings list, the distinct texts received) for the recorder's rules.
        self._warned: dict[int, tuple[list[str], list[str]]] = {}

    def warn(self, pending: Pending, response: Obj) -> None:
        """Add a webhook response's warnings to ``pending.warnings`` under the recorder's rules."""
        texts = [str(w) for w in response.get("warnings") or []]
        if not texts:
            return
        key = id(pending.warnings)
        known = self._warned.get(key)
        if known is None or known[0] is not pending.warnings:  # a new request (ids are reused)
            if len(self._warned) > 64:
                self._warned.clear()
            known = (pending.warnings, list(pending.warnings))
            self._warned[key] = known
        originals = known[1]
        for text in texts:
            if text and text not in originals and not any(unicodedata.category(c) == "Cc" for c in text):
                originals.append(text)
        pending.warnings[:] = recorded(originals)

    def forget(self, pending: Pending) -> None:
        self._warned.pop(id(pending.warnings), None)


def attach_warnings(error: BaseException, warnings: list[str]) -> None:
    """Keep the warnings a failed write collected: the API server sends them with the error too."""
    if warnings:
        error.__dict__[_WARNINGS_KEY] = list(warnings)


def warnings_of(error: BaseException) -> list[str]:
    """The warnings ``attach_warnings`` kept on ``error`` (for its ``Warning:`` headers)."""
    return list(getattr(error, "__dict__", {}).get(_WARNINGS_KEY, ()))


def recorded(texts: list[str]) -> list[str]:
    """The Warning header texts the API server's recorder keeps of ``texts`` (distinct, valid)."""
    out: list[str] = []
    written, truncating = 0, False
    kept: list[str] = []
    for text in texts:
        if truncating and written >= _MAX_WARNINGS_TOTAL:
            break
        kept.append(text)
        shown = text[:_MAX_WARNING_TRUNCATED] if truncating else text
        if written + len(shown) <= _MAX_WARNINGS_TOTAL or truncating:
            written += len(shown)
            out.append(shown)
            continue
        truncating, written, out = True, 0, []
        for old in kept:
            cut = old[:_MAX_WARNING_TRUNCATED]
            written += len(cut)
            out.append(cut)
    return out
