"""Structured logging: one JSON object per line, fixed keys, for people and for log pipelines.

Audit records go to the ``vgpu_guard.audit`` logger with the record under ``extra={"audit": ...}``;
they are emitted at INFO whatever the configured level, so a quiet deployment still keeps its
decision trail.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

__all__ = ["AUDIT_LOGGER", "JsonFormatter", "audit", "setup_logging"]

AUDIT_LOGGER = "vgpu_guard.audit"


class JsonFormatter(logging.Formatter):
    """Render a record as one JSON line: time, level, logger, message, and any structured fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in ("audit", "fields"):
            value = getattr(record, key, None)
            if isinstance(value, dict):
                entry.update(value)
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def setup_logging(level: str = "info") -> None:
    """Send every vgpu-guard logger to stderr as JSON lines (idempotent)."""
    root = logging.getLogger("vgpu_guard")
    root.setLevel(level.upper())
    if not any(isinstance(h.formatter, JsonFormatter) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter())
        root.addHandler(handler)
    root.propagate = False
    logging.getLogger(AUDIT_LOGGER).setLevel(logging.INFO)


def audit(event: str, **fields: Any) -> None:
    """Emit one audit line (``event`` names what was decided: admission, allocation, release, ...)."""
    logging.getLogger(AUDIT_LOGGER).info(event, extra={"audit": {"event": event, **fields}})
