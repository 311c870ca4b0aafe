"""Every ```python block of README.md runs as it is, each in a fresh interpreter (CPU).

A block runs in its own process: the sharding example sets XLA_FLAGS for 8 CPU devices before
importing jax, which only works in a process where jax is not imported yet. The test process's
own XLA_FLAGS (conftest asks for 8 devices) and float64 switch are not passed on, so every block
sees what a reader's fresh `python3` would.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _python_blocks() -> list[tuple[str, str]]:
    """(id, code) of each ```python block, the id from the nearest heading above it."""
    text = README.read_text(encoding="utf-8")
    blocks = []
    for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
        headings = re.findall(r"^#+ (.+)$", text[: m.start()], re.M)
        heading = headings[-1] if headings else "top"
        name = re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-")
        blocks.append((f"{len(blocks)}-{name}", m.group(1)))
    return blocks


BLOCKS = _python_blocks()
# The sharding example runs forward and backward of every mode on 8 CPU devices (~25 s on 2 cores).
SLOW = {"sharding-and-multi-device"}


def test_readme_has_python_blocks():
    """The extraction finds the README's examples (a changed fence would silently test nothing)."""
    names = [name for name, _ in BLOCKS]
    assert len(BLOCKS) >= 3, names
    assert any(name.endswith("example") for name in names), names
    assert any(name.endswith("flax") for name in names), names
    assert any("sharding" in name for name in names), names


@pytest.mark.parametrize(
    "code",
    [
        pytest.param(
            code, id=name, marks=[pytest.mark.slow] if name.split("-", 1)[1] in SLOW else []
        )
        for name, code in BLOCKS
    ],
)
def test_readme_block_runs(code):
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_ENABLE_X64")}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-6000:]}"
