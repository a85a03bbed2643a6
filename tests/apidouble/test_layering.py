"""``simulate`` and the in-process double load none of the double's HTTPS side (issue 37 item 6).

The HTTP server (``vgpu_guard.apidouble.http``, JSON only since its kubectl/Helm fidelity went) is
a sixth of the double; only the sandbox and the tests need it. import-linter's ``double-core-below-http``
contract forbids the imports; these tests check what a fresh process really loads, which also
catches an eager ``vgpu_guard/apidouble/__init__.py`` (a package's ``__init__`` runs before any of
its submodules, and the contract cannot see that).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HTTP = "vgpu_guard.apidouble.http"

_REPORT = """
import json, sys
{body}
print(json.dumps(sorted(m for m in sys.modules if m.startswith("vgpu_guard.apidouble"))))
"""

_SIMULATE = """
import contextlib, io
from vgpu_guard.cli.main import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        main(["simulate"])
    except SystemExit as e:
        assert not e.code, e.code
assert "ledger" in out.getvalue().lower(), out.getvalue()[:400]
"""


def _loaded(body: str) -> list[str]:
    """The double's modules a fresh interpreter holds after running ``body``."""
    done = subprocess.run(
        [sys.executable, "-c", _REPORT.format(body=body)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout.splitlines()[-1])
    return loaded


def test_simulate_does_not_load_the_http_side() -> None:
    loaded = _loaded(_SIMULATE)
    assert "vgpu_guard.apidouble.store" in loaded  # it did run against the double
    assert [m for m in loaded if m.startswith(HTTP)] == []


@pytest.mark.parametrize("module", ["store", "client", "frontend", "admission", "identity"])
def test_the_in_process_double_does_not_load_the_http_side(module: str) -> None:
    loaded = _loaded(f"import vgpu_guard.apidouble.{module}")
    assert [m for m in loaded if m.startswith(HTTP)] == []


def test_the_package_names_still_reach_the_server_when_asked() -> None:
    """``from vgpu_guard.apidouble import serve_double`` (tests, the e2e harness) imports it then."""
    loaded = _loaded("from vgpu_guard.apidouble import serve_double, Store")
    assert f"{HTTP}.server" in loaded


def test_an_unknown_name_is_an_attribute_error() -> None:
    import vgpu_guard.apidouble as double

    with pytest.raises(AttributeError, match="no attribute 'serve'"):
        _ = double.serve  # type: ignore[attr-defined]
