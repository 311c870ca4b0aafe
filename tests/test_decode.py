"""Decode shapes: a few queries against a long KV cache with per-sequence cache lengths (the call
the split-KV decode path serves on the GPU, cuda/hopper/decode/), against the float64 reference by
the error rule: seq_q 1, 2 and 16, GQA ratios 1, 4 and 8, cache lengths 0, 1, odd, full and past
the cache (clamped), causal (each sequence's queries end at its cache length) and not, with a
window, soft cap and sinks. tests/gpu/test_decode_cuda.py runs the same cases on the H200."""

import jax.numpy as jnp
import numpy as np
import pytest
from test_variants import check_variant

# b, sq, sk, hq, hkv, d, dv.
SHAPES = [
    (5, 1, 300, 8, 2, 64, 64),
    (5, 2, 257, 8, 1, 64, 64),
    (5, 16, 200, 4, 4, 32, 32),
]


def cache_lengths(b: int, sk: int) -> jnp.ndarray:
    """0, 1, an odd length, full, and one past the cache (clamped to it), then repeating."""
    pattern = [0, 1, sk // 2 | 1, sk, sk + 9]
    return jnp.asarray(np.array([pattern[i % len(pattern)] for i in range(b)], np.int32))


@pytest.mark.parametrize(
    "shape",
    [SHAPES[0], *(pytest.param(s, marks=pytest.mark.slow) for s in SHAPES[1:])],
    ids=lambda s: "b{}_sq{}_sk{}_hq{}_hkv{}_d{}".format(*s[:6]),
)
@pytest.mark.parametrize(
    "causal", [True, pytest.param(False, marks=pytest.mark.slow)], ids=["causal", "full"]
)
def test_decode_with_cache_lengths(shape, causal):
    b, sq, sk = shape[:3]
    check_variant(
        "decode", shape, jnp.float32, {"key_value_seq_lengths": cache_lengths(b, sk)}, causal=causal
    )


@pytest.mark.slow
def test_decode_with_window_softcap_and_sinks():
    shape = (5, 2, 300, 8, 2, 64, 64)
    b, sq, sk, hq = shape[:4]
    kwargs = {
        "key_value_seq_lengths": cache_lengths(b, sk),
        "local_window_size": (40, 0),
        "logits_soft_cap": 20.0,
        "sinks": jnp.linspace(-1.0, 1.5, hq, dtype=jnp.float32),
    }
    check_variant("decode-variants", shape, jnp.float32, kwargs, causal=True)


@pytest.mark.slow
def test_decode_bfloat16():
    shape = (5, 1, 300, 8, 2, 64, 64)
    check_variant(
        "decode-bf16",
        shape,
        jnp.bfloat16,
        {"key_value_seq_lengths": cache_lengths(5, 300)},
        causal=True,
    )
