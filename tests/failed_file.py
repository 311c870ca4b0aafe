"""A pytest plugin (loaded by tests/conftest.py) that appends each failing test's id and the first
line of its error to the file named by FA4_FAILED_FILE as soon as the test fails, so that a run
killed at a time limit (tests/gpu/validate.sh's timeout, a device call's) still says which cases
failed and why: pytest's own summary is printed only at the end. Under pytest-xdist the
controller writes the lines (workers forward their reports to it)."""

from __future__ import annotations

import os

import pytest

_WORKER = pytest.StashKey[bool]()
_config: pytest.Config | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _config
    _config = config
    config.stash[_WORKER] = hasattr(config, "workerinput")


def _error_line(report: pytest.TestReport) -> str:
    """The crash message's first line (the exception and its message), else the report's last."""
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    message = str(getattr(crash, "message", ""))
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if lines:
        return lines[0][:300]
    lines = [line.strip() for line in (report.longreprtext or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = os.environ.get("FA4_FAILED_FILE")
    if not path or not report.failed or _config is None or _config.stash.get(_WORKER, False):
        return
    with open(path, "a") as f:
        f.write(f"{report.nodeid} [{report.when}]: {_error_line(report)}\n")
