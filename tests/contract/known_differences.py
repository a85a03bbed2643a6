"""Where the API double differs from the real API server on purpose: probe test name -> why.

Everything not listed here must agree (tests/contract/conftest.py: ``Contract.agree``). An entry
whose probe no longer differs fails, so this list stays true. Keep each reason one sentence that
says why the double does not (or should not) do what the real server does.
"""

from __future__ import annotations

KNOWN: dict[str, str] = {}
