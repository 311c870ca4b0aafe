"""The attention variants on the Hopper kernels through the whole Python path (lowering with the
segment ranges, the FFI handlers, forward and backward kernels), against the float64 oracle by
the error rule: every variant alone at every head dim, and all of them combined, on shapes
that are not tile multiples, seq_q != seq_k both ways, GQA. Skips without a GPU.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_variants import check_variant, make_variant, variant_kwargs
from tolerance import case_key, random_qkv

import jax_fa4

pytestmark = pytest.mark.skipif(
    jax.devices()[0].platform != "gpu", reason="needs a GPU (these test the Hopper CUDA kernels)"
)

HEAD_DIMS = [64, 128, 256]
# (batch, seq_q, seq_k, heads_q, heads_kv): one array of segment ids needs seq_q == seq_k.
SHAPES = [(2, 1000, 1000, 4, 2), (1, 700, 1300, 8, 2), (2, 1300, 700, 4, 4)]
# Windows wide enough to span several key blocks, narrow enough to skip most of them.
WINDOWS = {
    "window_300_100": (300, 100),
    "window_64_0": (64, 0),
    "window_left_only_500": (500, None),
}
FEATURES = [
    "window_300_100",
    "window_64_0",
    "window_left_only_500",
    "q_lengths",
    "kv_lengths",
    "lengths",
    "packed",
    "random_ids",
    "softcap",
    "sinks",
]


def _kwargs(feature: str, shape: tuple[int, ...]) -> dict:
    b, sq, sk, hq = shape[:4]
    if feature in WINDOWS:
        return {"local_window_size": WINDOWS[feature]}
    return make_variant(case_key(feature, shape), feature, b, sq, sk, hq)


def _sid(shape):
    return "b{}_sq{}_sk{}_hq{}_hkv{}".format(*shape)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("feature", FEATURES)
@pytest.mark.parametrize("shape", SHAPES, ids=_sid)
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_variant_alone(head_dim, shape, feature, causal):
    """One variant: o, lse, dq, dk, dv (and d sinks) in bfloat16."""
    full = (*shape, head_dim, head_dim)
    check_variant(feature, full, jnp.bfloat16, _kwargs(feature, shape), causal=causal)


ALL = ("window_pair", "packed", "lengths", "softcap", "sinks")


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=_sid)
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_all_variants_combined(head_dim, shape, causal, dtype):
    """Window + packed segment ids + lengths + soft cap + sinks (+ causal, GQA) at once."""
    b, sq, sk, hq = shape[:4]
    kwargs = variant_kwargs(case_key(ALL, shape), ALL, b, sq, sk, hq)
    kwargs["local_window_size"] = (300, 100)
    check_variant("+".join(ALL), (*shape, head_dim, head_dim), dtype, kwargs, causal=causal)


# (batch 4, seq_q, seq_k, heads_q, heads_kv): a training shape and a decode shape (split-KV path).
CLAMP_SHAPES = [(4, 300, 400, 4, 2), (4, 2, 3000, 8, 2)]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", CLAMP_SHAPES, ids=_sid)
@pytest.mark.parametrize("head_dim", [64, 128])
def test_lengths_outside_the_sequence_act_as_clamped(head_dim, shape, causal):
    """int32 lengths reach the kernels as given (no clamp in the Python layer): INT32_MIN, -5,
    seq + 7 and INT32_MAX, passed as jit arguments, give bitwise the o, lse and (deterministic)
    gradients of their clamped values."""
    b, sq, sk, hq, hkv = shape
    key = case_key("lengths-outside", shape, head_dim, causal)
    q, k, v = random_qkv(key, b, sq, sk, hq, hkv, head_dim, head_dim, jnp.bfloat16)
    do = jax.random.normal(jax.random.fold_in(key, 1), q.shape, jnp.float32).astype(q.dtype)
    raw_q = jnp.array([-(2**31), sq // 2, sq + 7, 2**31 - 1], jnp.int32)
    raw_kv = jnp.array([2**31 - 1, -5, sk // 2 + 1, sk + 7], jnp.int32)

    @jax.jit
    def run(q, k, v, do, q_len, kv_len):
        def f(q, k, v):
            return jax_fa4.attention(
                q,
                k,
                v,
                causal=causal,
                query_seq_lengths=q_len,
                key_value_seq_lengths=kv_len,
                return_lse=True,
                deterministic=True,
            )

        (o, lse), pullback = jax.vjp(f, q, k, v)
        return (o, lse, *pullback((do, jnp.zeros_like(lse))))

    got = run(q, k, v, do, raw_q, raw_kv)
    want = run(q, k, v, do, jnp.clip(raw_q, 0, sq), jnp.clip(raw_kv, 0, sk))
    for name, x, y in zip(("o", "lse", "dq", "dk", "dv"), got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=name)
    assert np.isfinite(np.asarray(got[0], np.float32)).all()
