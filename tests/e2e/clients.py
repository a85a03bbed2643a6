"""The real clients users meet us through, run as they run them: ``kubectl`` and Helm.

- ``kubectl``: the binary on PATH (the image ships 1.32; ``golden/KUBECTL_VERSION`` records the one
  the golden files were written with). Run as a subprocess from the repository root, so relative
  paths in its messages (``error when creating "examples/..."``) read as in the README, with a
  private discovery cache (no state shared between backends) and a deadline: a client that hangs
  is a failure that names the command, never a stuck suite.
- Helm: ``helm-python-sdk``, a project dependency that embeds Helm v4's own Go library
  (``libhelm_c``). It installs, upgrades and uninstalls releases against a kubeconfig with no
  ``helm`` binary, so nothing is downloaded at test time. Helm v4 applies with server-side apply;
  the library has no switch for client-side apply, so the API server must serve it: these run on
  the real control plane only (conftest.REAL_CLIENTS_ONLY; the API double refuses it).

Where ``kubectl`` is missing the tests say so and are skipped, except under ``CI=true``, where a
missing client fails the run: CI must never pass on a test that did not run.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.real_cluster import in_ci

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).with_name("golden")
CLIENT_SECONDS = 30.0


@dataclass(frozen=True)
class Run:
    """What the user's terminal shows for one command."""

    argv: tuple[str, ...]
    code: int
    stdout: str
    stderr: str

    def transcript(self) -> str:
        """The exit code and both streams, in the form the golden files keep."""
        return f"exit {self.code}\n--- stdout\n{self.stdout}--- stderr\n{self.stderr}"


def kubectl_binary() -> str:
    """The ``kubectl`` on PATH; a missing one skips locally and fails under CI."""
    found = shutil.which("kubectl")
    if found:
        return found
    message = (
        "kubectl is not on PATH (the image ships kubectl 1.32; Debian: apt-get install kubernetes-client)"
    )
    if in_ci():
        pytest.fail(message + "; under CI=true the client tests must run")
    pytest.skip(message)


@dataclass(frozen=True)
class Kubectl:
    """``kubectl --kubeconfig K ...`` for one identity, run from the repository root."""

    kubeconfig: Path
    cache_dir: Path

    async def __call__(self, *args: str, stdin: str | None = None, within: float = CLIENT_SECONDS) -> Run:
        argv = (
            kubectl_binary(),
            "--kubeconfig",
            str(self.kubeconfig),
            "--cache-dir",
            str(self.cache_dir),
            *args,
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=REPO,
            env=env,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(
                process.communicate(stdin.encode() if stdin is not None else None), within
            )
        except TimeoutError:
            process.kill()
            await process.wait()
            raise AssertionError(f"kubectl {' '.join(args)} did not finish within {within:.0f}s") from None
        code = process.returncode if process.returncode is not None else -1
        return Run(tuple(args), code, out.decode(), err.decode())


# -- golden files ---------------------------------------------------------------------------------
_AGE = re.compile(r"(?<=\s)(?:\d+d)?(?:\d+h)?(?:\d+m)?\d+s(?=\s|$)|(?<=\s)<invalid>(?=\s|$)")


def normalise(text: str, replacements: Mapping[str, str] = {}) -> str:
    """Volatile bits out: the story's names (``replacements``) and ages (``12s``, ``3m4s``).

    Column widths follow the longest cell, so an age of ``5s`` and one of ``12s`` would shift
    the columns: ages become ``<age>`` and runs of two or more spaces become two.
    """
    for old, new in replacements.items():
        text = text.replace(old, new)
    text = _AGE.sub("<age>", text)
    return re.sub(r"(?<=\S) {2,}(?=\S)", "  ", text)


def assert_golden(name: str, actual: str) -> None:
    """``actual`` equals ``golden/<name>``; ``UPDATE_GOLDEN=1`` rewrites the file instead."""
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual)
        return
    assert path.exists(), f"no golden file {path}; write it with UPDATE_GOLDEN=1 and review it"
    assert actual == path.read_text(), f"output differs from {path}:\n{actual}"


# -- Helm -----------------------------------------------------------------------------------------
CHART = REPO / "manifests" / "charts" / "vgpu-guard"


@dataclass(frozen=True)
class Helm:
    """Helm v4 (the library) on one kubeconfig: install, upgrade, uninstall of the chart."""

    kubeconfig: Path

    def _config(self, namespace: str) -> Any:
        from helm_python.config import Config

        return Config(kubeconfig_path=self.kubeconfig, namespace=namespace)

    async def install(self, release: str, namespace: str, values: Mapping[str, Any]) -> dict[str, Any]:
        def call() -> dict[str, Any]:
            with self._config(namespace) as config:
                out: dict[str, Any] = config.install(
                    str(CHART), release, dict(values), namespace=namespace, create_namespace=True, timeout=60
                )
                return out

        return await asyncio.to_thread(call)

    async def upgrade(self, release: str, namespace: str, values: Mapping[str, Any]) -> dict[str, Any]:
        def call() -> dict[str, Any]:
            with self._config(namespace) as config:
                out: dict[str, Any] = config.upgrade(
                    str(CHART), release, dict(values), namespace=namespace, timeout=60
                )
                return out

        return await asyncio.to_thread(call)

    async def uninstall(self, release: str, namespace: str) -> dict[str, Any]:
        def call() -> dict[str, Any]:
            with self._config(namespace) as config:
                out: dict[str, Any] = config.uninstall(release, timeout=60, ignore_not_found=True)
                return out

        return await asyncio.to_thread(call)


__all__ = [
    "CHART",
    "GOLDEN",
    "REPO",
    "Helm",
    "Kubectl",
    "Run",
    "assert_golden",
    "kubectl_binary",
    "normalise",
]
