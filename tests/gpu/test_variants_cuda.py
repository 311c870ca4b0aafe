"""The attention variants on the Hopper kernels through the whole Python path (lowering with the
segment ranges, the FFI handlers, forward and backward kernels), against the float64 oracle by
the error rule: every variant alone at every head dim, and all of them combined, on shapes
that are not tile multiples, seq_q != seq_k both ways, GQA. Skips without a GPU.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from test_variants import check_variant, make_variant, variant_kwargs
from tolerance import case_key

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
