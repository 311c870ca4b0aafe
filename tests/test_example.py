"""examples/train_byte_lm.py at CI size (--tiny, CPU): both attentions, checkpoints, resume."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("flax")
pytest.importorskip("optax")
pytest.importorskip("orbax.checkpoint")
pytest.importorskip("matplotlib")
pytest.importorskip("tqdm")

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train_byte_lm.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_example(*args: str, cwd: pathlib.Path) -> str:
    """Runs the example on the CPU in a fresh interpreter; returns its stdout."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # conftest's 8 host devices
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return proc.stdout


@pytest.mark.slow
def test_tiny_compare(tmp_path):
    out = tmp_path / "cmp"
    stdout = run_example("--tiny", "--compare", "--out", str(out), cwd=tmp_path)
    assert "tokens/s" in stdout and "| jax_fa4 |" in stdout and "| jax_nn |" in stdout
    summary = json.loads((out / "compare.json").read_text())
    for name in ("jax_fa4", "jax_nn"):
        run = summary["runs"][name]
        assert "error" not in run, run.get("error")
        losses = np.asarray(run["train_loss"])
        assert losses.shape == (40,) and np.isfinite(losses).all()
        assert losses[0] > 5.0 and losses[-5:].mean() < 4.0  # ln(256) = 5.55 at the start
        assert [step for step, _ in run["eval"]] == [10, 20, 30, 40]
        assert run["tokens_per_s"] > 0
        assert (out / name / "loss.png").read_bytes()[:8] == PNG_MAGIC
        assert sorted(p.name for p in (out / name / "checkpoints").iterdir()) == ["20", "40"]
    # same initial weights, same batches, attention equal to float32 rounding
    assert summary["max_abs_train_loss_diff"] < 1e-3
    assert (out / "compare.png").read_bytes()[:8] == PNG_MAGIC


@pytest.mark.slow
def test_tiny_resume_reproduces_the_run(tmp_path):
    """Resuming from the step-10 checkpoint retrains steps 11..20 to the same losses."""
    out = tmp_path / "run"
    args = ("--tiny", "--steps", "20", "--ckpt-every", "10", "--no-progress", "--out", str(out))
    run_example(*args, cwd=tmp_path)
    first = json.loads((out / "metrics.json").read_text())
    shutil.rmtree(out / "checkpoints" / "20")
    stdout = run_example(*args, "--resume", cwd=tmp_path)
    assert "resumed from step 10" in stdout
    second = json.loads((out / "metrics.json").read_text())
    assert len(second["train_loss"]) == 20
    np.testing.assert_allclose(second["train_loss"], first["train_loss"], rtol=1e-5, atol=1e-6)
    assert second["eval"][-1][0] == 20
