"""Decode shapes on the Hopper kernels through the whole Python path: the forward of a few query
rows per kv head runs the split-KV decode path (cuda/hopper/decode/, with its workspace result),
the backward the training kernels; o, lse and the gradients against the float64 oracle by the
error rule. seq_q 1, 2 and 16, GQA 1, 4 and 8, cache lengths 0, 1, odd, full and past the cache,
every head dim, with and without the variants. Skips without a GPU.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from test_decode import cache_lengths
from test_variants import check_variant

pytestmark = pytest.mark.skipif(
    jax.devices()[0].platform != "gpu", reason="needs a GPU (these test the Hopper CUDA kernels)"
)

HEAD_DIMS = [64, 128, 256]
# (batch, seq_q, seq_k, heads_q, heads_kv): one split and many, one row tile and several.
SHAPES = [(5, 1, 3000, 32, 8), (5, 2, 1100, 8, 1), (5, 16, 700, 4, 4), (2, 1, 20000, 16, 2)]


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "b{}_sq{}_sk{}_hq{}_hkv{}".format(*s))
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_decode_with_cache_lengths(head_dim, shape, causal):
    b, sq, sk = shape[:3]
    full = (*shape, head_dim, head_dim)
    check_variant(
        "decode", full, jnp.bfloat16, {"key_value_seq_lengths": cache_lengths(b, sk)}, causal=causal
    )


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_decode_with_window_softcap_and_sinks(head_dim):
    shape = (5, 4, 2000, 8, 2, head_dim, head_dim)
    b, sq, sk, hq = shape[:4]
    kwargs = {
        "key_value_seq_lengths": cache_lengths(b, sk),
        "local_window_size": (300, 0),
        "logits_soft_cap": 20.0,
        "sinks": jnp.linspace(-1.0, 1.5, hq, dtype=jnp.float32),
    }
    check_variant("decode-variants", shape, jnp.bfloat16, kwargs, causal=True)
