"""Host model of the forward kernel's online softmax (cuda/hopper/fwd/softmax.cuh OnlineSoftmax).

Replays OnlineSoftmax::update / finalize and the consumer's O update in float32 for one row at a
time: key blocks run from the last to the first, as in consume_tile (cuda/hopper/fwd/mainloop.cuh);
the first block computed only sets the max, the sum and P; each later block n issues
O += P(n + 1) V(n + 1), takes its own update, then O *= o_scale (fwd_pipelined_step); the last
PV, O += P(0) V(0), follows the loop; the epilogue stores O times finalize's 1 / sum
(fwd/epilogue.cuh). exp2 is ex2.approx.ftz (subnormal results flushed to zero); masked scores and
the keys past the end of the last, partial block are -inf; P is rounded to bf16 before the PV
product, as the kernel packs it. Compares O and lse with a float64 softmax for the block widths
of the configurations (80, 128, 176) on rows whose max grows along the kernel's order (every
block, every few blocks), whose max sits in the first block computed, whose first blocks computed
are fully masked, and with no visible key at all.

Run: python3 tests/gpu/cuda/fwd_softmax_model.py   (exits non-zero on a mismatch)
"""

from __future__ import annotations

import math
import sys

import numpy as np

F32 = np.float32
LOG2E = 1.4426950408889634


def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 (round to nearest even) -> float32, as __floats2bfloat162_rn."""
    b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return b.astype(np.uint32).view(np.float32)


def exp2_approx(x: np.ndarray) -> np.ndarray:
    """ex2.approx.ftz.f32: MUFU is within 2 ulp, exact here; results below 2^-126 flush to 0."""
    x = np.asarray(x, dtype=np.float32)
    y = np.exp2(x.astype(np.float64)).astype(np.float32)
    return np.where(x < -126, F32(0), y).astype(np.float32)


def kernel_row(s: np.ndarray, v: np.ndarray, scale: float, block: int):
    """One row: scores s (float32, -inf masked), values v [keys, d]. Returns stored O and lse."""
    scale_log2 = F32(scale * LOG2E)
    row_max, row_sum = F32(-np.inf), F32(0.0)
    o = np.zeros(v.shape[1], np.float32)
    pending = None  # P and V of the block whose PV the next step issues
    for n in range((s.size + block - 1) // block - 1, -1, -1):
        sb = s[n * block:(n + 1) * block]
        vb = v[n * block:(n + 1) * block]
        # OnlineSoftmax::update
        mx = F32(max(row_max, sb.max()))
        max_scaled = F32(0) if mx == -np.inf else F32(mx * scale_log2)
        o_scale = exp2_approx(F32(row_max * scale_log2) - max_scaled)
        row_max = mx
        x = (sb.astype(np.float64) * np.float64(scale_log2) - np.float64(max_scaled)).astype(F32)
        p = exp2_approx(x)  # fmaf(s, scale_log2, -max_scaled): one rounding
        # p sums per thread in the kernel (the quad is summed in finalize); the order does not
        # matter at this tolerance
        row_sum = F32(row_sum * o_scale + F32(p.sum(dtype=np.float32)))
        if pending is not None:  # fwd_pipelined_step: O += P(n + 1) V(n + 1), then O *= o_scale
            pp, pv = pending
            o = (o + bf16_round(pp).astype(np.float64) @ pv.astype(np.float64)).astype(np.float32)
            o = (o * o_scale).astype(np.float32)
        pending = (p, vb)
    if pending is not None:  # consume_tile's last PV: O += P(0) V(0)
        pp, pv = pending
        o = (o + bf16_round(pp).astype(np.float64) @ pv.astype(np.float64)).astype(np.float32)
    # OnlineSoftmax::finalize, then store_o's O * o_scale
    empty = not row_sum > 0
    o_norm = F32(0) if empty else F32(F32(1) / row_sum)
    lse = -np.inf if empty else float(F32(row_max * F32(scale))) + math.log(float(row_sum))
    return (o * o_norm).astype(np.float32), lse


def reference(s: np.ndarray, v: np.ndarray, scale: float):
    s64 = s.astype(np.float64) * scale
    if not np.isfinite(s64).any():
        return np.zeros(v.shape[1]), -np.inf
    m = s64[np.isfinite(s64)].max()
    p = np.exp(s64 - m)
    return p @ v.astype(np.float64) / p.sum(), m + math.log(p.sum())


def main() -> int:
    rng = np.random.default_rng(0)
    d, scale = 64, 1.0 / 8.0
    failures = 0
    cases = []
    for sk, growth in ((1000, 60.0), (3000, 60.0), (777, -60.0), (2048, 0.0), (500, 400.0)):
        ramp = growth * (sk - 1 - np.arange(sk)) / sk / scale  # scaled-score growth of `growth`
        cases.append((f"sk={sk} growth={growth}", (rng.standard_normal(sk) * 3 + ramp)))
    s = rng.standard_normal(1000) * 3
    s[600:] = -np.inf  # the first blocks the kernel computes (the last keys) are fully masked
    cases.append(("last 400 keys masked", s))
    cases.append(("no visible key", np.full(300, -np.inf)))
    for name, s in cases:
        s = s.astype(np.float32)
        v = rng.standard_normal((s.size, d)).astype(np.float32)
        o_ref, lse_ref = reference(s, v, scale)
        for block in (80, 128, 176):
            o, lse = kernel_row(s, v, scale, block)
            err = float(np.abs(o - o_ref).max())
            lse_err = 0.0 if lse == lse_ref else abs(lse - lse_ref)
            ok = err < 2e-2 and lse_err < 1e-4 and np.isfinite(o).all()
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {name:24s} N={block:3d}: max|o-ref| {err:.2e} "
                  f"|lse-ref| {lse_err:.1e}")
    print("fwd softmax model:", "FAILED" if failures else "OK")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
