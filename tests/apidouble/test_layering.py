"""What a ``simulate`` process loads of the double: its in-process side, nothing of the tests.

The double's HTTPS side and its webhook calls live under tests/apidouble_support/ (issue 45): the
product never imports them (import-linter's ``product-below-tests`` contract). These tests check what
a fresh process really loads, which also catches an eager ``vgpu_guard/apidouble/__init__.py`` (a
package's ``__init__`` runs before any of its submodules, and the contract cannot see that).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

TESTS = "tests"

_REPORT = """
import json, sys
{body}
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("vgpu_guard.apidouble", "tests")))))
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


def test_simulate_loads_nothing_of_the_tests() -> None:
    loaded = _loaded(_SIMULATE)
    assert "vgpu_guard.apidouble.store" in loaded  # it did run against the double
    assert [m for m in loaded if m.split(".")[0] == TESTS] == []


@pytest.mark.parametrize("module", ["store", "client", "frontend", "identity"])
def test_a_module_of_the_double_loads_only_its_own_imports(module: str) -> None:
    loaded = _loaded(f"import vgpu_guard.apidouble.{module}")
    assert [m for m in loaded if m.split(".")[0] == TESTS] == []
    assert "vgpu_guard.apidouble.client" not in loaded or module == "client"  # the package loads no name


def test_an_unknown_name_is_an_attribute_error() -> None:
    import vgpu_guard.apidouble as double

    with pytest.raises(AttributeError, match="no attribute 'serve'"):
        _ = double.serve  # type: ignore[attr-defined]
