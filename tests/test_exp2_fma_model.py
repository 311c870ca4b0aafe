"""Host model of the forward's FMA-pipe exponential (common/numeric.cuh exp2_fma_affine).

The bounded soft-cap softmax (cuda/hopper/fwd/softmax.cuh, ScoreCap::kBounded) takes p = 2^(t C - k)
for a capped score t in [-1, 1], C = c log2 e and the integer bias k = ceil(C - 32)
(fwd_bounded_bias, cuda/hopper/fwd/launch.cuh). Part of those exponentials run on the FMA pipe:
one FMA forms t C - k and rounds it through the 1.5 * 2^23 shift, a second forms the remainder, a
degree-3 polynomial gives 2^f and the integer goes into the exponent field. This replays those
float32 operations bit for bit (an FMA as one rounding of the exact float64 product plus the
addend) over every cap the bounded softmax accepts and checks the relative error, and that every p
is a normal float no larger than 2^32.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

F32 = np.float32
ROUND_SHIFT = F32(12582912.0)  # 1.5 * 2^23
COEFFS = (F32(0.0550090596), F32(0.242210969), F32(0.693282902), F32(1.0))
TOP_LOG2 = 32.0  # kBoundedTopLog2


def fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """float32 fused multiply-add: the float32 product is exact in float64."""
    return (np.float64(a) * np.float64(b) + np.float64(c)).astype(F32)


def exp2_fma_affine(t: np.ndarray, a: F32, k: F32) -> np.ndarray:
    base = F32(ROUND_SHIFT - k)
    shifted = fma32(t, a, base)
    f = fma32(t, a, (base - shifted).astype(F32))
    p = fma32(f, COEFFS[0], COEFFS[1])
    p = fma32(p, f, COEFFS[2])
    p = fma32(p, f, COEFFS[3])
    n_bits = shifted.view(np.uint32).astype(np.uint64) << np.uint64(23)  # n into the exponent
    bits = p.view(np.uint32).astype(np.uint64) + n_bits
    return (bits & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(F32)


@pytest.mark.parametrize("cap", [1.0 / 1024, 0.3, 1.0, 5.0, 20.0, 30.0, 41.5, 50.0])
def test_exp2_fma_affine_error_and_range(cap: float) -> None:
    c_log2 = F32(cap * 1.4426950408889634)
    k = F32(math.ceil(float(c_log2) - TOP_LOG2))  # fwd_bounded_bias
    t = np.concatenate([np.linspace(-1.0, 1.0, 200_001), [-1.0, 1.0, 0.0]]).astype(F32)
    got = exp2_fma_affine(t, c_log2, k).astype(np.float64)
    want = np.exp2(np.float64(t) * np.float64(c_log2) - np.float64(k))
    rel = np.abs(got / want - 1.0)
    assert rel.max() < 1.2e-4, (cap, rel.max(), t[rel.argmax()])
    assert got.min() >= 2.0**-126, (cap, got.min())
    assert got.max() <= 2.0**32, (cap, got.max())
