"""Bad option values are usage errors (exit 2, argparse's own line), never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from vgpu_guard.cli.app import run

ROOT = Path(__file__).resolve().parents[2]
DENIALS = str(ROOT / "examples" / "denials" / "pods.yaml")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["review", "-f", DENIALS, "--max-bytes", "-5"],
            "argument --max-bytes: expected a positive integer, got '-5'",
        ),
        (
            ["review", "-f", DENIALS, "--max-bytes", "0"],
            "argument --max-bytes: expected a positive integer, got '0'",
        ),
        (
            ["simulate", "-f", DENIALS, "--max-documents", "x"],
            "argument --max-documents: expected a positive integer, got 'x'",
        ),
        (["status", "--timeout", "-1"], "argument --timeout: expected a number of seconds above 0, got '-1'"),
        (
            ["status", "--timeout", "nan"],
            "argument --timeout: expected a number of seconds above 0, got 'nan'",
        ),
        (
            ["certs", "generate", "--service", "Bad_Name!", "--namespace", "n"],
            "argument --service: 'Bad_Name!' is not a valid Service name",
        ),
        (
            ["certs", "generate", "--service", "9guard", "--namespace", "n"],
            "argument --service: '9guard' is not a valid Service name",
        ),
        (
            ["certs", "generate", "--service", "guard", "--namespace", "Team-A"],
            "argument --namespace: 'Team-A' is not a valid name",
        ),
    ],
)
def test_a_bad_option_value_is_a_usage_error(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    if argv[0] == "certs":
        argv = [*argv, "--out", str(tmp_path)]
    with pytest.raises(SystemExit) as exit_:
        run(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert expected in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())  # no certificate written


def test_good_values_pass(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert run(["review", "-f", DENIALS, "--max-bytes", "100000", "--max-documents", "10"]) == 1
    assert (
        run(
            [
                "certs",
                "generate",
                "--service",
                "vgpu-guard",
                "--namespace",
                "kube-system",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    assert list(tmp_path.iterdir())  # the CA and the serving pair
