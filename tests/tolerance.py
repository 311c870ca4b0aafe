"""The error rule of docs/design.md (numerics and tests) and random inputs for tests."""

from __future__ import annotations

import zlib

import jax
import jax.numpy as jnp
import numpy as np

# (error / allowed bound, check name) of every check in this pytest run: conftest prints the
# worst.
WORST: list[tuple[float, str]] = []


def max_abs_err(x: jax.Array, ref: jax.Array) -> float:
    """Max |x - ref| in float64; NaN anywhere counts as infinite error."""
    d = np.abs(np.asarray(x, np.float64) - np.asarray(ref, np.float64))
    if np.isnan(d).any():
        return float("inf")
    return float(d.max()) if d.size else 0.0


def case_key(*parts: object) -> jax.Array:
    """A PRNG key that depends only on `parts` (a test case's parameters), the same in every run:
    Python's hash() of a string changes from process to process, so a failing case would not
    come back when rerun."""
    return jax.random.key(zlib.crc32(repr(parts).encode()) % 2**31)


# Minimum magnitude for the floor of a log-sum-exp check: lse is a logarithm whose rounding follows
# the scores' terms (|q_i k_i| * scale, about 1 for unit-normal inputs), not its own value, which
# cancels towards 0 when a row sees one key (a float32 dot product of 64 terms summing to 0.02
# rounds at ~1e-7 in any order; seen in CI, and in 1 of 300 seeds of that case).
LSE_MIN_MAGNITUDE = 1.0


def assert_close_by_rule(
    name: str, got, oracle, baseline, dtype, min_magnitude: float = 1e-2
) -> float:
    """got passes when its error vs the float64 oracle is at most 2x the error of plain XLA in the
    same dtype (baseline) plus a floor: one unit of rounding at the oracle's magnitude for 16-bit
    dtypes, eight for float32 (where plain XLA's tree-shaped sums can be nearly exact and a blocked
    online softmax legitimately differs by a few ulps of summation order).

    The magnitude the floor is taken at is at least `min_magnitude` (1e-2; LSE_MIN_MAGNITUDE for
    log-sum-exps): a gradient that is exactly zero by
    cancellation (dq with one key: dS = P * (dP - rowsum(dO * O)) = 0) comes out of any fused
    backward as float32 rounding of the cancelling terms (~3e-6 at head dim 256, fp16, seen on the
    H200), while plain XLA happens to cancel exactly, so "2x XLA's error" alone would demand an
    exact zero. Non-degenerate gradients are ~1 in these tests and are unaffected.

    Infinite entries (lse of a row that sees no key) must match exactly. Returns the error ratio.
    """
    got = np.asarray(got, np.float64)
    oracle = np.asarray(oracle, np.float64)
    baseline = np.asarray(baseline, np.float64)
    assert got.shape == oracle.shape, f"{name}: shape {got.shape} != {oracle.shape}"
    inf = np.isinf(oracle)
    np.testing.assert_array_equal(got[inf], oracle[inf], err_msg=f"{name}: infinite entries")
    got, oracle, baseline = got[~inf], oracle[~inf], baseline[~inf]
    assert np.isfinite(got).all(), f"{name}: non-finite values"
    err = max_abs_err(got, oracle)
    base = max_abs_err(baseline, oracle)
    scale = float(np.abs(oracle).max()) if oracle.size else 0.0
    ulps = 1.0 if jnp.dtype(dtype).itemsize == 2 else 8.0
    floor = ulps * float(jnp.finfo(dtype).eps) * max(scale, min_magnitude)
    bound = 2.0 * base + floor
    ratio = err / bound if bound > 0 else 0.0
    WORST.append((ratio, name))
    assert err <= bound, f"{name}: max error {err:.3e} > 2 x XLA's {base:.3e} + {floor:.1e}"
    return ratio


def random_qkv(key, b, sq, sk, hq, hkv, d, dv, dtype):
    """Fresh normal inputs (never zeros) in `dtype`."""
    kq, kk, kv = jax.random.split(key, 3)
    q = jax.random.normal(kq, (b, sq, hq, d), jnp.float32).astype(dtype)
    k = jax.random.normal(kk, (b, sk, hkv, d), jnp.float32).astype(dtype)
    v = jax.random.normal(kv, (b, sk, hkv, dv), jnp.float32).astype(dtype)
    return q, k, v
