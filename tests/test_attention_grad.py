"""jax.grad through jax_fa4.attention (CPU backward) against the float64 oracle's gradients."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from selection import params
from tolerance import assert_close_by_rule, random_qkv

import jax_fa4

# (batch, seq_q, seq_k, heads_q, heads_kv, head_dim, head_dim_v)
SHAPES = [
    (1, 1, 1, 1, 1, 64, 64),
    (3, 17, 17, 4, 2, 32, 32),
    (1, 127, 127, 8, 1, 96, 96),
    (2, 127, 300, 4, 4, 64, 64),
    (1, 300, 127, 8, 2, 128, 128),
    (1, 1000, 1000, 2, 1, 64, 64),
    (1, 160, 160, 4, 4, 256, 256),
    (2, 100, 130, 4, 2, 64, 48),
]


def _id(shape):
    return "b{}_sq{}_sk{}_hq{}_hkv{}_d{}_dv{}".format(*shape)


# Run by default: GQA, three key blocks, seq_q < seq_k (causal rows see part of a block), v's head
# dim != q's; every mask and LSE cotangent, in float32 (the backward computes in float32 for every
# input dtype; the 16-bit cases are slow ones).
QUICK_SHAPES = [(2, 100, 130, 4, 2, 64, 48)]
DTYPES = [jnp.bfloat16, jnp.float16, jnp.float32]


def _loss(attn, q, k, v, w, wl):
    o, lse = attn(q, k, v)
    finite_lse = jnp.where(jnp.isfinite(lse), lse, 0.0)
    return jnp.sum(o.astype(jnp.float64 if o.dtype == jnp.float64 else jnp.float32) * w) + jnp.sum(
        finite_lse * wl
    )


@pytest.mark.parametrize("with_lse", [False, True], ids=["o", "o+lse"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", params(DTYPES, [jnp.float32], lambda d: d.__name__))
@pytest.mark.parametrize("shape", params(SHAPES, QUICK_SHAPES, _id))
def test_grad_matches_float64_oracle(shape, dtype, causal, with_lse):
    key = jax.random.key(hash((shape, causal, with_lse)) % 2**31)
    q, k, v = random_qkv(key, *shape, dtype)
    b, sq, _, hq, _, _, dv = shape
    w = jax.random.normal(jax.random.key(11), (b, sq, hq, dv), jnp.float32)
    wl = jax.random.normal(jax.random.key(12), (b, hq, sq), jnp.float32) * float(with_lse)

    def fa4(q, k, v):
        return jax_fa4.attention(q, k, v, causal=causal, return_lse=True)

    def ref(dt):
        return lambda q, k, v: jax_fa4.attention_reference(q, k, v, causal=causal, compute_dtype=dt)

    grads = jax.jit(jax.grad(lambda *a: _loss(fa4, *a, w, wl), argnums=(0, 1, 2)))(q, k, v)
    q64, k64, v64 = (x.astype(jnp.float64) for x in (q, k, v))
    oracle = jax.grad(lambda *a: _loss(ref(jnp.float64), *a, w, wl), argnums=(0, 1, 2))(
        q64, k64, v64
    )
    baseline = jax.grad(lambda *a: _loss(ref(dtype), *a, w, wl), argnums=(0, 1, 2))(q, k, v)
    tag = f"{_id(shape)} {jnp.dtype(dtype).name} causal={causal} lse={with_lse}"
    for name, g, o, bl in zip(("dq", "dk", "dv"), grads, oracle, baseline, strict=True):
        assert g.dtype == jnp.dtype(dtype)
        assert_close_by_rule(f"{name} {tag}", g, o, bl, dtype)
