"""benchmarks/bench_decode.py times the same attention for every implementation: on the CPU, its
jax.nn ("xla") decode call agrees with jax_fa4's decode call on a small cache with lengths."""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
from script_module import load_script

import jax_fa4

bench_decode = load_script(
    pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "bench_decode.py"
)


def test_jax_nn_decode_call_matches_jax_fa4():
    kq, kk, kv = jax.random.split(jax.random.key(3), 3)
    b, sk, hq, hkv, d = 3, 50, 4, 2, 16
    q = jax.random.normal(kq, (b, 1, hq, d), jnp.float32)
    k = jax.random.normal(kk, (b, sk, hkv, d), jnp.float32)
    v = jax.random.normal(kv, (b, sk, hkv, d), jnp.float32)
    lengths = jnp.array([50, 17, 1], jnp.int32)
    want = jax_fa4.attention(q, k, v, causal=True, key_value_seq_lengths=lengths)
    got = bench_decode.make_impl("xla", lengths)(q, k, v)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
