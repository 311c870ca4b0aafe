"""Forward numerics of jax_fa4.attention on the CPU kernels against a float64 oracle."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from selection import params
from tolerance import LSE_MIN_MAGNITUDE, assert_close_by_rule, case_key, random_qkv

import jax_fa4

DTYPES = [jnp.bfloat16, jnp.float16, jnp.float32]

# (batch, seq_q, seq_k, heads_q, heads_kv, head_dim, head_dim_v)
SHAPES = [
    (1, 1, 1, 1, 1, 64, 64),
    (3, 17, 17, 4, 2, 32, 32),
    (1, 127, 127, 8, 1, 96, 96),
    (2, 1000, 1000, 2, 2, 128, 128),
    (1, 3000, 3000, 1, 1, 64, 64),
    (2, 127, 1000, 4, 4, 64, 64),
    (1, 1000, 127, 8, 2, 128, 128),
    (1, 200, 333, 8, 8, 256, 256),
    (5, 129, 129, 8, 4, 64, 64),
    (1, 256, 300, 8, 1, 32, 32),
    (2, 100, 130, 4, 2, 64, 48),
    (1, 1, 500, 2, 1, 128, 128),
]


def _id(shape):
    return "b{}_sq{}_sk{}_hq{}_hkv{}_d{}_dv{}".format(*shape)


# Run by default: GQA, lengths that are not block multiples, seq_q < seq_k, v's head dim != q's.
QUICK_SHAPES = [(2, 100, 130, 4, 2, 64, 48)]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("shape", params(SHAPES, QUICK_SHAPES, _id))
def test_forward_matches_float64_oracle(shape, dtype, causal):
    key = case_key(shape, jnp.dtype(dtype).name, causal)
    q, k, v = random_qkv(key, *shape, dtype)
    o, lse = jax.jit(lambda q, k, v: jax_fa4.attention(q, k, v, causal=causal, return_lse=True))(
        q, k, v
    )
    assert o.dtype == q.dtype and o.shape == (shape[0], shape[1], shape[3], shape[6])
    assert lse.dtype == jnp.float32 and lse.shape == (shape[0], shape[3], shape[1])
    o64, lse64 = jax_fa4.attention_reference(q, k, v, causal=causal, compute_dtype=jnp.float64)
    o_xla, lse_xla = jax_fa4.attention_reference(q, k, v, causal=causal, compute_dtype=dtype)
    tag = f"{_id(shape)} {jnp.dtype(dtype).name} causal={causal}"
    assert_close_by_rule(f"o {tag}", o, o64, o_xla, dtype)
    assert_close_by_rule(
        f"lse {tag}", lse, lse64, lse_xla.astype(jnp.float32), dtype, LSE_MIN_MAGNITUDE
    )


def test_single_key_lse_with_cancelling_score():
    """One key whose float32 score cancels to ~0.02 from terms of ~1 (PRNG key 197): any summation
    order rounds it at ~1e-7, far above 8 ulps of 0.02, so lse's floor is taken at magnitude 1
    (LSE_MIN_MAGNITUDE). The error must still be float32 rounding, not more."""
    q, k, v = random_qkv(jax.random.key(197), 1, 1, 1, 1, 1, 64, 64, jnp.float32)
    _, lse = jax.jit(lambda q, k, v: jax_fa4.attention(q, k, v, return_lse=True))(q, k, v)
    _, lse64 = jax_fa4.attention_reference(q, k, v, compute_dtype=jnp.float64)
    _, lse_xla = jax_fa4.attention_reference(q, k, v, compute_dtype=jnp.float32)
    assert abs(float(lse64[0, 0, 0])) < 0.05  # the cancelling case this test is about
    assert_close_by_rule("lse single key", lse, lse64, lse_xla, jnp.float32, LSE_MIN_MAGNITUDE)
    assert float(np.abs(np.asarray(lse, np.float64) - np.asarray(lse64)).max()) < 1e-6


def test_case_key_is_stable():
    """Inputs depend only on a case's parameters, so a failing case comes back on a rerun."""
    a = jax.random.key_data(case_key((1, 2), "float32", True))
    b = jax.random.key_data(case_key((1, 2), "float32", True))
    c = jax.random.key_data(case_key((1, 2), "float32", False))
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_causal_rows_that_see_no_key_are_zero_with_lse_minus_inf():
    q, k, v = random_qkv(jax.random.key(1), 1, 10, 4, 2, 1, 32, 32, jnp.float32)
    o, lse = jax_fa4.attention(q, k, v, causal=True, return_lse=True)
    # Bottom-right alignment: query i sees keys j <= i + 4 - 10, so rows 0..5 see nothing.
    np.testing.assert_array_equal(np.asarray(o[:, :6]), 0.0)
    assert np.all(np.isneginf(np.asarray(lse[:, :, :6])))
    assert np.all(np.isfinite(np.asarray(lse[:, :, 6:])))


@pytest.mark.slow
def test_custom_softmax_scale():
    q, k, v = random_qkv(jax.random.key(2), 2, 65, 80, 4, 2, 64, 64, jnp.float32)
    o = jax_fa4.attention(q, k, v, softmax_scale=0.37)
    o64, _ = jax_fa4.attention_reference(q, k, v, softmax_scale=0.37, compute_dtype=jnp.float64)
    o32, _ = jax_fa4.attention_reference(q, k, v, softmax_scale=0.37, compute_dtype=jnp.float32)
    assert_close_by_rule("o scale=0.37", o, o64, o32, jnp.float32)


def test_default_scale_is_inverse_sqrt_head_dim():
    q, k, v = random_qkv(jax.random.key(3), 1, 33, 33, 2, 2, 96, 96, jnp.float32)
    a = jax_fa4.attention(q, k, v)
    b = jax_fa4.attention(q, k, v, softmax_scale=96**-0.5)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_large_logits_do_not_overflow():
    q, k, v = random_qkv(jax.random.key(4), 1, 64, 64, 2, 2, 64, 64, jnp.float32)
    o = jax_fa4.attention(q * 30.0, k * 30.0, v)
    o64, _ = jax_fa4.attention_reference(q * 30.0, k * 30.0, v, compute_dtype=jnp.float64)
    o32, _ = jax_fa4.attention_reference(q * 30.0, k * 30.0, v, compute_dtype=jnp.float32)
    assert_close_by_rule("o large logits", o, o64, o32, jnp.float32)


def test_empty_sequences_give_exact_answers():
    q, k, v = random_qkv(jax.random.key(5), 2, 7, 0, 4, 2, 64, 64, jnp.float32)
    o, lse = jax_fa4.attention(q, k, v, return_lse=True)
    np.testing.assert_array_equal(np.asarray(o), 0.0)
    assert np.all(np.isneginf(np.asarray(lse)))
    q, k, v = random_qkv(jax.random.key(6), 2, 0, 9, 4, 2, 64, 64, jnp.float32)
    assert jax_fa4.attention(q, k, v).shape == (2, 0, 4, 64)


@pytest.mark.slow
def test_reference_matches_naive_softmax():
    q, k, v = random_qkv(jax.random.key(7), 2, 31, 45, 4, 2, 16, 24, jnp.float64)
    o, lse = jax_fa4.attention_reference(q, k, v, causal=True)
    kk = jnp.repeat(k, 2, axis=2)
    vv = jnp.repeat(v, 2, axis=2)
    s = jnp.einsum("bqhd,bkhd->bhqk", q, kk) / 4.0
    mask = jnp.arange(45)[None, :] <= jnp.arange(31)[:, None] + 14
    s = jnp.where(mask, s, -jnp.inf)
    want = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), vv)
    np.testing.assert_allclose(np.asarray(o), np.asarray(want), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        np.asarray(lse), np.asarray(jax.nn.logsumexp(s, axis=-1)), rtol=1e-12, atol=1e-12
    )
