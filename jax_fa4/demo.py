"""`python -m jax_fa4.demo`: runs jax_fa4.attention on the default device, checks it against the
reference, and times it beside jax.nn.dot_product_attention (cuDNN on a GPU, XLA on the CPU)."""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import jax_fa4


def _median_seconds(fn, *args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))  # compile and warm up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seq", type=int, default=None, help="sequence length")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    device = jax.devices()[0]
    on_gpu = device.platform == "gpu"
    # The oracle: float64 on the CPU, float32 on the GPU (bf16 inputs there); see the error rule
    # of docs/design.md.
    oracle_dtype = jnp.float32 if on_gpu else jnp.float64
    if not on_gpu:
        jax.config.update("jax_enable_x64", True)
    if on_gpu:
        batch, seq, heads, head_dim, dtype, peer = (
            4,
            args.seq or 4096,
            16,
            128,
            jnp.bfloat16,
            "cudnn",
        )
    else:
        batch, seq, heads, head_dim, dtype, peer = 1, args.seq or 2048, 8, 64, jnp.float32, "xla"
    print(f"device: {device.device_kind} ({device.platform}); jax {jax.__version__}")
    print(
        f"shape: batch {batch}, seq {seq}, heads {heads}, head_dim {head_dim}, "
        f"{jnp.dtype(dtype).name}"
    )

    kq, kk, kv = jax.random.split(jax.random.key(0), 3)
    q, k, v = (
        jax.random.normal(key, (batch, seq, heads, head_dim), jnp.float32).astype(dtype)
        for key in (kq, kk, kv)
    )
    ok = True
    for causal in (False, True):
        fa4 = jax.jit(lambda q, k, v, c=causal: jax_fa4.attention(q, k, v, causal=c))
        ref = jax.jit(
            lambda q, k, v, c=causal: jax.nn.dot_product_attention(
                q, k, v, is_causal=c, implementation=peer
            )
        )
        o = fa4(q, k, v)
        oracle, _ = jax_fa4.attention_reference(q, k, v, causal=causal, compute_dtype=oracle_dtype)
        err = float(jnp.max(jnp.abs(o.astype(oracle_dtype) - oracle)))
        peer_err = float(jnp.max(jnp.abs(ref(q, k, v).astype(oracle_dtype) - oracle)))
        # The error rule of docs/design.md: at most 2x the peer's error plus a few units of
        # rounding.
        ulps = 1 if jnp.dtype(dtype).itemsize == 2 else 8
        floor = ulps * float(jnp.finfo(dtype).eps) * float(jnp.max(jnp.abs(oracle)))
        passed = err <= 2 * peer_err + floor
        ok &= passed
        t_fa4 = _median_seconds(fa4, q, k, v, repeats=args.repeats)
        t_peer = _median_seconds(ref, q, k, v, repeats=args.repeats)
        flops = 4 * batch * heads * seq * seq * head_dim / (2 if causal else 1)
        print(
            f"causal={causal!s:5}  max err {err:.2e} (jax.nn {peer}: {peer_err:.2e}) "
            f"{'ok' if passed else 'FAIL'}  |  jax_fa4 {t_fa4 * 1e3:8.2f} ms "
            f"{flops / t_fa4 / 1e12:7.2f} TFLOP/s  |  jax.nn {peer} {t_peer * 1e3:8.2f} ms "
            f"{flops / t_peer / 1e12:7.2f} TFLOP/s"
        )
    g = jax.grad(lambda q: jnp.sum(jax_fa4.attention(q, k, v, causal=True).astype(jnp.float32)))
    if not on_gpu:
        print(f"grad ok: finite = {bool(np.isfinite(np.asarray(g(q), np.float32)).all())}")
    if not ok:
        raise SystemExit("jax_fa4 disagreed with the reference")


if __name__ == "__main__":
    main()
