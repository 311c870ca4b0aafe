"""tests/failed_file.py: a failing test's id and error reach FA4_FAILED_FILE while the run is
still going, and passing tests write nothing."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

HERE = pathlib.Path(__file__).parent


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
    env = dict(os.environ, FA4_FAILED_FILE=str(out), PYTHONPATH=str(HERE))
    run = subprocess.run(
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
            str(tmp_path / "test_sample.py"),
        ],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 failed, 2 passed" in run.stdout, run.stdout
    lines = out.read_text().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("test_sample.py::test_fails [call]: "), lines
    assert "arithmetic moved" in lines[0], lines
