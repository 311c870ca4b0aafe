"""A pytest plugin (loaded by tests/conftest.py) that appends each failing test's id and the first
line of its error to the file named by FA4_FAILED_FILE as soon as the test fails, so that a run
killed at a time limit (tests/gpu/validate.sh's timeout, a device call's) still says which cases
failed and why: pytest's own summary is printed only at the end. Under pytest-xdist the
controller writes the lines (workers forward their reports to it)."""

from __future__ import annotations

import os

import pytest

# False in an xdist worker (its reports reach the controller, which writes them), and before
# pytest_configure.
_writes = False


def pytest_configure(config: pytest.Config) -> None:
    global _writes
    _writes = not hasattr(config, "workerinput")


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
    if not path or not report.failed or not _writes:
        return
    with open(path, "a") as f:
        f.write(f"{report.nodeid} [{report.when}]: {_error_line(report)}\n")
