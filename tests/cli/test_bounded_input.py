"""The CLI's one document reader refuses oversized, alias-bomb and too-deep input: one line, exit 2,
and (measured on the real process) well under 500 MB of memory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vgpu_guard.cli.app import run
from vgpu_guard.cli.documents import MAX_ALIASES, MAX_DEPTH, MAX_EXPANDED

BILLION_LAUGHS = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: lol}
data:
  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
  b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
  c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
  d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
  e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
  f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
  g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
  h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
  i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


def one_error_line(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert run(list(argv)) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "Traceback" not in captured.err
    return captured.err


@pytest.mark.parametrize("command", ["review", "simulate"])
def test_dev_zero_is_refused_at_the_size_cap(capsys: pytest.CaptureFixture[str], command: str) -> None:
    err = one_error_line(capsys, command, "-f", "/dev/zero", "--max-bytes", "1048576")
    assert err == (
        "error: /dev/zero: larger than 1048576 bytes; split it, or raise --max-bytes if it is trusted\n"
    )


def test_default_size_cap_is_16_mib(capsys: pytest.CaptureFixture[str]) -> None:
    err = one_error_line(capsys, "review", "-f", "/dev/zero")
    assert "larger than 16777216 bytes" in err


@pytest.mark.parametrize("opener", ["[", "- "])
def test_100k_deep_yaml_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path, opener: str) -> None:
    deep = tmp_path / "deep.yaml"
    if opener == "[":
        deep.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    else:
        deep.write_text("a:\n" + "".join(" " * i + "- \n" for i in range(1, 2000)))
    err = one_error_line(capsys, "review", "-f", str(deep))
    assert err.startswith(f"error: {deep}: line ")
    assert err.endswith(f": nested deeper than {MAX_DEPTH} levels; a Kubernetes object is far shallower\n")


@pytest.mark.parametrize("command", ["review", "simulate"])
def test_billion_laughs_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str) -> None:
    bomb = tmp_path / "lol.yaml"
    bomb.write_text(BILLION_LAUGHS)
    err = one_error_line(capsys, command, "-f", str(bomb))
    assert err == (
        f"error: {bomb}: document 1: its aliases expand to more than {MAX_EXPANDED} values; write the values out "
        "(aliases can expand a small file into gigabytes)\n"
    )


def test_a_few_aliases_are_fine(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    ok = tmp_path / "ok.yaml"
    ok.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: &d {a: b}\nbinaryData: *d\n")
    assert run(["review", "-f", str(ok)]) == 0


def test_document_count_is_capped(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    many = tmp_path / "many.yaml"
    many.write_text("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n" * 6)
    err = one_error_line(capsys, "review", "-f", str(many), "--max-documents", "5")
    assert err == (
        f"error: {many}: more than 5 YAML documents; split it, or raise --max-documents if it is trusted\n"
    )
    assert run(["review", "-f", str(many), "--max-documents", "6"]) == 0


def test_yaml_errors_are_one_line_naming_the_file_not_unicode_string(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1,\n")
    err = one_error_line(capsys, "review", "-f", str(bad))
    assert "<unicode string>" not in err
    assert (
        err
        == f"error: {bad}: not valid YAML: line 2, column 1: expected the node content, but found '<stream end>'\n"
    )


def test_many_aliases_are_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    many = tmp_path / "aliases.yaml"
    many.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata:\n  a: &a v\n"
        + "".join(f"  k{i}: *a\n" for i in range(MAX_ALIASES + 1))
    )
    err = one_error_line(capsys, "review", "-f", str(many))
    assert err == (
        f"error: {many}: line {MAX_ALIASES + 6}: more than {MAX_ALIASES} YAML aliases (*name); write the values out "
        "(aliases can expand a small file into gigabytes)\n"
    )


# Runs its arguments as a child and prints the child's peak RSS (KiB on Linux): RUSAGE_CHILDREN
# counts only the CLI, not pytest or this wrapper. The child's address space is capped at 4 GiB so
# a regression (the old reader grew to 22 GB on /dev/zero) fails the test instead of the machine.
PEAK_RSS = """\
import resource, subprocess, sys
def cap():
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
child = subprocess.run(sys.argv[1:], preexec_fn=cap, timeout=60)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(child.returncode)
"""
MEMORY_BOUND = 500 * 1000 * 1000  # bytes: issue 22's bound, under the chart's 512Mi limit


def hostile(tmp_path: Path, kind: str) -> str:
    """The path of one hostile input, as issue 22 found them (default caps, no flags)."""
    if kind == "dev-zero":
        return "/dev/zero"
    path = tmp_path / f"{kind}.yaml"
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n" if kind == "deep" else BILLION_LAUGHS)
    return str(path)


@pytest.mark.parametrize(
    ("argv", "kind"),
    [
        (["review"], "dev-zero"),
        (["simulate"], "dev-zero"),
        (["review"], "deep"),
        (["simulate"], "deep"),
        (["review", "-o", "json"], "billion-laughs"),
        (["simulate"], "billion-laughs"),
    ],
    ids=[
        "review-dev-zero",
        "simulate-dev-zero",
        "review-deep",
        "simulate-deep",
        "review-json-bomb",
        "simulate-bomb",
    ],
)
def test_hostile_input_ends_in_one_line_under_500_mb(tmp_path: Path, argv: list[str], kind: str) -> None:
    cli = [sys.executable, "-m", "vgpu_guard.cli.main", *argv, "-f", hostile(tmp_path, kind)]
    done = subprocess.run(
        [sys.executable, "-c", PEAK_RSS, *cli],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )
    assert (done.returncode, done.stderr.count("\n"), done.stderr.startswith("error: ")) == (2, 1, True), (
        done.stderr
    )
    peak = int(done.stdout) * 1024
    assert peak < MEMORY_BOUND, f"{' '.join(argv)} {kind}: peak RSS {peak // 2**20} MiB"


@pytest.mark.parametrize("command", ["review", "simulate"])
@pytest.mark.parametrize("text", ["", "---\n---\n", "# only a comment\n"])
def test_an_input_without_objects_is_an_error_not_a_pass(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str, text: str
) -> None:
    """kubectl says "no objects passed"; "0 allowed, 0 denied" with exit 0 read like a pass."""
    path = tmp_path / "empty.yaml"
    path.write_text(text)
    assert one_error_line(capsys, command, "-f", str(path)) == (
        f"error: {path}: no Kubernetes objects (the input is empty, or only comments and ---)\n"
    )
