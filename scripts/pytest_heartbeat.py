"""A pytest plugin for CI logs: one line every 30 s while a single test keeps running.

``pytest -q`` prints a dot when a test ends, so a test that runs for minutes (the reliability
runs) leaves the log silent and looks hung. This says which test is running and for how long,
and nothing at all for tests that finish sooner. scripts/check loads it with ``-p``; which tests
run is unchanged.

It writes to a copy of the terminal's file descriptor taken when the plugin is imported: ``-p``
plugins are imported before pytest starts capturing output, so the copy is the real terminal,
and a line written from the timer thread cannot end up in a test's captured output. In a
pytest-xdist worker, standard output is the channel to the controller process, so the copy is of
standard error, which the workers share with the controller's terminal.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

# PYTEST_HEARTBEAT_SECONDS: for the test that checks the lines reach the terminal.
INTERVAL = float(os.environ.get("PYTEST_HEARTBEAT_SECONDS") or 30.0)
_TERMINAL = os.dup(2 if os.environ.get("PYTEST_XDIST_WORKER") else 1)


def still_running(nodeid: str, seconds: float) -> str:
    """The heartbeat line (on its own line: the dots of ``-q`` may be mid-line)."""
    return f"\n  ... still running {nodeid} ({seconds:.0f} s)\n"


class Heartbeat:
    """A timer thread that reports the current test every ``interval`` seconds until it ends."""

    def __init__(self, interval: float = INTERVAL, fd: int = _TERMINAL) -> None:
        self.interval = interval
        self.fd = fd
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, nodeid: str) -> None:
        self._done.clear()
        started = time.monotonic()

        def beat() -> None:
            while not self._done.wait(self.interval):
                os.write(self.fd, still_running(nodeid, time.monotonic() - started).encode())

        self._thread = threading.Thread(target=beat, name="pytest-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None


_heartbeat = Heartbeat()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    _heartbeat.start(item.nodeid)
    try:
        return (yield)
    finally:
        _heartbeat.stop()
