"""examples/train_byte_lm.py at CI size (--tiny, CPU): both attentions, checkpoints, resume; the
packing of several files per row with segment ids."""

from __future__ import annotations

import importlib.util
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
    assert "packed sequences:" in stdout and "segment ids" in stdout
    summary = json.loads((out / "compare.json").read_text())
    for name in ("jax_fa4", "jax_nn"):
        run = summary["runs"][name]
        assert "error" not in run, run.get("error")
        assert run["packing"]["segment_ids"] and run["packing"]["documents_per_row"] > 2
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


def _load_example():
    """The example as a module (examples/ is not a package)."""
    if "train_byte_lm" in sys.modules:
        return sys.modules["train_byte_lm"]
    spec = importlib.util.spec_from_file_location("train_byte_lm", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


def test_pack_rows_several_documents_per_row():
    """Each row holds crops of several files: segment ids 1, 2, ... in order, positions that
    restart at 0 in each document, bytes copied from one file per document."""
    tbl = _load_example()
    files = [bytes([i]) * n for i, n in enumerate((50, 7, 300, 120, 1), start=1)]
    data = np.frombuffer(b"".join(files), np.uint8)
    starts = np.cumsum([0] + [len(f) for f in files[:-1]])
    batch = tbl.pack_rows(data, starts, np.random.default_rng(0), 16, 129)
    for tokens, ids, pos in zip(*batch.as_tuple(), strict=True):
        assert ids[0] == 1 and np.all(np.diff(ids) >= 0) and np.all(np.diff(ids) <= 1)
        assert ids[-1] >= 3  # pieces of at most half a row: three documents at least
        for doc in range(1, ids[-1] + 1):
            sel = ids == doc
            np.testing.assert_array_equal(pos[sel], np.arange(sel.sum()))
            assert len(set(tokens[sel].tolist())) == 1  # one file (each file is one byte value)


@pytest.mark.slow
def test_loss_skips_predictions_across_documents():
    """A one-byte document between two others is invisible to them and its byte is a label only
    across document boundaries: changing it changes no loss (jax_fa4's segment ids at work)."""
    import jax.numpy as jnp
    from flax import nnx

    tbl = _load_example()
    cfg = tbl.Config(**{**tbl.TINY, "seq_len": 16, "num_layers": 1}, progress=False)
    model = tbl.ByteLM(cfg, tbl.attention_fn_for(cfg), rngs=nnx.Rngs(0))
    ids = np.array([[1] * 9 + [2] + [3] * 7], np.int32)
    pos = np.concatenate([np.arange(9), [0], np.arange(7)])[None].astype(np.int32)
    tokens = np.arange(17, dtype=np.int32)[None] + 60
    other = tokens.copy()
    other[0, 9] = 200
    losses = [float(tbl.loss_fn(model, (jnp.asarray(t), ids, pos))) for t in (tokens, other)]
    assert np.isfinite(losses[0]) and losses[0] == losses[1]
