"""A pytest plugin (loaded by tests/conftest.py) that keeps a run's outcome on disk while it goes,
so that a run killed at a time limit (tests/gpu/validate.sh's timeout, a device call's) still says
what it did, and a later run of the same sources can take up where it stopped:

- FA4_FAILED_FILE: each failing test's id and the first line of its error, appended as soon as
  the test fails (pytest's own summary is printed only at the end).
- FA4_PASSED_FILE: each test's id once all its phases (set-up, call, tear-down) have passed;
  skipped tests are not written, so a resumed run tries them again.
- FA4_SKIP_FILE: a file of ids (as FA4_PASSED_FILE writes them; lines starting with ``#`` are
  comments) that this run deselects. Whether the ids still hold for the sources is the caller's
  to check: validate.sh's TESTS_RESUME accepts only a file written for the same sources.
- FA4_DURATIONS_FILE: each finished test's seconds (set-up, call and tear-down together), a tab
  and its id, appended once its tear-down is reported, whatever the outcome: where a suite's time
  goes, also in a run cut off before pytest's own --durations table.

Under pytest-xdist the controller writes the lines (workers forward their reports to it); every
process deselects the same ids, so the workers' collections agree."""

from __future__ import annotations

import os

import pytest

# False in an xdist worker (its reports reach the controller, which writes them), and before
# pytest_configure.
_writes = False
# Ids whose call phase passed and whose tear-down has not been reported yet.
_ran: set[str] = set()
# Seconds of the phases reported so far, by id (FA4_DURATIONS_FILE).
_seconds: dict[str, float] = {}


def pytest_configure(config: pytest.Config) -> None:
    global _writes
    _writes = not hasattr(config, "workerinput")


def _skip_ids() -> set[str]:
    path = os.environ.get("FA4_SKIP_FILE")
    if not path:
        return set()
    with open(path) as f:
        return {line.strip() for line in f if line.strip() and not line.startswith("#")}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = _skip_ids()
    if not skip:
        return
    done = [item for item in items if item.nodeid in skip]
    if done:
        config.hook.pytest_deselected(items=done)
        items[:] = [item for item in items if item.nodeid not in skip]


def _error_line(report: pytest.TestReport) -> str:
    """The crash message's first line (the exception and its message), else the report's last."""
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    message = str(getattr(crash, "message", ""))
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if lines:
        return lines[0][:300]
    lines = [line.strip() for line in (report.longreprtext or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _append(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not _writes:
        return
    if path := os.environ.get("FA4_DURATIONS_FILE"):
        total = _seconds.pop(report.nodeid, 0.0) + report.duration
        if report.when == "teardown":
            _append(path, f"{total:.2f}\t{report.nodeid}")
        else:
            _seconds[report.nodeid] = total
    if report.failed:
        if path := os.environ.get("FA4_FAILED_FILE"):
            _append(path, f"{report.nodeid} [{report.when}]: {_error_line(report)}")
        return
    # A skip is reported by the set-up (or the call), whose tear-down then passes: the call's
    # report is the one that says the test ran (its set-up passed too), and the tear-down's
    # (a failed one returned above) completes it.
    if report.when == "call" and report.passed:
        _ran.add(report.nodeid)
    elif report.when == "teardown" and report.nodeid in _ran:
        _ran.discard(report.nodeid)
        if path := os.environ.get("FA4_PASSED_FILE"):
            _append(path, report.nodeid)

