"""examples/train_byte_lm.py at CI size (--tiny, CPU): both attentions, checkpoints, resume; the
packing of several files per row with segment ids; KV-cache decoding against the full forward."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest
from script_module import load_script

pytest.importorskip("flax")
pytest.importorskip("optax")
pytest.importorskip("orbax.checkpoint")
pytest.importorskip("matplotlib")
pytest.importorskip("tqdm")

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train_byte_lm.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_example(*args: str, cwd: pathlib.Path, host_devices: int | None = None) -> str:
    """Runs the example on the CPU in a fresh interpreter (with `host_devices` CPU devices, else
    one); returns its stdout."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # conftest's 8 host devices
    env["JAX_PLATFORMS"] = "cpu"
    if host_devices:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={host_devices}"
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
    assert "generated tokens/s" in stdout
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
        assert run["generate_tokens_per_s"] > 0 and run["generate"]["tokens"] == 48
        assert run["sample"] and run["generate"]["prefills"] == 1
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
    return load_script(EXAMPLE)


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
    model = tbl.ByteLM(cfg, tbl.attention_fns_for(cfg), rngs=nnx.Rngs(0))
    ids = np.array([[1] * 9 + [2] + [3] * 7], np.int32)
    pos = np.concatenate([np.arange(9), [0], np.arange(7)])[None].astype(np.int32)
    tokens = np.arange(17, dtype=np.int32)[None] + 60
    other = tokens.copy()
    other[0, 9] = 200
    losses = [float(tbl.loss_fn(model, (jnp.asarray(t), ids, pos))) for t in (tokens, other)]
    assert np.isfinite(losses[0]) and losses[0] == losses[1]


def _tiny_decode_cfg(tbl, attention: str):
    """Two layers, two heads of dim 16, a window of 16 bytes (random weights)."""
    return tbl.Config(
        attention=attention, seq_len=16, d_model=32, num_heads=2, num_layers=2, progress=False
    )


@pytest.mark.parametrize(
    "attention, temperature",
    [("jax_fa4", 0.0), ("jax_nn", 1.0), pytest.param("jax_fa4", 1.0, marks=pytest.mark.slow)],
)
def test_kv_cache_generation_matches_full_forward(attention, temperature):
    """Every byte Trainer.generate produces (prefill, jitted decode steps, re-prefills when the
    16-byte context is full) comes from the logits that the full forward over its context gives:
    the bytes since the last restart, which keeps the last 8 when a 17th would not fit."""
    import jax
    from flax import nnx

    tbl = _load_example()
    cfg = _tiny_decode_cfg(tbl, attention)
    trainer = tbl.Trainer.create(cfg)
    model, _ = nnx.merge(trainer.graphdef, trainer.state)
    s, keep = cfg.seq_len, cfg.seq_len // 2

    @jax.jit
    def full_forward_last(window, last):  # window int32 [1, s]: the context, then padding
        return model(window)[0, last]

    for prompt in (b"import os", bytes(range(40, 40 + 2 * s + 3))):  # short; longer than s
        gen = trainer.generate(prompt, 40, temperature)
        assert len(gen.tokens) == 40 and gen.logits.shape == (40, 256)
        assert gen.prefills >= 3  # the context-full boundary crossed at least twice
        context, want = list(prompt[-s:]), []
        for byte in gen.tokens:
            window = np.zeros((1, s), np.int32)
            window[0, : len(context)] = context
            want.append(np.asarray(full_forward_last(window, len(context) - 1)))
            context.append(byte)
            if len(context) > s:
                context = context[-keep:]
        np.testing.assert_allclose(gen.logits, np.stack(want), rtol=1e-4, atol=1e-4)
        if temperature == 0:
            assert list(gen.tokens) == np.argmax(gen.logits, axis=-1).tolist()


def test_decode_rows_with_different_cache_lengths():
    """ByteLM.prefill and .decode with two rows of different lengths (3 and 9 prompt bytes):
    each row's cache is written at its own length and each query sees only its own row's
    keys below its length; the logits match the full forward of each row alone."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    tbl = _load_example()
    cfg = _tiny_decode_cfg(tbl, "jax_fa4")
    model = tbl.ByteLM(cfg, tbl.attention_fns_for(cfg), rngs=nnx.Rngs(3))
    rng = np.random.default_rng(0)
    rows = [rng.integers(0, 256, n).tolist() for n in (3, 9)]
    fed = rng.integers(0, 256, (4, 2)).astype(np.int32)  # 4 decode steps, one byte per row
    window = np.zeros((2, cfg.seq_len), np.int32)
    for b, row in enumerate(rows):
        window[b, : len(row)] = row
    lengths = np.array([len(r) for r in rows], np.int32)
    logits, caches = jax.jit(model.prefill)(jnp.asarray(window), jnp.asarray(lengths))
    got = [np.asarray(logits)]
    decode = jax.jit(model.decode)
    for step in range(len(fed)):
        logits, caches = decode(jnp.asarray(fed[step]), jnp.asarray(lengths + step), caches)
        got.append(np.asarray(logits))
    full_window = window.copy()  # each row's prompt and fed bytes (then padding: causal)
    for b, row in enumerate(rows):
        full_window[b, len(row) : len(row) + len(fed)] = fed[:, b]
    full = np.asarray(jax.jit(model)(jnp.asarray(full_window)))  # [2, seq_len, 256]
    for b, row in enumerate(rows):
        want = full[b, len(row) - 1 : len(row) + len(fed)]  # [5, 256]
        np.testing.assert_allclose(np.stack(got)[:, b], want, rtol=1e-4, atol=1e-4)


def test_data_parallel_steps_match_one_device():
    """--data-parallel: the batch split over 4 of the 8 host devices, the model replicated; three
    training steps give the one-device losses and parameters (float32, up to summation order),
    and a batch that the devices do not divide is a clear error."""
    import jax
    from flax import nnx

    tbl = _load_example()
    cfg = tbl.Config(
        seq_len=32,
        d_model=32,
        num_heads=2,
        num_layers=2,
        batch_size=8,
        progress=False,
        max_corpus_mb=1.0,
    )
    corpus = tbl.load_stdlib_corpus(cfg.heldout_percent, cfg.max_corpus_mb)
    one = tbl.Trainer.create(cfg)
    dp = tbl.Trainer.create(tbl.dataclasses.replace(cfg, data_parallel=4))
    assert one.mesh is None and dp.mesh.size == 4
    for step in range(3):
        batch = tbl.train_batch(corpus, step, cfg).as_tuple()
        one.state, l1 = one.step(one.state, one.place_batch(batch))
        dp.state, l4 = dp.step(dp.state, dp.place_batch(batch))
        assert len(l4.sharding.device_set) == 4
        np.testing.assert_allclose(float(l4), float(l1), rtol=2e-5, err_msg=f"step {step}")
    p1 = jax.tree.leaves(nnx.state(nnx.merge(one.graphdef, one.state)[0], nnx.Param))
    p4 = jax.tree.leaves(nnx.state(nnx.merge(dp.graphdef, dp.state)[0], nnx.Param))
    for a, b in zip(p4, p1, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="batch_size=6 must be a multiple of the 4"):
        tbl.Trainer.create(tbl.dataclasses.replace(cfg, batch_size=6, data_parallel=4))
    with pytest.raises(ValueError, match="data_parallel=9: this machine has 8 devices"):
        tbl.Trainer.create(tbl.dataclasses.replace(cfg, data_parallel=9))


@pytest.mark.slow
def test_tiny_data_parallel_run(tmp_path):
    """The whole --tiny run (training, evaluation, checkpoints, KV-cache sampling) with the batch
    split over every one of 4 host devices."""
    out = tmp_path / "dp"
    stdout = run_example(
        "--tiny",
        "--steps",
        "12",
        "--eval-every",
        "6",
        "--data-parallel",
        "0",
        "--no-progress",
        "--out",
        str(out),
        cwd=tmp_path,
        host_devices=4,
    )
    assert "x 4 (data parallel)" in stdout, stdout
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["data_parallel_devices"] == 4
    assert len(metrics["train_loss"]) == 12 and np.all(np.isfinite(metrics["train_loss"]))
    assert metrics["sample"]
