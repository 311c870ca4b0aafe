"""cuDNN forward TFLOP/s on the FA3 grid (bf16, 16k tokens, hidden 2048), for the kernel log.

Chains `reps` calls inside one jit (each output feeds the next q) and takes the median of 5.
Usage: python3 tests/gpu/cuda/cudnn_fwd_times.py [seq ...]
"""

import sys
import time

import jax
import jax.numpy as jnp


def time_chain(fn, q, k, v, reps=10):
    @jax.jit
    def chain(q, k, v):
        return jax.lax.fori_loop(0, reps, lambda i, x: fn(x, k, v).astype(x.dtype), q)

    chain(q, k, v).block_until_ready()
    ts = []
    for _ in range(5):
        t0 = time.perf_counter()
        chain(q, k, v).block_until_ready()
        ts.append(time.perf_counter() - t0)
    return sorted(ts)[2] / reps


def main():
    seqs = [int(s) for s in sys.argv[1:]] or [512, 1024, 2048, 4096, 8192, 16384]
    print(f"{'hd':>5} {'causal':>7} {'seq':>6} {'ms':>9} {'TFLOP/s':>8}  (cudnn)")
    for d in (64, 128, 256):
        for causal in (False, True):
            for s in seqs:
                b, h = 16384 // s, 2048 // d
                keys = jax.random.split(jax.random.key(s + d), 3)
                q, k, v = (jax.random.normal(kk, (b, s, h, d), jnp.bfloat16) for kk in keys)

                def fn(q, k, v, causal=causal):
                    return jax.nn.dot_product_attention(
                        q, k, v, is_causal=causal, implementation="cudnn"
                    )

                t = time_chain(fn, q, k, v)
                flops = 4 * b * h * s * s * d / (2 if causal else 1)
                print(
                    f"{d:>5} {str(causal):>7} {s:>6} {t * 1e3:>9.4f} {flops / t / 1e12:>8.1f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
