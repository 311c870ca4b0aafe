"""tests/failed_file.py: a failing test's id and error reach FA4_FAILED_FILE while the run is
still going, passing tests write nothing there; FA4_PASSED_FILE gets the tests that passed (not
the skipped or failed ones), and FA4_SKIP_FILE deselects them in a later run."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

HERE = pathlib.Path(__file__).parent


def _pytest(tmp_path, env_extra, *args):
    """pytest with the plugin in tmp_path, this run's FA4_* files replaced by env_extra's."""
    env = dict(os.environ, PYTHONPATH=str(HERE))
    env.pop("FA4_FAILED_FILE", None)
    env.pop("FA4_PASSED_FILE", None)
    env.pop("FA4_SKIP_FILE", None)
    env.pop("FA4_DURATIONS_FILE", None)
    env.update(env_extra)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "failed_file",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )


def test_failures_are_written_as_they_happen(tmp_path):
    (tmp_path / "test_sample.py").write_text(
        textwrap.dedent(
            """
            import os, pathlib

            def test_passes():
                pass

            def test_fails():
                assert 1 + 1 == 3, "arithmetic moved"

            def test_sees_the_first_failure_already_written():
                # runs after test_fails in file order: its line must be there now
                text = pathlib.Path(os.environ["FA4_FAILED_FILE"]).read_text()
                assert "test_fails" in text
            """
        )
    )
    out = tmp_path / "failed.txt"
    run = _pytest(tmp_path, {"FA4_FAILED_FILE": str(out)}, str(tmp_path / "test_sample.py"))
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 failed, 2 passed" in run.stdout, run.stdout
    lines = out.read_text().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("test_sample.py::test_fails [call]: "), lines
    assert "arithmetic moved" in lines[0], lines


def test_passed_ids_are_written_and_a_later_run_skips_them(tmp_path):
    (tmp_path / "test_sample.py").write_text(
        textwrap.dedent(
            """
            import pytest

            @pytest.mark.parametrize("n", [1, 2])
            def test_passes(n):
                pass

            def test_fails():
                assert 1 + 1 == 3

            def test_skips():
                pytest.skip("not here")

            @pytest.fixture
            def breaks_on_teardown():
                yield
                raise RuntimeError("teardown broke")

            def test_call_passes_teardown_fails(breaks_on_teardown):
                pass
            """
        )
    )
    passed = tmp_path / "passed.txt"
    passed.write_text("# source abc\n")
    first = _pytest(tmp_path, {"FA4_PASSED_FILE": str(passed)}, "test_sample.py")
    assert first.returncode == 1, first.stdout + first.stderr
    ids = [line for line in passed.read_text().splitlines() if not line.startswith("#")]
    assert ids == ["test_sample.py::test_passes[1]", "test_sample.py::test_passes[2]"], ids

    second = _pytest(tmp_path, {"FA4_SKIP_FILE": str(passed)}, "test_sample.py")
    assert second.returncode == 1, second.stdout + second.stderr
    assert "2 deselected" in second.stdout, second.stdout
    # the failed, the skipped and the one whose tear-down failed run again
    assert "1 failed, 1 passed, 1 skipped, 2 deselected, 1 error" in second.stdout, second.stdout


def test_durations_are_written_for_every_finished_test(tmp_path):
    (tmp_path / "test_sample.py").write_text(
        textwrap.dedent(
            """
            import time
            import pytest

            @pytest.fixture
            def slow_setup():
                time.sleep(0.3)
                yield

            def test_slow_setup(slow_setup):
                time.sleep(0.2)

            def test_fails():
                assert 1 + 1 == 3

            def test_skips():
                pytest.skip("not here")
            """
        )
    )
    out = tmp_path / "durations.txt"
    run = _pytest(tmp_path, {"FA4_DURATIONS_FILE": str(out)}, "test_sample.py")
    assert run.returncode == 1, run.stdout + run.stderr
    rows = dict(reversed(line.split("\t")) for line in out.read_text().splitlines())
    names = ["test_fails", "test_skips", "test_slow_setup"]
    assert sorted(rows) == [f"test_sample.py::{n}" for n in names], rows
    # set-up and call both counted
    assert float(rows["test_sample.py::test_slow_setup"]) >= 0.5, rows
    assert float(rows["test_sample.py::test_fails"]) < 0.5, rows
